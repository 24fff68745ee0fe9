#!/usr/bin/env bash
# The long CPU experiments, each resumable (finished runs are kept, an interrupted one resumes), so a
# stopped machine loses at most one evaluation interval: run it again to go on.
#   mkdir -p out-queue && nohup bash dev/queue.sh > out-queue/log 2>&1 &     # arguments: the study's
# Two lanes of one thread each: on these 2 cores two single-threaded runs side by side finish 1.2x
# more runs an hour than one run on both threads (dev/LOG.md, 2026-12-02), and a run's numbers do not
# depend on its thread count. A run or grid cell both lanes reach is made by one while the other
# waits (experiments/runs.py's claimed). Each lane's log is out-queue/lane-{a,b}. One copy of this
# script at a time.
# A machine may not outlive its session: every few minutes the finished runs are kept in results/runs/
# (experiments/keep.py; commit them), and a new machine's queue starts from what was kept.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python )}  # the project's venv if there is one
mkdir -p out-queue
$py -m experiments.keep restore
(while sleep 300; do $py -m experiments.keep save > /dev/null; done) &
saver=$!
trap 'kill $saver; $py -m experiments.keep save' EXIT
$py prepare.py --dataset cpu-mix --name cpu-mix-1k --vocab_size 1024 --quiet   # the scaling study's, bit for bit
export OMP_NUM_THREADS=1
# Issue 76: Bochkov's comparison at 32 x 160 (experiments/depth_width.py: 32 x 160 first, then 32 x 80, then 24 x 160;
# 3, 6 and 12 layers are the scaling study's kept runs). Both lanes walk the same list (a run both reach is made by
# one: experiments/runs.py's claimed). Extra arguments go to the study (e.g. --seeds_24 2). A lane's partial
# reports go to out-queue/, the whole study's to results/.
lane() {  # $1: where this lane's reports go
    $py -m experiments.depth_width --results_dir "$1" "${@:2}"
}
lane results "$@" > out-queue/lane-a 2>&1 &
lane_a=$!
sleep 20  # lane a claims its first run before lane b looks
lane out-queue/lane-b-reports "$@" > out-queue/lane-b 2>&1 &
lane_b=$!
wait $lane_a
wait $lane_b
