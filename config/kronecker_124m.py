"""Kronecker Embeddings' headline run: GPT-2 124M, input = 'kronecker', against config/tied_124m.py.

From "Kronecker Embeddings" (2026, arXiv:2605.29459): nanoGPT's GPT-2 124M (12 layers, n_embd 768,
12 heads, context 1024), GPT-2's 50,257-token BPE, 2.5B FineWeb-Edu tokens, three seeds, against
the *tied* BPE table (config/tied_124m.py); pos_dim 16, the paper's runs (D = 256 x 16 = 4,096).
Our choice, where the paper gives none: 524,288 tokens a step for 4,768 steps (= 2.50B tokens),
AdamW 6e-4 -> 6e-5 (nanoGPT's GPT-2 124M) with 200 warmup steps, bf16, torch.compile, 8 GPUs.
Our blocks, not nanoGPT's: rotary positions instead of a 1,024 x 768 position table, no biases,
and an untied trainable head (the Kronecker input has no table to tie it to).

    pip install datasets
    python prepare.py --dataset fineweb-edu --tokenizer gpt2 --name fineweb-edu-gpt2 --max_tokens 2.6e9 --val_fraction 0.0005 --workers 16
    torchrun --nproc_per_node=8 train.py config/kronecker_124m.py
    torchrun --nproc_per_node=8 train.py config/kronecker_124m.py --seed=1 --out_dir=out-124m-kronecker-1   # and --seed=2

Estimated cost, from `python train.py config/kronecker_124m.py --dry_run=True`:
    parameters: 126,696,960 trainable = input 3,145,728 + body 84,953,856 + head 38,597,376; fixed input code 854,369 values
    compute: 8.55e+08 FLOP a token x 2.50B tokens (4,768 steps of 524,288) = 2.15e+18 FLOP, evaluations included (0.9%)
    memory per GPU at micro-batch 16 x 1024, bfloat16: weights 508 MB + gradients 507 MB + AdamW state 1.01 GB + weight copies 247 MB + activations 9.73 GB = 12.0 GB
    wall time at 40% MFU: 8 x H100 11.3 min (1.51 GPU-hours); 8 x A100 36.0 min (4.80 GPU-hours)
"""
input = "kronecker"
pos_dim = 16
out_dir = "out-124m-kronecker"
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
