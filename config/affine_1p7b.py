"""The 1.7B-class follow-up's run, input = 'affine': the bits recoded by one fixed invertible affine map over GF(2) (code_seed 0), no input parameters.

Identical to config/binary_1p7b.py but for `input` and `out_dir`; its docstring gives the paper's
settings and ours (the depth chosen from the parameter count) and the prepare command.

    torchrun --nproc_per_node=8 train.py config/affine_1p7b.py

Estimated cost, from `python train.py config/affine_1p7b.py --dry_run=True`:
    parameters: 1,714,598,400 trainable = input 0 + body 1,613,935,104 + head 100,663,296; fixed input code 272 values
    compute: 1.14e+10 FLOP a token x 100B tokens (190,735 steps of 524,288) = 1.14e+21 FLOP, evaluations included (0.1%)
    memory per GPU at micro-batch 8 x 1024, bfloat16: weights 6.86 GB + gradients 6.86 GB + AdamW state 13.7 GB + weight copies 3.43 GB + activations 32.4 GB = 63.2 GB
    wall time at 40% MFU: 8 x H100 99.8 h (798 GPU-hours); 8 x A100 316 h (2531 GPU-hours)
"""
input = "affine"
out_dir = "out-1p7b-affine"
dataset = "fineweb-edu-100b"
vocab_size = 65536
n_layer = 57
n_head = 12
n_embd = 1536
block_size = 1024
batch_size = 8
gradient_accumulation_steps = 64
max_iters = 190_735
lr_decay_iters = 190_735
learning_rate = 2e-4
min_lr = 2e-5
warmup_iters = 2000
eval_interval = 2000
