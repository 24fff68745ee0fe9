"""experiments/regime.py's shape: the frozen-code paper's regime at CPU scale, where the tied table
is most of the model (Gemma 3 270M: 168M of 268M parameters, 63%).

    python prepare.py --dataset cpu-mix --name cpu-mix-8k --vocab_size 8192
    python -m experiments.regime            # this file, once per arm and seed

V = 8,192 (cpu-mix-8k: 3.02M training tokens) and a narrow, shallow body: 6 layers of n_embd 64.
The tied table is 524,288 of learned+tied's 820,032 trainable parameters (63.9%); frozen with its
code head trains 308,032 (the body and its n_embd x D + V head, D = 64 bits), so the table costs
2.66x the trainable parameters (the paper: 63% and 2.6x). 3,000 steps of 2,048 tokens = 6.14M
tokens, 7.5 per trainable parameter of the learned model (the paper: 2.05B for 268M, 7.6), 2.0
epochs of the corpus. Optimizer settings as the CPU comparison's (our choice: the papers give none).
"""
dataset = "cpu-mix-8k"
eval_interval = 250
eval_iters = 40
log_interval = 250
n_layer = 6
n_head = 4
n_embd = 64
block_size = 128
dropout = 0.0
batch_size = 16
gradient_accumulation_steps = 1
learning_rate = 2e-3
max_iters = 3000
lr_decay_iters = 3000
warmup_iters = 100
min_lr = 2e-4
compile = False
nonfinite = "skip"
