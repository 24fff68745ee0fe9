"""Nothing already on disk is lost: outputs that would destroy a run or a dataset are refused, and a
folder is replaced whole or not at all, even when the writer is killed (-9) at any of its steps.
Run: python -m pytest tests/test_outputs.py"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import train
from conftest import ROOT, TINY
from tablefree import common
from tablefree.common import UserError, check_output, replace_folder, write_atomic
from tablefree.configurator import resolve
from tablefree.data import open_split, read_meta

# A child that runs one script's main with one function wrapped to SIGKILL itself at a chosen call.
CHILD = """
import os, signal, sys
import {module} as target
original, calls = target.{name}, [0]
def killer(*args, **kwargs):
    calls[0] += 1
    if calls[0] == {at}:
        os.kill(os.getpid(), signal.SIGKILL)
    return original(*args, **kwargs)
target.{name} = killer
{main}
"""
PREPARE = "import prepare; prepare.main(sys.argv[1:])"
EXPORT = "from tools import export; export.main(sys.argv[1:])"


def killed_at(main, argv, module, name, at):
    """Run main in a child that dies at call number `at` of module.name; its exit status."""
    code = CHILD.format(module=module, name=name, at=at, main=main)
    return subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, capture_output=True, text=True).returncode


def files(folder):
    """{name: bytes} of every file in folder."""
    return {p.name: p.read_bytes() for p in sorted(Path(folder).iterdir())}


def test_check_output_refuses_what_a_run_or_a_dataset_needs(tmp_path):
    run, data = tmp_path / "run", tmp_path / "data"
    run.mkdir(), data.mkdir()
    for name in ("ckpt.pt", "log.jsonl", "config.json", "eval.json"):
        (run / name).write_text("x")
    for name in ("meta.json", "train.bin", "val-00001.bin", "tokenizer.tiktoken", "notes.txt"):
        (data / name).write_text("x")
    for path in [run / "ckpt.pt", run / "log.jsonl", run / "config.json", data / "meta.json", data / "train.bin",
                 data / "val-00001.bin", data / "tokenizer.tiktoken", data / "notes.txt", data / "new.json",
                 tmp_path / "elsewhere" / "meta.json"]:
        path.parent.mkdir(exist_ok=True)
        path.touch()
        with pytest.raises(UserError, match="belongs to|is a dataset's folder|is not a writable folder"):
            check_output(path, "--out")  # a dataset's folder takes no file: prepare --force replaces it whole
    assert check_output(run / "eval.json", "--out") == run / "eval.json"  # a tool's own output: replaced
    assert check_output(tmp_path / "new.json", "--out")
    with pytest.raises(UserError, match="run is a folder; give --out a file path"):
        check_output(run, "--out")
    with pytest.raises(UserError, match=r"holds a run \(ckpt.pt, config.json, eval.json, ...\)"):
        check_output(run, "--out", own=("*.md",))
    with pytest.raises(UserError, match="holds a dataset"):
        check_output(data, "--out", own=("meta.json", "*.bin", "tokenizer.tiktoken"))  # notes.txt is not its own
    with pytest.raises(UserError, match="log.jsonl is a file; give --out a folder"):
        check_output(run / "log.jsonl", "--out", own=("*",))
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    assert check_output(tmp_path / "hf", "--out", own=("config.json",)) == tmp_path / "hf"


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two renames"])
def test_replace_folder_is_whole_or_nothing(tmp_path, monkeypatch, exchange):
    if not exchange:
        monkeypatch.setattr(common, "_exchange", lambda a, b: False)  # a system without renameat2
    out = tmp_path / "out"
    replace_folder(out, lambda tmp: (tmp / "a").write_text("old"))
    replace_folder(out, lambda tmp: (tmp / "b").write_text("new"))
    assert files(out) == {"b": b"new"} and sorted(p.name for p in tmp_path.iterdir()) == ["out"]

    def fails(tmp):
        (tmp / "c").write_text("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(UserError, match=r"cannot write .*out \(No space left on device\); the previous version is intact"):
        replace_folder(out, fails)
    assert files(out) == {"b": b"new"} and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def corpus(folder, words):
    folder.mkdir(exist_ok=True)
    for k in range(12):
        (folder / f"doc{k:02d}.txt").write_text(" ".join(f"{w}{(k * 7 + i) % 13}" for i, w in enumerate(words * 40)))
    return str(folder / "doc*.txt")


def whole_dataset(directory):
    """The dataset's text_sha256, after checking that it opens as train.py opens it."""
    meta = read_meta(directory)
    for split in ("train", "val"):
        open_split(directory, meta, split)
    return meta["text_sha256"]


# every write, fsync, the exchange of the folders and the removal of the old one: a kill at each (the
# two middle writes only with -m slow: they fail as the first and the last would)
KILL_POINTS = [("os", "fsync", 1), pytest.param("os", "fsync", 3, marks=pytest.mark.slow),
               pytest.param("os", "fsync", 5, marks=pytest.mark.slow), ("os", "fsync", 7),
               ("tablefree.common", "_exchange", 1), ("shutil", "rmtree", 2)]


