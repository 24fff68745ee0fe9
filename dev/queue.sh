#!/usr/bin/env bash
# The long CPU experiments, each resumable (finished runs are kept, an interrupted one resumes), so a
# stopped machine loses at most one evaluation interval: run it again to go on.
#   mkdir -p out-queue && nohup bash dev/queue.sh > out-queue/log 2>&1 &
# Two lanes of one thread each: on these 2 cores two single-threaded runs side by side finish 1.2x
# more runs an hour than one run on both threads (dev/LOG.md, 2026-12-02), and a run's numbers do not
# depend on its thread count. Lane b makes part of the extension grid's models before its own work; a
# run or grid cell both lanes reach is made by one while the other waits (experiments/runs.py's
# claimed); the scaling points are split between the lanes. Each lane's log is out-queue/lane-{a,b}. One copy of this
# script at a time.
# A machine may not outlive its session: every few minutes the finished runs are kept in results/runs/
# (experiments/keep.py; commit them), and a new machine's queue starts from what was kept.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python}
mkdir -p out-queue
$py -m experiments.keep restore
(while sleep 300; do $py -m experiments.keep save > /dev/null; done) &
saver=$!
trap 'kill $saver; $py -m experiments.keep save' EXIT
$py prepare.py --quiet                                                  # tiny Shakespeare (the quick start's)
$py prepare.py --dataset shakespeare-plays --quiet                      # the CPU comparison's
$py prepare.py --dataset cpu-mix --name cpu-mix-1k --vocab_size 1024 --quiet   # the scaling study's
$py prepare.py --dataset cpu-mix --name cpu-mix-8k --vocab_size 8192 --quiet
# The scaling grid's third seed: issue 30's points (width, depth) first, done 2026-12-02; then the
# vocab, lr and tokens points, the two lanes taking the list from opposite ends (a point both reach
# is shared run by run: experiments/runs.py's made_free_first). A lane's partial report goes to
# out-queue/, the whole grid's to results/ at the end.
partial() { $py -m experiments.scaling --points "$1" --results_dir "out-queue/scaling-$2"; }
export OMP_NUM_THREADS=1
( set -e
  $py -m experiments.extension                                         # issue 29: adding words at V = 8,192
  partial width-384 a1
  partial base,width-64,depth-3,depth-12 a2
  partial tokens-4x,tokens-2x,lr-8e-3,lr-4e-3,lr-1e-3,vocab-8k a3 ) > out-queue/lane-a 2>&1 &
lane_a=$!
( set -e
  $py -m experiments.extension --inputs frozen,kronecker,affine --results_dir out-queue/extension-b  # lane a's last models, first
  $py -m experiments.fairness --base_runs out-compare/cpu              # issue 30 (base runs: the comparison's)
  partial depth-12,depth-3,width-64,base b2
  partial vocab-8k,lr-1e-3,lr-4e-3,lr-8e-3,tokens-2x,tokens-4x b1 ) > out-queue/lane-b 2>&1 &
lane_b=$!
wait $lane_a
wait $lane_b
$py -m experiments.scaling   # every point finished: the whole grid's report, nothing trained
