"""experiments/runs.py's lock: two processes making one run (or report) take turns, the second
finding it made; a process walking a list of runs takes the free ones first. Run: python -m pytest
tests/test_runs.py"""

import subprocess
import sys
import time

from conftest import ROOT
from experiments.runs import claimed, free_first, held

CHILD = """
import sys
from pathlib import Path
from experiments.runs import claimed
run = Path(sys.argv[1])
(run.parent / "waiting").write_text("")
with claimed(run):
    (run.parent / "got").write_text(str(run.exists()))
"""


def test_a_second_process_waits_for_the_run_then_finds_it(tmp_path):
    run = tmp_path / "runs" / "learned-seed0"
    with claimed(run):
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(run)], cwd=ROOT)
        for _ in range(600):  # until the child is at the lock (import torch: seconds)
            if (run.parent / "waiting").exists() or child.poll() is not None:
                break
            time.sleep(0.05)
        time.sleep(0.5)
        assert not (run.parent / "got").exists()  # held here: the child waits
        run.mkdir()  # the run is made while the lock is held
    assert child.wait(timeout=60) == 0 and (run.parent / "got").read_text() == "True"
    assert (run.parent / ".learned-seed0.lock").exists()


HOLDER = """
import sys, time
from pathlib import Path
from experiments.runs import claimed
with claimed(Path(sys.argv[1])):
    Path(sys.argv[2]).write_text("")
    time.sleep(60)
"""


def test_the_runs_another_process_holds_come_last(tmp_path):
    runs = [tmp_path / f"learned-seed{seed}" for seed in range(4)]
    assert list(free_first(range(4), runs.__getitem__)) == [0, 1, 2, 3]  # none held: the list's order
    ready = tmp_path / "ready"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(runs[1]), str(ready)], cwd=ROOT)
    try:
        for _ in range(600):
            if ready.exists() or holder.poll() is not None:
                break
            time.sleep(0.05)
        assert ready.exists() and held(runs[1]) and not held(runs[0])
        assert list(free_first(range(4), runs.__getitem__)) == [0, 2, 3, 1]
    finally:
        holder.kill()
        holder.wait()
    assert not held(runs[1])  # a dead process's claim is gone
    assert list(free_first(range(4), runs.__getitem__)) == [0, 1, 2, 3]
