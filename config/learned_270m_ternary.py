"""The frozen-code paper's ternary control: learned_270m.py with a BitNet b1.58 body.

Identical to config/learned_270m.py but for `body` and `out_dir`; config/frozen_270m.py's docstring
gives the shape, what differs from Gemma's and the prepare command. Our choice: the float runs'
recipe, untuned for the ternary body.

    torchrun --nproc_per_node=8 train.py config/learned_270m_ternary.py

Estimated cost, from `python train.py config/learned_270m_ternary.py --dry_run=True`:
    parameters: 268,065,920 trainable = input 167,772,160 + body 100,293,760 + head 0; fixed input code 0 values
    compute: 1.75e+09 FLOP a token x 2.05B tokens (3,910 steps of 524,288) = 3.62e+18 FLOP, evaluations included (0.8%)
    memory per GPU at micro-batch 16 x 1024, bfloat16: weights 1.07 GB + gradients 1.07 GB + AdamW state 2.14 GB + weight copies 737 MB + activations 29.4 GB = 34.4 GB
    wall time at 40% MFU: 8 x H100 19.1 min (2.54 GPU-hours); 8 x A100 1.01 h (8.05 GPU-hours)
"""
input = "learned"
tie_weights = True
out_dir = "out-270m-learned-ternary"
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
