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
