"""The papers' 32-layer shape, input = 'affine': 16-bit codes recoded by a fixed random A in GL(16, 2) and b (no input parameters).

Identical to config/binary.py but for `input` and `out_dir`; its docstring gives the shared
settings (the papers' and ours), the prepare command and the estimated cost.

    torchrun --nproc_per_node=8 train.py config/affine.py

Estimated cost, from `python train.py config/affine.py --dry_run=True`:
    parameters: 469,828,608 trainable = input 0 + body 402,719,744 + head 67,108,864; fixed input code 272 values
    compute: 3.22e+09 FLOP a token x 17.0B tokens (32,425 steps of 524,288) = 5.49e+19 FLOP, evaluations included (0.2%)
    memory per GPU at micro-batch 16 x 1024, bfloat16: weights 1.88 GB + gradients 1.88 GB + AdamW state 3.76 GB + weight copies 940 MB + activations 27.0 GB = 35.5 GB
    wall time at 40% MFU: 8 x H100 4.82 h (38.5 GPU-hours); 8 x A100 15.3 h (122 GPU-hours)
"""
input = "affine"
out_dir = "out-affine"
dataset = "fineweb-edu"
vocab_size = 65536
