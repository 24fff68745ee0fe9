"""Fault injection: kill -9, non-finite losses and bad files never cost finished work.

    python -m pytest tests/test_faults.py              # kills at chosen points (seconds)
    python -m pytest tests/test_faults.py -m slow      # kills at random moments, many times

Runs that are compared bit for bit all run as subprocesses, so they share the same conditions.
"""

import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import train
from conftest import TINY
from experiments.runs import read_run
from model import GPT
from tablefree.checkpoint import load_checkpoint
from tablefree.common import UserError, writing
from tablefree.configurator import resolve
from tablefree.data import Dataset
from tablefree.rundir import read_log

ROOT = Path(__file__).resolve().parent.parent
RUN = ["--dataset=tiny", *TINY, "--input=affine", "--dropout=0.1", "--max_iters=12", "--lr_decay_iters=12", "--eval_interval=4"]
# A child that runs train.py's main with one function wrapped to signal itself (SIGKILL) at a chosen call.
CHILD = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal, even under a parent that ignores it
import {module} as target
original, calls = target.{name}, [0]
def killer(*args, **kwargs):
    calls[0] += 1
    if {condition}:
        os.kill(os.getpid(), signal.{signal_name})
    return original(*args, **kwargs)
target.{name} = killer
import train
train.main(sys.argv[1:])
"""


def train_process(data_dir, out_dir, *extra, kill=None, file_limit=None, signal_name="SIGKILL"):
    """train.py in a subprocess; kill = (module, function, condition on `calls` and `args`) to die at;
    file_limit: the largest file in bytes it may write (`ulimit -f`), as on a nearly full disk."""
    argv = ["--data_dir", str(data_dir), f"--out_dir={out_dir}", *RUN, *extra]
    code = CHILD.format(module=kill[0], name=kill[1], condition=kill[2], signal_name=signal_name) if kill else "import sys, train; train.main(sys.argv[1:])"
    limit = (lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))) if file_limit else None
    return subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "2"}, preexec_fn=limit)


def losses(out_dir):
    return [(r["iter"], r.get("loss"), r.get("val_loss")) for r in read_log(Path(out_dir) / "log.jsonl")]


def assert_same_run(a, b):
    assert losses(a) == losses(b)
    wa, wb = load_checkpoint(a)["model"], load_checkpoint(b)["model"]
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.fixture(scope="module")
def reference(data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("reference")
    done = train_process(data_dir, out)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


@pytest.mark.parametrize("where, kill", [
    # fsyncs 1-2: config.json and its folder, 3-4: the step-4 checkpoint, 5: step 8's file
    ("writing the step-8 checkpoint", ("os", "fsync", "calls[0] == 5")),
    ("between steps 6 and 7", ("train", "lr_at", "args[0] == 6")),
    ("in the first step", ("train", "lr_at", "args[0] == 1")),
])
def test_kill_9_then_resume_matches_the_uninterrupted_run(data_dir, reference, tmp_path, where, kill):
    killed = train_process(data_dir, tmp_path, kill=kill)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    if (tmp_path / "ckpt.pt").exists():
        assert load_checkpoint(tmp_path)["iter_num"] == 4  # the last complete checkpoint, never a torn one
        resumed = train_process(data_dir, tmp_path, "--init_from=resume")
    else:  # killed before the first checkpoint: nothing to resume, start again
        resumed = train_process(data_dir, tmp_path, "--overwrite=True")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert_same_run(reference, tmp_path)


def test_a_full_disk_keeps_the_last_checkpoint_and_the_resumed_run_is_exact(data_dir, reference, tmp_path):
    first = train_process(data_dir, tmp_path, "--max_iters=4")  # a good checkpoint at step 4
    assert first.returncode == 0, first.stderr[-2000:]
    size = (tmp_path / "ckpt.pt").stat().st_size
    full = train_process(data_dir, tmp_path, "--init_from=resume", file_limit=size // 2)  # step 8's save fails
    assert full.returncode == 1 and full.stderr.count("\n") == 1, full.stderr[-2000:]
    assert "cannot write" in full.stderr and "ckpt.pt (File too large); the previous version is intact" in full.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt", "config.json", "log.jsonl"]  # no .tmp left
    assert load_checkpoint(tmp_path)["iter_num"] == 4
    resumed = train_process(data_dir, tmp_path, "--init_from=resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert_same_run(reference, tmp_path)


@pytest.mark.parametrize("fmt, name", [("hf", "hf"), ("gguf", "model.gguf")])
def test_an_export_onto_a_full_disk_is_one_line_and_keeps_the_last_one(reference, tmp_path, fmt, name):
    out = tmp_path / name
    argv = [sys.executable, "-m", "tools.export", "--ckpt", str(reference), "--format", fmt, "--out", str(out)]
    assert subprocess.run(argv, cwd=ROOT, capture_output=True).returncode == 0
    before = {p: p.read_bytes() for p in [out, *out.glob("*")] if p.is_file()}
    largest = max(len(contents) for contents in before.values())
    limit = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (largest // 2, largest // 2))  # noqa: E731
    full = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, preexec_fn=limit)
    assert full.returncode == 1 and full.stderr.count("\n") == 1, full.stderr[-2000:]
    # (File too large), or numpy's "(3072 requested and 1932 written)" for a GGUF's tensors: never "(None)"; and
    # the fix for what it is: the file-size limit, or (a short write, whose cause no errno names) either
    assert f"cannot write {out} (" in full.stderr and "); the previous version is intact: " in full.stderr
    assert ("raise the file-size limit (ulimit -f) or choose another directory" in full.stderr if fmt == "hf" else
            "free some disk space (or raise the file-size limit, ulimit -f) or choose another" in full.stderr)
    assert "(None)" not in full.stderr
    assert {p: p.read_bytes() for p in [out, *out.glob("*")] if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no .tmp left


def test_damaged_log_lines_are_dropped_with_a_warning_and_the_rest_kept(tmp_path, capsys):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"iter": 1, "loss": 5.0}\n{"iter": 2, "lo\n\xff\xfe garbage\n{"iter": 3, "loss": 4.0}\n[1, 2]\n'
                     b'{"iter": 4, "loss": 3.5}')  # a torn line, bytes that are not UTF-8, JSON that is no record
    assert [r["iter"] for r in read_log(path)] == [1, 3, 4]
    assert capsys.readouterr().err.strip() == f"warning: {path}: dropped 3 unreadable line(s): 2, 3, 5"


@pytest.mark.slow
def test_kill_9_at_random_moments(data_dir, reference, tmp_path):
    """Kill runs at random moments until each finishes; the result must equal the reference.

    The moments follow this machine, not a guess: each child is killed a random time after its
    first line (start-up, imports and data, is over by then), within the time the whole of the
    steps took in one uninterrupted run measured here first, so every attempt may reach a checkpoint.
    KILL_TRIALS=20 KILL_SEED=1 python -m pytest tests/test_faults.py -m slow -s -n 0 prints the kills survived."""
    rng, kills, trials = random.Random(int(os.environ.get("KILL_SEED", "0"))), 0, int(os.environ.get("KILL_TRIALS", "5"))

    def launch(out):
        resume = ["--init_from=resume"] if (out / "ckpt.pt").exists() else ["--overwrite=True"]
        child = subprocess.Popen([sys.executable, "train.py", "--data_dir", str(data_dir), f"--out_dir={out}", *RUN, *resume],
                                 cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env={**os.environ, "OMP_NUM_THREADS": "2", "PYTHONUNBUFFERED": "1"})
        child.stdout.readline()  # its first line: the steps begin
        return child

    child = launch(tmp_path / "timing")
    begun = time.time()
    child.communicate()
    steps_s = time.time() - begun
    for trial in range(trials):
        out = tmp_path / f"trial{trial}"
        while True:
            child = launch(out)
            time.sleep(rng.uniform(0, steps_s))
            if child.poll() is None:
                child.send_signal(signal.SIGKILL)
                child.communicate()
                kills += 1
                if (out / "ckpt.pt").exists():
                    load_checkpoint(out)  # always loadable
                continue
            _, stderr = child.communicate()
            assert child.returncode == 0, stderr.decode()[-2000:]
            break
        assert_same_run(reference, out)
    print(f"survived {kills} kills in {trials} trials, each 0-{steps_s:.1f} s into the steps")


class PoisonAt:
    """Wraps GPT.forward so that one step's training loss is NaN, or (gradient=True) its loss is
    finite and the head's gradient NaN, as an overflow in the backward pass leaves it."""

    def __init__(self, monkeypatch, step, accum=2, gradient=False):
        self.calls, self.step, self.accum, self.gradient, self.forward = 0, step, accum, gradient, GPT.forward
        monkeypatch.setattr(GPT, "forward", self)

    def __get__(self, model, owner):
        return lambda *args, **kwargs: self(model, *args, **kwargs)

    def __call__(self, model, idx, targets=None, cache=None):
        logits, loss = self.forward(model, idx, targets, cache)
        if model.training:
            self.calls += 1
            if (self.calls - 1) // self.accum == self.step:
                loss = nan_gradient(model, loss) if self.gradient else loss * float("nan")
        return logits, loss


