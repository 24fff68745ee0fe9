"""experiments/depth.py's shape: Bochkov's 32-layer comparison at CPU width, the table 12.5% of the
learned model as in the paper (67.1M of 537M).

    python prepare.py --dataset cpu-mix --name cpu-mix-2560 --vocab_size 2560
    python -m experiments.depth            # this file, once per depth, input and seed

V = 2,560 (cpu-mix-2560: a 2,560-token BPE trained on cpu-mix's training split, as prepare.py trains
every BPE; K = 12 bits) at n_embd 40, 32 pre-norm blocks of 4 heads, the untied head, the tile lift
(config/binary.py's shape, narrower). The learned table is 102,400 of the learned model's 821,800
trainable parameters (12.5%); binary and affine train 719,400. 810 steps of 2,048 tokens = 1.66M
tokens, 2.02 per trainable parameter of the learned model (the paper: ~17B for 537M, 32), 0.46 epochs
of the corpus (3.62M training tokens). Why so narrow: at 32 layers a step here costs about the same per
token at n_embd 40, 48 or 64 (1,000-1,100 tokens/s on one thread), and 2 tokens a parameter makes a
run's cost grow with the square of its parameters; 40 wide keeps the study's 21 runs near 6 lane-hours
(64 wide: about 18). The optimizer settings are the CPU comparison's (ours: the papers give none), the
same for every input and depth; updates with a non-finite loss or gradient are skipped and logged.
"""
dataset = "cpu-mix-2560"
eval_interval = 90
eval_iters = 20
log_interval = 30
n_layer = 32
n_head = 4
n_embd = 40
block_size = 128
dropout = 0.0
batch_size = 16
gradient_accumulation_steps = 1
learning_rate = 2e-3
max_iters = 810
lr_decay_iters = 810
warmup_iters = 100
min_lr = 2e-4
compile = False
nonfinite = "skip"
