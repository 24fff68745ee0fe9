"""Tools used after training, each run from the checkout's root as `python -m tools.<name>`:
evaluate, export, extend (and their helpers: scoring, tasks, probes, harness, hf)."""
