"""Experiments built on train.py, each run from the checkout's root as `python -m experiments.<name>`:
compare, scaling, bench (and their helpers: runs, bench_train, bench_infer; configs in config/)."""
