"""The papers' 32-layer shape, input = 'learned': the baseline: a trainable 65,536 x 1,024 input table (67,108,864 parameters).

Identical to config/binary.py but for `input` and `out_dir`; its docstring gives the shared
settings (the papers' and ours), the prepare command and the estimated cost.

    torchrun --nproc_per_node=8 train.py config/learned.py

Estimated cost (not measured), as for config/binary.py: ~39 H100-hours at 40% MFU (~5 h on 8).
"""
input = "learned"
out_dir = "out-learned"
dataset = "fineweb-edu"
