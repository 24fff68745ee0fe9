"""The frozen-code paper's ternary run: frozen_270m.py with a BitNet b1.58 body.

Identical to config/frozen_270m.py but for `body` and `out_dir` (the same codes, from the float
learned control); its docstring gives the shape, what differs from Gemma's and the prepare
command. Our choice: the float runs' recipe, untuned for the ternary body.

    torchrun --nproc_per_node=8 train.py config/frozen_270m_ternary.py
    python -m tools.export --ckpt out-270m-frozen-ternary   # one packed file of about 46 MB (docs/inference.md)

Estimated cost, from `python train.py config/frozen_270m_ternary.py --dry_run=True`:
    parameters: 100,883,584 trainable = input 0 + body 100,293,760 + head 589,824; fixed input code 16,777,216 values
    compute: 1.28e+09 FLOP a token x 2.05B tokens (3,910 steps of 524,288) = 2.65e+18 FLOP, evaluations included (0.8%)
    memory per GPU at micro-batch 16 x 1024, bfloat16: weights 421 MB + gradients 404 MB + AdamW state 807 MB + weight copies 670 MB + activations 29.4 GB = 31.7 GB
    wall time at 40% MFU: 8 x H100 14.0 min (1.86 GPU-hours); 8 x A100 44.3 min (5.90 GPU-hours)
"""
input = "frozen"
head = "codes"
code_dim = 512
codes_from = "out-270m-learned"
out_dir = "out-270m-frozen-ternary"
body = "ternary"
dataset = "fineweb-edu-262k"
vocab_size = 262144
n_layer = 18
n_head = 4
n_embd = 640
mlp_width = 3072
block_size = 1024
batch_size = 16
gradient_accumulation_steps = 32
max_iters = 3910
lr_decay_iters = 3910
learning_rate = 6e-4
min_lr = 6e-5
warmup_iters = 200
eval_interval = 250
