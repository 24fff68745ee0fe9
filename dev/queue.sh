#!/usr/bin/env bash
# The long CPU experiments one after another, each resumable (finished runs are kept, an interrupted
# one resumes), so a stopped machine loses at most one evaluation interval: run it again to go on.
#   mkdir -p out-queue && nohup bash dev/queue.sh > out-queue/log 2>&1 &
# Many hours on 2 cores in all (each experiment prints or documents its own estimate); each writes its
# results/ files when it finishes. One copy at a time: two would train the same run directories.
# A machine may not outlive its session: every few minutes the finished runs are kept in results/runs/
# (experiments/keep.py; commit them), and a new machine's queue starts from what was kept.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python}
$py -m experiments.keep restore
(while sleep 300; do $py -m experiments.keep save > /dev/null; done) &
saver=$!
trap 'kill $saver; $py -m experiments.keep save' EXIT
$py prepare.py --quiet                                                  # tiny Shakespeare (the quick start's)
$py prepare.py --dataset shakespeare-plays --quiet                      # the CPU comparison's
$py prepare.py --dataset cpu-mix --name cpu-mix-1k --vocab_size 1024 --quiet   # the scaling study's
$py prepare.py --dataset cpu-mix --name cpu-mix-8k --vocab_size 8192 --quiet
$py -m experiments.compare --preset cpu   # issue 29: norms, steps to learned's loss, echo, layers
$py -m experiments.extension         # issue 29: adding words at V = 8,192
$py -m experiments.fairness --base_runs out-compare/cpu   # issue 30 (its base runs: the comparison's)
$py -m experiments.scaling           # issue 30: the third seed and the depth axis
