"""tools/plot.py: a run's curves from its log, the picture, and its bad inputs."""

import json

import pytest

from tools import plot

RECORDS = [{"iter": 0, "train_loss": 7.0, "val_loss": 6.9}, {"iter": 10, "loss": 5.5, "lr": 1e-3},
           {"iter": 20, "loss": 5.0, "lr": 1e-3}, {"iter": 20, "train_loss": 5.1, "val_loss": 5.2},
           {"iter": 21, "skipped": "non-finite: training loss is nan"}]


def run(folder, records=RECORDS):
    folder.mkdir()
    (folder / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def test_curves_are_the_logs_losses():
    assert plot.curves(RECORDS) == {"train": ([10, 20], [5.5, 5.0]), "val": ([0, 20], [6.9, 5.2])}


def test_a_picture_of_two_runs_goes_to_the_first_runs_folder(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    a, b = run(tmp_path / "a"), run(tmp_path / "b", RECORDS[:2])
    plot.main([str(a), str(b)])
    assert (a / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert capsys.readouterr().out == f"wrote {a / 'loss.png'}\n"


def test_bad_inputs_are_one_line(tmp_path):
    a = run(tmp_path / "a")
    for argv, message in (([str(tmp_path)], "has no log.jsonl; give run directories"),
                          ([str(a), "--out", str(a / "log.jsonl")], "belongs to a run")):
        with pytest.raises(SystemExit) as exit:
            plot.main(argv)
        assert str(exit.value).startswith("plot.py: error: ") and message in str(exit.value)
    assert (a / "log.jsonl").read_text().count("\n") == len(RECORDS)  # the log is untouched


def test_damaged_records_are_left_out_and_counted(tmp_path, capsys):
    """A loss that is text, NaN or infinite is not drawn: the record is left out and counted, as read_log
    drops and counts a line that is not JSON."""
    damaged = [*RECORDS, {"iter": 30, "loss": "5.0"}, {"iter": 40, "loss": float("nan")},
               {"iter": 40, "train_loss": 4.9, "val_loss": float("inf")}, {"iter": 50, "loss": True}]
    assert plot.curves(damaged) == plot.curves(RECORDS)
    pytest.importorskip("matplotlib")
    a = run(tmp_path / "a", damaged)
    plot.main([str(a)])
    assert f"warning: {a}/log.jsonl: left out 4 record(s) whose loss is not a finite number" in capsys.readouterr().err
    assert (a / "loss.png").exists()
