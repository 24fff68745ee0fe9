"""experiments/runs.py's lock: two processes making one run (or report) take turns, the second
finding it made; a process walking a list of runs takes the free ones first. Run: python -m pytest
tests/test_runs.py"""

import subprocess
import sys
import time

import pytest

from conftest import ROOT
from experiments import runs as runs_module
from experiments.runs import claimed, held, made_free_first, run_all, run_dir
from tablefree.common import UserError

CHILD = """
import sys
from pathlib import Path
from experiments.runs import claimed
run = Path(sys.argv[1])
(run.parent / "waiting").write_text("")
with claimed(run):
    (run.parent / "got").write_text(str(run.exists()))
"""


def wait_for(path, process):
    """Until the child process wrote path (import torch: seconds), or died."""
    for _ in range(600):
        if path.exists() or process.poll() is not None:
            return
        time.sleep(0.05)


def test_a_second_process_waits_for_the_run_then_finds_it(tmp_path):
    run = tmp_path / "runs" / "learned-seed0"
    with claimed(run):
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(run)], cwd=ROOT)
        wait_for(run.parent / "waiting", child)  # the child is at the lock
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


def made_order(runs):
    """made_free_first over 4 runs: (the order they were made in, what it returned)."""
    order = []
    made = made_free_first(range(4), runs.__getitem__, lambda seed: order.append(seed) or f"run {seed}")
    return order, made


def test_the_runs_another_process_holds_come_last(tmp_path):
    runs = [tmp_path / f"learned-seed{seed}" for seed in range(4)]
    in_order = ([0, 1, 2, 3], ["run 0", "run 1", "run 2", "run 3"])
    assert made_order(runs) == in_order  # none held: the list's order
    ready = tmp_path / "ready"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(runs[1]), str(ready)], cwd=ROOT)
    try:
        wait_for(ready, holder)
        assert ready.exists() and held(runs[1]) and not held(runs[0])
        assert made_order(runs) == ([0, 2, 3, 1], in_order[1])  # made last, returned in its place
    finally:
        holder.kill()
        holder.wait()
    assert not held(runs[1])  # a dead process's claim is gone
    assert made_order(runs) == in_order


def test_run_all_takes_every_free_run_before_a_held_one_and_frozen_last(tmp_path, monkeypatch):
    made = []  # the run directories' names, in the order they were made

    def train_run(argv, directory, *args, **kwargs):
        made.append(directory.name)
        return directory.name
    monkeypatch.setattr(runs_module, "run_arguments", lambda settings, kind, seed, root: [])
    monkeypatch.setattr(runs_module, "train_run", train_run)
    with claimed(run_dir(tmp_path, "learned", 1)):  # another lane is making learned seed 1
        runs = run_all([], {"max_iters": 10}, ["learned", "frozen", "binary"], 2, tmp_path)
    assert made == ["learned-seed0", "binary-seed0", "binary-seed1", "learned-seed1", "frozen-seed0", "frozen-seed1"]
    assert runs == {kind: [f"{kind}-seed0", f"{kind}-seed1"] for kind in ("learned", "frozen", "binary")}
    assert list(runs) == ["learned", "frozen", "binary"]


def test_a_run_kept_with_other_settings_is_refused_not_reported_as_the_new_ones(data_dir, tmp_path, capsys):
    """issue 54: a study run again into the same --runs_dir with another setting once read the old
    run and reported it under the new setting; now it names the setting. Where the run is kept, how
    often it logs and the like (runs_module.WHERE) do not make it another run."""
    from conftest import TINY
    argv = ["--data_dir", str(data_dir), "--dataset=tiny", *TINY, "--max_iters=2", "--eval_interval=2",
            "--lr_decay_iters=2"]
    directory = tmp_path / "learned-seed0"
    runs_module.train_run(argv, directory, 2, "learned")
    assert runs_module.train_run([*argv, "--log_interval=5", "--device=cpu"], directory, 2, "again")["val_loss"] > 0
    with pytest.raises(UserError, match=r"learned-seed0 holds a run made with learning_rate=0.003, not 0.001; give "
                                        r"the study another --runs_dir"):
        runs_module.train_run([*argv, "--learning_rate=1e-3"], directory, 2, "learned")
    assert runs_module.other_settings(tmp_path / "nothing", argv) == {}


def test_a_report_is_replaced_only_by_its_own_command_line_and_never_a_committed_one(tmp_path):
    """experiments.outputs.results_files: another command line's report, or one of the repository's committed
    results, is refused in one line naming --results_dir and --overwrite; the same command line goes on."""
    from experiments.outputs import results_files
    from experiments.runs import ROOT
    from tablefree.reports import markdown
    md, _, _ = results_files(tmp_path, "cpu", "compare", ["--preset", "cpu", "--seeds", "3"])
    md.write_bytes(markdown("python -m experiments.compare --preset cpu --seeds 3", "# the real one\n"))
    assert results_files(tmp_path, "cpu", "compare", ["--preset", "cpu", "--seeds", "3"])[0] == md  # its own
    with pytest.raises(UserError, match=r"is the report of `python -m experiments.compare --preset cpu --seeds 3`, "
                                        r"another command line; give --results_dir another folder, or --overwrite"):
        results_files(tmp_path, "cpu", "compare", ["--preset", "cpu", "--seeds", "1"])
    assert results_files(tmp_path, "cpu", "compare", ["--seeds", "1"], overwrite=True)[0] == md  # the fix works
    if (ROOT / ".git").exists():  # a git checkout (CI's clone): the committed results are known
        with pytest.raises(UserError, match="results/cpu.md is one of the repository's committed results"):
            results_files(ROOT / "results", "cpu", "compare", ["--preset", "cpu", "--seeds", "3"])
    assert "# the real one" in md.read_text()  # nothing was written by the refusals