@pytest.mark.parametrize("module, name, at", KILL_POINTS)
def test_kill_9_during_prepare_leaves_the_old_dataset_or_the_new_one(tmp_path, module, name, at):
    argv = ["--name", "x", "--out_dir", str(tmp_path / "data"), "--vocab_size", "270", "--quiet"]
    old = corpus(tmp_path / "old", ["crown", "horse", "sword"])
    subprocess.run([sys.executable, "prepare.py", "--input", old, *argv], cwd=ROOT, check=True, capture_output=True)
    directory = tmp_path / "data" / "x"
    before, old_sha = files(directory), whole_dataset(directory)
    new = corpus(tmp_path / "new", ["queen", "castle", "gold", "grey"])
    assert killed_at(PREPARE, ["--input", new, *argv, "--force"], module, name, at) == -9  # replacing it, as asked
    sha = whole_dataset(directory)
    assert sha == old_sha and files(directory) == before or sha != old_sha  # the old one whole, or the new one


@pytest.fixture(scope="module")
def exports(data_dir, tmp_path_factory):
    """Two checkpoints whose transformers exports differ, and the files of each export."""
    pytest.importorskip("safetensors")
    root = tmp_path_factory.mktemp("exports")
    runs, made = {}, {}
    for steps in (2, 4):
        runs[steps] = root / f"run{steps}"
        train.train(resolve(train.DEFAULTS, ["--data_dir", str(data_dir), "--dataset=tiny", f"--out_dir={runs[steps]}",
                                             *TINY, f"--max_iters={steps}", "--eval_interval=2"]))
        subprocess.run([sys.executable, "-m", "tools.export", "--ckpt", str(runs[steps]), "--out", str(root / f"hf{steps}")],
                       cwd=ROOT, check=True, capture_output=True)
        made[steps] = files(root / f"hf{steps}")
    assert made[2] != made[4]
    return runs, made[2], made[4]


@pytest.mark.parametrize("module, name, at", KILL_POINTS)
def test_kill_9_during_export_leaves_the_old_export_or_the_new_one(exports, tmp_path, module, name, at):
    runs, old, new = exports
    out = tmp_path / "hf"
    out.mkdir()
    for name_, data in old.items():  # the export of the 2-step run, which the kill must not lose
        (out / name_).write_bytes(data)
    assert killed_at(EXPORT, ["--ckpt", str(runs[4]), "--out", str(out)], module, name, at) == -9
    assert files(out) in (old, new)
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name != ".hf.writing")  # the killed writer's lock:
    assert leftovers in (["hf"], ["hf", "hf.tmp"])  # a half-built or the old copy beside it, removed next time
    subprocess.run([sys.executable, "-m", "tools.export", "--ckpt", str(runs[4]), "--out", str(out)],
                   cwd=ROOT, check=True, capture_output=True)
    assert files(out) == new and sorted(p.name for p in tmp_path.iterdir()) == ["hf"]


def test_a_refusal_inside_a_write_is_not_blamed_on_the_disk(tmp_path):
    """issue 54: a writer's own refusal raised while it handled an OSError (a missing Debian
    package, a folder given as a file) was reported as a full disk; and a first write that fails
    does not claim a previous version it never had."""
    def build(folder):
        try:
            open(folder / "missing" / "file")
        except OSError:
            raise UserError("the King James Bible comes from Debian's bible-kjv package; install it") from None
    with pytest.raises(UserError, match="^the King James Bible comes from"):
        replace_folder(tmp_path / "dataset", build)

    def full(f):
        raise OSError(28, "No space left on device")
    with pytest.raises(UserError, match=r"No space left on device\); nothing was left half-written"):
        write_atomic(tmp_path / "new.json", full)
    (tmp_path / "old.json").write_text("{}")
    with pytest.raises(UserError, match=r"the previous version is intact"):
        write_atomic(tmp_path / "old.json", full)
    assert (tmp_path / "old.json").read_text() == "{}" and not (tmp_path / "dataset").exists()


WRITERS = r"""
import sys
from tablefree.common import write_atomic
path, mark = sys.argv[1], sys.argv[2]
for _ in range(300):
    write_atomic(path, mark * 100_000)
"""


def test_two_processes_writing_one_file_each_leave_it_whole(tmp_path):
    """Two writers of one file at once (the queue's lanes writing a shared start checkpoint): neither fails
    (each writes its own temporary file, so neither renames the other's away), and the file is one
    writer's whole bytes, with no temporary file left."""
    path, script = tmp_path / "shared.bin", tmp_path / "writer.py"
    script.write_text(WRITERS)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writers = [subprocess.Popen([sys.executable, str(script), str(path), mark], env=env, stderr=subprocess.PIPE, text=True)
               for mark in "ab"]
    for writer in writers:
        assert writer.wait(timeout=120) == 0, writer.stderr.read()
    assert path.read_text() in ("a" * 100_000, "b" * 100_000)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
