"""Kronecker Embeddings' baseline: GPT-2 124M with a learned input table tied to the head ("BPE-tied").

The control of config/kronecker_124m.py, whose docstring gives the paper's settings and ours and
the prepare command; this file differs from it only in the input: a trainable 50,257 x 768 table
(38.6M parameters) that is also the output head (tie_weights).

    torchrun --nproc_per_node=8 train.py config/tied_124m.py
    torchrun --nproc_per_node=8 train.py config/tied_124m.py --seed=1 --out_dir=out-124m-tied-1   # and --seed=2

Estimated cost, from `python train.py config/tied_124m.py --dry_run=True`:
    parameters: 123,551,232 trainable = input 38,597,376 + body 84,953,856 + head 0; fixed input code 0 values
    compute: 8.55e+08 FLOP a token x 2.50B tokens (4,768 steps of 524,288) = 2.15e+18 FLOP, evaluations included (0.9%)
    memory per GPU at micro-batch 16 x 1024, bfloat16: weights 494 MB + gradients 494 MB + AdamW state 988 MB + weight copies 247 MB + activations 9.72 GB = 11.9 GB
    wall time at 40% MFU: 8 x H100 11.3 min (1.51 GPU-hours); 8 x A100 36.0 min (4.80 GPU-hours)
"""
input = "learned"
tie_weights = True
out_dir = "out-124m-tied"
dataset = "fineweb-edu-gpt2"
vocab_size = 50257
n_layer = 12
n_head = 12
n_embd = 768
block_size = 1024
batch_size = 16
gradient_accumulation_steps = 32
max_iters = 4768
lr_decay_iters = 4768
learning_rate = 6e-4
min_lr = 6e-5
warmup_iters = 200
eval_interval = 250
