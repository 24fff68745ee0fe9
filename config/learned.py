"""The papers' 32-layer shape, input = 'learned': the baseline: a trainable 65,536 x 1,024 input table (67,108,864 parameters).

Identical to config/binary.py but for `input` and `out_dir`; its docstring gives the shared
settings (the papers' and ours), the prepare command and the estimated cost.

    torchrun --nproc_per_node=8 train.py config/learned.py
"""
input = "learned"
out_dir = "out-learned"
dataset = "fineweb-edu"