def nan_gradient(model, loss):
    """The same loss, with a NaN gradient for the head: what an overflow in the backward pass leaves."""
    head = model.lm_head.weight * 1.0
    head.register_hook(lambda grad: grad * float("nan"))
    return loss + (head * 0).sum()  # adds 0 to the loss


def run_in_process(data_dir, out_dir, *extra):
    train.train(resolve(train.DEFAULTS, ["--data_dir", str(data_dir), f"--out_dir={out_dir}", *RUN, *extra]))


def test_nonfinite_loss_stops_before_the_update_and_keeps_the_checkpoint(data_dir, tmp_path, monkeypatch):
    PoisonAt(monkeypatch, step=5)
    with pytest.raises(UserError, match="training loss is nan at step 5; stopped before updating the weights"):
        run_in_process(data_dir, tmp_path)
    ckpt = load_checkpoint(tmp_path)
    assert ckpt["iter_num"] == 4 and all(torch.isfinite(w).all() for w in ckpt["model"].values())


def run_files(out_dir):
    return {p.name: p.read_bytes() for p in sorted(Path(out_dir).iterdir())}


@pytest.mark.parametrize("step", [4, 5])  # its first new step, and the second
@pytest.mark.parametrize("log_interval", [100, 1])  # no log line before the failure, or one a step
def test_a_resume_that_fails_at_its_first_steps_leaves_the_run_byte_for_byte(data_dir, tmp_path, monkeypatch, step,
                                                                             log_interval):
    """issues 45 and 54: the resume's new recipe (here a learning rate of 1e30) is saved only with a
    checkpoint that trained under it; a resume stopped at its first step (4) or second (5) writes
    nothing: no checkpoint, no config.json, no log line removed or added, even when it logged a
    step before failing (its lines wait for its first save)."""
    run_in_process(data_dir, tmp_path, "--max_iters=4", "--log_interval=100")
    (tmp_path / "log.jsonl").open("a").write(json.dumps({"iter": 5, "loss": 0.0}) + "\n")  # after the checkpoint
    before, rate = run_files(tmp_path), load_checkpoint(tmp_path)["settings"]["learning_rate"]
    PoisonAt(monkeypatch, step=step - 4)  # counts this process's steps
    with pytest.raises(UserError, match=f"training loss is nan at step {step}"):
        run_in_process(data_dir, tmp_path, "--init_from=resume", "--learning_rate=1e30", f"--log_interval={log_interval}")
    assert run_files(tmp_path) == before
    monkeypatch.undo()
    run_in_process(data_dir, tmp_path, "--init_from=resume", "--max_iters=8", "--log_interval=100")
    ckpt = load_checkpoint(tmp_path)
    assert ckpt["iter_num"] == 8 and ckpt["settings"]["learning_rate"] == rate  # the run's own, not 1e30
    assert [r["iter"] for r in read_log(tmp_path / "log.jsonl")] == [0, 4, 8]  # the stale step-5 line is gone


