"""Fine-tune the quick-start model on the King James Bible: a domain shift (nanoGPT's finetune_shakespeare).

    python prepare.py && python train.py config/shakespeare.py          # the model to start from, in out/
    apt-get install bible-kjv                                           # the text (Debian's package)
    python prepare.py --dataset kjv --tokenizer_from data/shakespeare   # the Bible in the model's tokens
    python train.py config/finetune_kjv.py
    python sample.py --ckpt out-kjv/

A new run from out/ckpt.pt's weights: step 0, a fresh AdamW, this schedule, its own out_dir. The
model settings (input, shape, fixed codes) come from the checkpoint; only dropout may be changed.
Held-out text: 10% of the Bible's 66 books, whole (prepare.py's document split). The schedule is
our choice (not tuned): a tenth of the quick start's steps at 0.3x its peak learning rate.
"""
init_from = "out"
out_dir = "out-kjv"
dataset = "kjv"
eval_interval = 100
eval_iters = 20
log_interval = 10
batch_size = 16
gradient_accumulation_steps = 1
learning_rate = 6e-4
max_iters = 300
lr_decay_iters = 300
warmup_iters = 20
min_lr = 6e-5
compile = False
