"""experiments/scaling.py's base point: the CPU comparison's preset (compare_cpu.py, applied first) on the
larger cpu-mix corpus; this file holds only what differs.

    python prepare.py --dataset cpu-mix --name cpu-mix-1k --vocab_size 1024
    python prepare.py --dataset cpu-mix --name cpu-mix-8k --vocab_size 8192
    python -m experiments.scaling                      # the grid in scaling.POINTS, from this base

cpu-mix is Shakespeare's 38 plays, the King James Bible (66 books) and gensim's Wikipedia sample
(105 articles): 12.1 MB of text in 209 documents, whole documents held out (val_fraction 0.1).
The base point is the CPU preset's model and budget (6 layers, n_embd 160, 1,200 steps of 2,048
tokens = 2.46M tokens); scaling.py varies the width, the tokens, the vocabulary and the
learning rate one at a time from here. Optimizer settings as the CPU preset (our choice).
"""
dataset = "cpu-mix-1k"
eval_interval = 200  # fewer, larger evaluations: the val split is 0.55M tokens
eval_iters = 40
log_interval = 100
# At 12 layers a binary run's gradient overflows on the rare step whose batch starts a row with the
# all-ones code (id V - 1; docs/inputs.md): skip that step, as the log and results/scaling.md say.
# A run without such a step is the same with 'stop' or 'skip', so the runs before this line are unchanged.
nonfinite = "skip"
