"""experiments/runs.py's lock: two processes making one run (or report) take turns, the second
finding it made. Run: python -m pytest tests/test_runs.py"""

import subprocess
import sys
import time

from conftest import ROOT
from experiments.runs import claimed

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
