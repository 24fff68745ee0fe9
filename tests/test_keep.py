"""experiments/keep.py: a finished run's files but its checkpoint are kept, and a fresh checkout
goes on from them, training again only the runs whose checkpoints are still needed.
Run: python -m pytest tests/test_keep.py"""

import json
import os

import pytest

from conftest import TINY
from experiments import extension, keep
from experiments.runs import scored, stale


def write_run(folder, max_iters, last):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"settings": {"max_iters": max_iters}}))
    (folder / "log.jsonl").write_text(json.dumps({"iter": last, "val_loss": 1.0}) + "\n")
    (folder / "ckpt.pt").write_bytes(b"weights")


def test_only_finished_runs_and_reports_are_kept_and_restore_never_overwrites(tmp_path):
    checkout, kept, fresh = tmp_path / "checkout", tmp_path / "kept", tmp_path / "fresh"
    write_run(checkout / "out-fairness" / "learned-seed0", 10, 10)
    (checkout / "out-fairness" / "learned-seed0" / "eval.json").write_text("{}")
    (checkout / "out-fairness" / "learned-seed0" / "eval.json.tmp").write_text("{")  # a write in progress
    write_run(checkout / "out-fairness" / "binary-seed0", 10, 4)  # unfinished: it resumes or starts again
    (checkout / "out-extension" / "extensions" / "extend-8-mean-0").mkdir(parents=True)
    (checkout / "out-extension" / "extensions" / "extend-8-mean-0" / "learned-seed0.json").write_text("{}")
    write_run(checkout / "out-elsewhere" / "learned-seed0", 10, 10)  # not one of the queue's runs dirs
    (checkout / "out-fairness" / ".learned-seed0.lock").write_text("")  # runs.claimed's

    assert keep.save(checkout, kept) == 4 and keep.save(checkout, kept) == 0  # nothing changed the second time
    assert sorted(str(p.relative_to(kept)) for p in kept.rglob("*") if p.is_file()) == [
        "out-extension/extensions/extend-8-mean-0/learned-seed0.json", "out-fairness/learned-seed0/config.json",
        "out-fairness/learned-seed0/eval.json", "out-fairness/learned-seed0/log.jsonl"]
    (fresh / "out-fairness" / "learned-seed0").mkdir(parents=True)
    (fresh / "out-fairness" / "learned-seed0" / "eval.json").write_text('{"newer": 1}')
    assert keep.restore(fresh, kept) == 3
    assert (fresh / "out-fairness" / "learned-seed0" / "eval.json").read_text() == '{"newer": 1}'
    assert keep.finished_run(fresh / "out-fairness" / "learned-seed0")
    assert not (fresh / "out-fairness" / "learned-seed0" / "ckpt.pt").exists()


@pytest.mark.slow  # train.py processes twice over: 40 s; CI runs keep's save and restore rules
def test_a_fresh_checkout_reads_the_kept_runs_and_retrains_only_what_it_needs(data_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(extension, "BASE", [f"--data_dir={data_dir}", "--dataset=tiny", *TINY, "--max_iters=4",
                                            "--lr_decay_iters=4", "--eval_interval=4"])

    def grid(checkout, rows):
        extension.main(["--seeds", "1", "--inputs", "learned,frozen", "--new_tokens", "8", "--new_rows", rows,
                        "--adapt_steps", "0", "--data_dir", str(data_dir), "--runs_dir", str(checkout / "out-extension"),
                        "--results_dir", str(checkout / "results")])
        return json.loads((checkout / "results" / "extension.json").read_text())

    first = grid(tmp_path / "a", "mean")
    out = capsys.readouterr().out
    assert out.count(": training in") == 2 and "not kept" not in out  # new runs are trained, not "trained again"
    keep.save(tmp_path / "a", tmp_path / "kept")
    keep.restore(tmp_path / "b", tmp_path / "kept")
    again = grid(tmp_path / "b", "mean")  # every cell kept: nothing trained, the same numbers
    assert "== " not in capsys.readouterr().out and again["summary"] == first["summary"]
    more = grid(tmp_path / "b", "mean,random")  # a new cell (learned's alone) needs it: trained again, identically
    out = capsys.readouterr().out
    assert out.count("its checkpoint was not kept, training it again") == 1 and "== frozen" not in out
    assert more["summary"]["8-mean-0"] == first["summary"]["8-mean-0"]
    assert more["runs"]["extend-8-random-0"][0]["before"] == first["runs"]["extend-8-mean-0"][0]["before"]


def test_restore_from_a_missing_folder_is_one_line(tmp_path):
    """issue 54: it once restored nothing and said 'restore: 0 file(s)'."""
    with pytest.raises(SystemExit, match=r"keep.py: error: --kept .*nowhere is not a folder"):
        keep.main(["restore", "--checkout", str(tmp_path), "--kept", str(tmp_path / "nowhere")])
    with pytest.raises(SystemExit, match=r"keep.py: error: --checkout .*nowhere is not a folder"):
        keep.main(["save", "--checkout", str(tmp_path / "nowhere"), "--kept", str(tmp_path)])


def test_a_report_from_weights_trained_again_is_made_again(tmp_path):
    """A kept run trained again (a new machine without its checkpoint: the numbers move in the last digits)
    has its evaluation scored again, not read: a report older than the run's checkpoint is stale. A kept run
    with no checkpoint (nothing trained since) and a report newer than the checkpoint are read."""
    run = tmp_path / "learned-seed0"
    write_run(run, 10, 10)
    report = run / "eval.json"
    report.write_text(json.dumps({"iter_num": 10, "results": {"val": {"loss": 2.0}}}))
    os.utime(run / "ckpt.pt", ns=(10**18, 10**18))
    os.utime(report, ns=(2 * 10**18, 2 * 10**18))
    assert not stale(report, run) and scored(run, 10) == {"val": {"loss": 2.0}}
    os.utime(run / "ckpt.pt", ns=(3 * 10**18, 3 * 10**18))  # trained again after the report
    assert stale(report, run) and scored(run, 10) == {}
    (run / "ckpt.pt").unlink()  # kept without its checkpoint: read
    assert not stale(report, run) and scored(run, 10) == {"val": {"loss": 2.0}}
