"""The papers' 32-layer shape, input = 'affine': 16-bit codes recoded by a fixed random A in GL(16, 2) and b (no input parameters).

Identical to config/binary.py but for `input` and `out_dir`; its docstring gives the shared
settings (the papers' and ours), the prepare command and the estimated cost.

    torchrun --nproc_per_node=8 train.py config/affine.py

Estimated cost (not measured), as for config/binary.py: ~39 H100-hours at 40% MFU (~5 h on 8).
"""
input = "affine"
out_dir = "out-affine"
dataset = "fineweb-edu"
