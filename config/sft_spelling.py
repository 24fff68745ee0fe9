"""Supervised fine-tuning of the quick-start model: spell a word letter by letter, loss on the answer only.

    python prepare.py && python train.py config/shakespeare.py          # the model to start from, in out/
    python -m experiments.adaptation --data_only                        # writes data/spelling (below)
    python train.py config/sft_spelling.py
    python -m tools.evaluate --ckpt out-spelling/ --tasks sft           # exact match on held-out words

Each example is the prompt "spell: <word>\n" and the response "w o r d" (then end-of-text), for
the words of tiny Shakespeare's training text; prepare.py --sft masks the prompt out of the loss.
The held-out words (the dataset's val split, 10% of the words by a checksum) are never trained
on. The schedule is our choice (not tuned).
"""
init_from = "out"
out_dir = "out-spelling"
dataset = "spelling"
eval_interval = 100
eval_iters = 20
log_interval = 10
batch_size = 16
gradient_accumulation_steps = 1
learning_rate = 1e-3
max_iters = 400
lr_decay_iters = 400
warmup_iters = 20
min_lr = 1e-4
compile = False
