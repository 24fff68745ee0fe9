"""experiments/compare.py's CPU preset: learned, binary, affine, kronecker, frozen, binary with a ternary
body, and the frozen-code paper's pair (learned tied, frozen with its code head), 3 seeds each,
about 3 hours on 2 cores (24 runs of 6 to 9 minutes each).

    python prepare.py --dataset shakespeare-plays     # 38 plays, whole plays held out for val
    python -m experiments.compare --preset cpu        # this file, once per input and seed

Shakespeare's 38 plays (5 MB, a 1,024-token BPE, K = 10 bits; 2.0M training tokens, 3 whole
plays held out) rather than tiny Shakespeare: each run sees 1200 x 2048 = 2.46M tokens, 1.2
epochs (on tiny Shakespeare's 411k it would be 6). The model is 6 layers of n_embd 160
(16 copies of the 10-bit code), ~2M trainable parameters; with 'kronecker' (pos_dim 16) the
input projection alone is 4,096 x 160 = 655,360 parameters, four times the 163,840 of the
learned table it replaces (at the papers' shape it is 16 times smaller: 4.2M vs 67.1M).
'frozen' derives its 160-bit codes (code_dim 512, capped at n_embd) from the learned run of the
same seed ('frozen+codes' from 'learned+tied''s). The ternary body uses the same optimizer settings as the float one (our choice: the
row measures the cost of ternary weights at equal settings, not a tuned ternary recipe).
"""
dataset = "shakespeare-plays"
eval_interval = 100
eval_iters = 20
log_interval = 50
n_layer = 6
n_head = 4
n_embd = 160
block_size = 128
dropout = 0.0
batch_size = 16
gradient_accumulation_steps = 1
learning_rate = 2e-3
max_iters = 1200
lr_decay_iters = 1200
warmup_iters = 50
min_lr = 2e-4
compile = False
