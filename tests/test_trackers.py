"""tablefree/trackers.py through train.py: a short CPU run with --tensorboard or --wandb_log writes the
scalars log.jsonl records (read back from TensorBoard's event file and W&B's offline run file), a resumed
run goes on in the same W&B run, and a tracker that is missing or fails is a warning, never a stopped run.
(Rank 0 alone writes under torchrun: tests/test_train.py's two-rank run.) Run: python -m pytest tests/test_trackers.py"""

import json
import sys
from pathlib import Path

import pytest

import train
from conftest import TINY
from tablefree.configurator import resolve
from tablefree.rundir import read_log
from tablefree.trackers import ID_FILE, SCALARS


def run(data_dir, out, *argv):
    train.train(resolve(train.DEFAULTS, ["--data_dir", str(data_dir), "--dataset=tiny", f"--out_dir={out}", *TINY,
                                         "--max_iters=4", "--lr_decay_iters=4", "--eval_interval=2", *argv]))


def logged(out, key):
    """{step: value} of one log.jsonl key."""
    return {r["iter"]: r[key] for r in read_log(out / "log.jsonl") if r.get(key) is not None}


def tensorboard_scalars(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(folder))
    events.Reload()
    return {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}


def wandb_records(path):
    """Every record of a W&B run file (.wandb: LevelDB's log format, 32 kB blocks, after a 7-byte
    header), parsed with wandb's own protobuf schema."""
    from wandb.proto import wandb_internal_pb2
    data, records, pending, pos = Path(path).read_bytes(), [], b"", 7
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a header: padding
            pos += 32768 - pos % 32768
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        pending, pos = pending + data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 4):  # a whole record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def wandb_history(run_file):
    """([{name: value}] of each wandb.log, the config's keys, the run's id) of an offline run."""
    history, config, run_id = [], set(), None
    for record in wandb_records(run_file):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                            for item in record.history.item})
        elif kind == "config":
            config |= {item.key for item in record.config.update}
        elif kind == "run":  # the config given to wandb.init travels in the run's record
            run_id, config = record.run.run_id, config | {item.key for item in record.run.config.update}
    return history, config, run_id


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """W&B with no account: no API key, no ~/.netrc, nothing from the machine's own settings."""
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "home" / ".config" / "wandb"))


def test_tensorboard_gets_every_scalar_log_jsonl_records(data_dir, tmp_path):
    out = tmp_path / "run"
    run(data_dir, out, "--tensorboard=True")
    scalars = tensorboard_scalars(out / "tb")
    for key in ("loss", "lr", "tok_s", "grad_norm_max", "train_loss", "val_loss", "val_ppl", "val_bpb"):
        expected = logged(out, key)
        assert expected and scalars[SCALARS[key]] == pytest.approx(expected, rel=1e-6), key
    assert set(scalars["eval/val_loss"]) == {0, 2, 4} and set(scalars["train/loss"]) == {1, 2, 3, 4}


def test_wandb_offline_run_holds_the_log_and_a_resume_continues_it(data_dir, tmp_path, offline, capsys):
    out = tmp_path / "run"
    run(data_dir, out, "--wandb_log=True", "--wandb_project=tests")
    said = capsys.readouterr().out
    first = sorted((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(first) == 1 and f"wandb sync {first[0].parent}" in said  # where it is, how to send it
    history, config, run_id = wandb_history(first[0])
    assert {"settings", "params"} <= config and run_id == json.loads((out / ID_FILE).read_text())["id"]
    sent = {(h["iter"], name): value for h in history for name, value in h.items() if not name.startswith("_")}
    for key in ("loss", "lr", "val_loss", "val_bpb"):
        for step, value in logged(out, key).items():
            assert sent[(step, SCALARS[key])] == pytest.approx(value, rel=1e-9), (key, step)

    run(data_dir, out, "--wandb_log=True", "--wandb_project=tests", "--init_from=resume", "--max_iters=6",
        "--lr_decay_iters=6")
    files = sorted((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 2 and json.loads((out / ID_FILE).read_text())["id"] == run_id
    history, _, resumed_id = wandb_history(next(f for f in files if f != first[0]))
    assert resumed_id == run_id  # one W&B run across the resume
    assert {h["iter"] for h in history if "eval/val_loss" in h} == {6}  # step 4's evaluation was logged before
    assert {h["iter"] for h in history if "train/loss" in h} == {5, 6}


def test_a_missing_or_unwritable_tracker_is_a_warning_and_the_run_goes_on(data_dir, tmp_path, offline,
                                                                          monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)  # not installed: import wandb raises ImportError
    out = tmp_path / "run"
    out.mkdir()
    (out / "tb").write_text("a file where TensorBoard's folder goes")
    run(data_dir, out, "--wandb_log=True", "--tensorboard=True", "--overwrite=True")  # the user's folder
    err = capsys.readouterr().err
    assert "warning: wandb did not start (the wandb package is not installed: pip install wandb==" in err
    assert "warning: TensorBoard did not start (" in err
    assert sorted(logged(out, "val_loss")) == [0, 2, 4] and sorted(logged(out, "loss")) == [1, 2, 3, 4]
    assert (out / "ckpt.pt").exists()


def test_a_tracker_that_fails_midway_is_dropped_with_one_warning(data_dir, tmp_path, monkeypatch, capsys):
    from tablefree import trackers

    def full(self, step, values):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(trackers.TensorBoard, "log", full)
    out = tmp_path / "run"
    run(data_dir, out, "--tensorboard=True")
    err = capsys.readouterr().err
    assert err.count("warning: TensorBoard stopped logging at step 0 ([Errno 28] No space left on device)") == 1
    assert sorted(logged(out, "val_loss")) == [0, 2, 4] and sorted(logged(out, "loss")) == [1, 2, 3, 4]