def test_two_trainings_in_one_folder_give_one_clear_refusal(data_dir, tmp_path):
    """One run directory has one writer: while one train.py holds the folder's lock, a second is
    refused in one line and writes nothing; the lock goes with the process that held it."""
    run_in_process(data_dir, tmp_path, "--max_iters=4")
    before = run_files(tmp_path)
    with writing(tmp_path, "train.py"):  # what a running train.py holds
        for extra in (["--init_from=resume", "--max_iters=8"], ["--overwrite=True"]):
            with pytest.raises(UserError, match=rf"is being written by another train.py \(process {os.getpid()}\)"):
                run_in_process(data_dir, tmp_path, *extra)
    assert run_files(tmp_path) == before
    run_in_process(data_dir, tmp_path, "--init_from=resume", "--max_iters=8")  # free again


@pytest.mark.parametrize("delay", [pytest.param(0.0, marks=pytest.mark.slow), 0.3,  # 0 and 1 s: -m slow (20 s each)
                                   pytest.param(1.0, marks=pytest.mark.slow)])
def test_two_processes_started_apart_one_trains_the_other_refuses(data_dir, tmp_path, delay):
    """Two new runs into one out_dir, or two resumes of one run, started `delay` s apart: one trains, the other
    is refused in one line naming the first's pid before it reads or writes anything; the run is whole."""
    out = tmp_path / "run"
    argv = [sys.executable, "train.py", "--data_dir", str(data_dir), f"--out_dir={out}", *RUN, "--max_iters=40",
            "--lr_decay_iters=40", "--eval_interval=20"]
    resume = ["--init_from=resume", "--max_iters=60", "--lr_decay_iters=60"]
    for pair, steps in (((argv, argv + ["--seed=5"]), 40), ((argv + resume, argv + resume), 60)):
        first = subprocess.Popen(pair[0], cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(delay)
        other = subprocess.Popen(pair[1], cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        done = [(p, *p.communicate()) for p in (first, other)]
        codes = sorted(p.returncode for p, _, _ in done)
        assert codes == [0, 1], done
        winner, loser = sorted(done, key=lambda d: d[0].returncode)
        assert loser[2].strip() == (f"train.py: error: {out} is being written by another train.py (process "
                                    f"{winner[0].pid}); wait for it to finish or stop it, or give this one another path")
        assert read_run(out)["val_loss"] > 0 and load_checkpoint(out)["iter_num"] == steps


def test_ctrl_c_is_one_line_and_the_resume_is_exact(data_dir, reference, tmp_path):
    """SIGINT at step 6 (the last checkpoint: step 4): one line on stderr, exit status 1, and the
    resume equals the uninterrupted run bit for bit."""
    stopped = train_process(data_dir, tmp_path, kill=("train", "lr_at", "calls[0] == 7"), signal_name="SIGINT")
    assert stopped.returncode == 1 and stopped.stderr.count("\n") == 1, stopped.stderr[-2000:]
    assert stopped.stderr.startswith("train.py: error: interrupted at step 6; ") and "--init_from=resume" in stopped.stderr
    resumed = train_process(data_dir, tmp_path, "--init_from=resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert_same_run(reference, tmp_path)


def test_nonfinite_loss_can_skip_the_step(data_dir, tmp_path, monkeypatch):
    PoisonAt(monkeypatch, step=5)
    run_in_process(data_dir, tmp_path, "--nonfinite=skip")
    log = read_log(tmp_path / "log.jsonl")
    assert [r["iter"] for r in log if "skipped" in r] == [6]
    ckpt = load_checkpoint(tmp_path)
    assert ckpt["iter_num"] == 12 and all(torch.isfinite(w).all() for w in ckpt["model"].values())


@pytest.mark.parametrize("policy", ["stop", "skip"])
@pytest.mark.parametrize("grad_clip", ["1.0", "0"])  # the norm with clipping, or only measured
def test_nonfinite_gradient_of_a_finite_loss_stops_or_skips(data_dir, tmp_path, monkeypatch, policy, grad_clip):
    PoisonAt(monkeypatch, step=5, gradient=True)
    if policy == "stop":
        with pytest.raises(UserError, match=r"gradient norm is nan \(loss [5-6]\.\d{4}\) at step 5; stopped before"):
            run_in_process(data_dir, tmp_path, f"--grad_clip={grad_clip}")
    else:
        run_in_process(data_dir, tmp_path, f"--grad_clip={grad_clip}", "--nonfinite=skip")
        assert [r["iter"] for r in read_log(tmp_path / "log.jsonl") if "skipped" in r] == [6]
        assert read_run(tmp_path)["skipped"] == [5]  # what the studies' reports list
    ckpt = load_checkpoint(tmp_path)  # the checkpoint before the step, or the run's end: never poisoned
    assert ckpt["iter_num"] == {"stop": 4, "skip": 12}[policy]
    assert all(torch.isfinite(w).all() for w in ckpt["model"].values())


@pytest.fixture
def dataset(data_dir, tmp_path):
    """A private copy of the tiny dataset, to break."""
    copy = tmp_path / "data"
    shutil.copytree(data_dir / "tiny", copy / "tiny")
    return copy


def one_line_error(capsys, *argv):
    with pytest.raises(SystemExit) as exit:
        train.main(list(argv))
    message = str(exit.value)
    assert message.startswith("train.py: error: ") and "\n" not in message and "Traceback" not in capsys.readouterr().err
    return message


def test_bad_data_files_are_one_line_errors(dataset, tmp_path, capsys):
    args = ["--data_dir", str(dataset), f"--out_dir={tmp_path / 'out'}", *RUN]
    meta_path, train_bin = dataset / "tiny" / "meta.json", dataset / "tiny" / "train.bin"
    meta, ids = json.loads(meta_path.read_text()), train_bin.read_bytes()

    train_bin.write_bytes(ids + b"\x01")  # not a whole number of uint16 ids
    assert "not a whole number of uint16 ids" in one_line_error(capsys, *args)
    bad = np.frombuffer(ids, dtype=np.uint16).copy()
    bad[len(bad) // 2] = 300  # the vocabulary is 300: id 300 does not exist
    train_bin.write_bytes(bad.tobytes())
    assert "holds token id 300 but the vocabulary has 300" in one_line_error(capsys, *args)
    train_bin.write_bytes(ids[:-2])
    assert "uint16 ids but meta.json says" in one_line_error(capsys, *args)
    train_bin.write_bytes(ids)

    meta_path.write_text(json.dumps({**meta, "vocab_size": 70000}))
    assert "dtype uint16 holds ids below 65536" in one_line_error(capsys, *args)
    meta_path.write_text(meta_path.read_text()[:50])
    assert "meta.json is corrupt" in one_line_error(capsys, *args)
    meta_path.unlink()
    assert "meta.json not found; prepare the data first: python prepare.py" in one_line_error(capsys, *args)


def test_bad_checkpoints_and_settings_are_one_line_errors(data_dir, tmp_path, capsys):
    args = ["--data_dir", str(data_dir), f"--out_dir={tmp_path}", *RUN]
    assert "no checkpoint at" in one_line_error(capsys, *args, "--init_from=resume")
    run_in_process(data_dir, tmp_path, "--max_iters=4")
    good = (tmp_path / "ckpt.pt").read_bytes()
    assert "trained with n_layer=2, not 3" in one_line_error(capsys, *args, "--init_from=resume", "--n_layer=3")
    assert "trained with input='affine', not 'learned'" in one_line_error(capsys, *args, "--init_from=resume", "--input=learned")
    (tmp_path / "ckpt.pt").write_bytes(good[: len(good) // 3])
    assert "it is corrupt or truncated" in one_line_error(capsys, *args, "--init_from=resume")
    config = tmp_path / "typo.py"
    config.write_text("n_layer = 2\nlearnig_rate = 1e-3\n")
    assert "unknown setting 'learnig_rate'; did you mean 'learning_rate'" in one_line_error(capsys, str(config))
    (tmp_path / "file").write_text("")
    assert "cannot write to --out_dir" in one_line_error(capsys, *args, f"--out_dir={tmp_path / 'file' / 'run'}")


# A child that runs a script's main with one of its module's functions wrapped to Ctrl-C itself at its first call.
CTRL_C = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
import {script} as script
original = script.{name}
def interrupt(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGINT)
    return original(*args, **kwargs)
script.{name} = interrupt
script.main(sys.argv[1:])
"""


@pytest.mark.parametrize("script, name, argv", [
    ("sample", "bytes_of_token", ["--ckpt", "{run}", "--max_new_tokens", "5"]),  # mid-sample
    ("prepare", "write_meta", ["--input", "{text}", "--name", "tiny", "--out_dir", "{data}", "--vocab_size", "300",
                               "--force"]),  # the new dataset built, not yet in place
    ("tools.export", "export_hf", ["--ckpt", "{run}"]),  # the first export of a run
])
def test_ctrl_c_anywhere_is_one_line_and_leaves_every_file(data_dir, reference, tmp_path, script, name, argv):
    """issue 54: Ctrl-C in sample.py, prepare.py and tools.export is one line, exit status 1, and
    every file under the run and the dataset as it was."""
    data = tmp_path / "data"
    shutil.copytree(data_dir / "tiny", data / "tiny")
    text = tmp_path / "tiny.txt"
    text.write_text("".join(f"The {w} of the king is {v}, and the queen's {w} is {v} too.\n"  # conftest's corpus
                            for w in ("crown", "horse", "sword", "castle") for v in ("gold", "grey", "old", "bright")) * 40)
    run = tmp_path / "run"
    shutil.copytree(reference, run)

    def files():
        return {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    before = files()
    args = [a.format(run=run, text=text, data=data) for a in argv]
    done = subprocess.run([sys.executable, "-c", CTRL_C.format(script=script, name=name), *args], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    last = done.stderr.splitlines()[-1]  # sample.py's line saying what it samples may come first
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert last.startswith(f"{script.rpartition('.')[2]}.py: interrupted; ") and "intact" in last
    assert files() == before


def test_two_prepares_into_one_name_leave_one_whole_dataset(tmp_path):
    """Two prepare.py into one --name at once: one writes the dataset whole, the other is refused in one line
    (the folder is being written, or holds a dataset of other settings); never an empty or partial folder."""
    text = (ROOT / "README.md").read_text()
    (tmp_path / "big.txt").write_text(text * 3)
    (tmp_path / "docs.txt").write_text(text[::-1] * 3)
    base = [sys.executable, str(ROOT / "prepare.py"), "--name", "cc1", "--out_dir", str(tmp_path / "data"), "--quiet"]
    procs = [subprocess.Popen(base + extra, cwd=tmp_path, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for extra in (["--input", "big.txt", "--vocab_size", "400"], ["--input", "docs.txt", "--vocab_size", "300"])]
    done = sorted(((p.wait(), p.stderr.read()) for p in procs), key=lambda d: d[0])
    assert [code for code, _ in done] == [0, 1], done
    refusal = done[1][1].strip()
    assert refusal.startswith("prepare.py: error: ") and "\n" not in refusal
    assert "is being written by another prepare.py" in refusal or "prepared with other settings" in refusal
    folder = tmp_path / "data" / "cc1"
    assert {p.name for p in folder.iterdir()} == {"meta.json", "tokenizer.tiktoken", "train.bin", "val.bin", "counts.npy"}
    assert Dataset(tmp_path / "data", "cc1", 8).vocab_size in (300, 400)
