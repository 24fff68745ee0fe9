"""CPU quick start: a 4-layer, n_embd 160 GPT on tiny Shakespeare (1,024-token BPE), about 5 minutes
on 2 cores.

    python prepare.py
    python train.py config/shakespeare.py            # binary codes (K = 10 bits, tiled 16 times)
    python train.py config/shakespeare.py --input=learned --out_dir=out-learned
    python sample.py --ckpt out/
"""
out_dir = "out"
dataset = "shakespeare"
eval_interval = 100
eval_iters = 20
log_interval = 10
input = "binary"
n_layer = 4
n_head = 4
n_embd = 160  # a multiple of K = 10, so every bit is tiled the same number of times
block_size = 128
dropout = 0.1
batch_size = 16
gradient_accumulation_steps = 1
learning_rate = 2e-3
max_iters = 1000
lr_decay_iters = 1000
warmup_iters = 50
min_lr = 2e-4
compile = False  # on CPU compiling costs more time than it saves for so short a run
