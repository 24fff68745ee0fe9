"""experiments/depth.py's shape: Bochkov's 32-layer comparison at CPU width, the table 12.5% of the
learned model as in the paper (67.1M of 537M).

    python prepare.py --dataset cpu-mix --name cpu-mix-4k --vocab_size 4096
    python -m experiments.depth            # this file, once per depth, input and seed

V = 4,096 (cpu-mix-4k, a 4,096-token BPE trained on cpu-mix's training split as prepare.py trains every
BPE) at n_embd 64, 32 pre-norm blocks of 4 heads, the untied head, the tile lift (config/binary.py's
shape, narrower). The learned table is 262,144 of the learned model's 2,101,312 trainable parameters
(12.5%); binary and affine train 1,839,168. 2,100 steps of 2,048 tokens = 4.30M tokens, 2.05 per
trainable parameter of the learned model (the paper: ~17B for 537M, 32), 1.29 epochs of the
corpus (3.34M training tokens). The optimizer settings are the CPU comparison's (ours: the papers
give none), the same for every input and depth; updates with a non-finite loss or gradient are
skipped and logged.
"""
dataset = "cpu-mix-4k"
eval_interval = 150
eval_iters = 40
log_interval = 50
n_layer = 32
n_head = 4
n_embd = 64
block_size = 128
dropout = 0.0
batch_size = 16
gradient_accumulation_steps = 1
learning_rate = 2e-3
max_iters = 2100
lr_decay_iters = 2100
warmup_iters = 100
min_lr = 2e-4
compile = False
nonfinite = "skip"
