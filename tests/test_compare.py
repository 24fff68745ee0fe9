"""compare.py end to end on a tiny preset, and the table's arithmetic. Run: python -m pytest tests/test_compare.py"""

import json
import math

import pytest

import compare
import train
from conftest import TINY


def fake_run(loss, trainable=1000, input_params=0):
    return {"val_loss": loss, "val_ppl": math.exp(loss), "val_bpb": 1.0, "tokens": 4096, "trainable": trainable,
            "input_params": input_params, "wall_s": 60.0, "curve": [[0, 5.0], [10, loss]]}


def test_summary_arithmetic():
    runs = {"learned": [fake_run(x, 1100, 100) for x in (1.0, 1.2, 1.1)],
            "binary": [fake_run(x) for x in (1.05, 1.05, 1.05)],
            "affine": [fake_run(x) for x in (2.0, 2.1, 1.9)]}
    s = compare.summarize(runs)
    assert s["learned"]["val_loss"] == pytest.approx(1.1) and s["learned"]["val_loss_std"] == pytest.approx(0.1)
    ppls = [math.exp(x) for x in (1.0, 1.2, 1.1)]
    assert s["learned"]["val_ppl"] == pytest.approx(sum(ppls) / 3)
    assert s["learned"]["spread"] == pytest.approx((ppls[1] - ppls[0]) / (sum(ppls) / 3))
    assert s["binary"]["val_loss_std"] == 0.0 and s["binary"]["spread"] == 0.0
    near, far = s["binary"]["vs_learned"], s["affine"]["vs_learned"]
    assert near["loss_gap"] == pytest.approx(-0.05) and near["stderr"] == pytest.approx(0.1 / math.sqrt(3))
    assert not near["exceeds_seed_variation"]  # 0.05 < 2 x 0.0577
    assert far["loss_gap"] == pytest.approx(0.9) and far["exceeds_seed_variation"]
    assert far["ppl_ratio"] == pytest.approx(s["affine"]["val_ppl"] / s["learned"]["val_ppl"] - 1)
    assert "vs_learned" not in s["learned"]
    table = compare.report("t", "python compare.py", {"cpu": "x", "threads": 2, "gpu": None, "torch": "2", "date": "d"}, s)
    assert "| learned | 3 | 1.1000 ± 0.1000 |" in table and "exceeds seed variation" in table and "is within seed variation" in table


def test_tiny_preset_end_to_end_and_resumes(data_dir, tmp_path, monkeypatch):
    argv = ["--name", "tiny", "--seeds", "2", "--results_dir", str(tmp_path / "results"), "--runs_dir", str(tmp_path / "runs"),
            "--data_dir", str(data_dir), "--dataset=tiny", *TINY, "--max_iters=4", "--lr_decay_iters=4", "--eval_interval=2"]
    compare.main(argv)
    results = json.loads((tmp_path / "results" / "tiny.json").read_text())
    assert "| binary | 2 |" in (tmp_path / "results" / "tiny.md").read_text() and set(results["summary"]) == {"learned", "binary", "affine"}
    for kind, runs in results["runs"].items():
        assert len(runs) == 2 and all(r["tokens"] == 4 * 2 * 8 * 32 for r in runs)
        losses = [r["val_loss"] for r in runs]
        assert results["summary"][kind]["val_loss"] == pytest.approx(sum(losses) / 2)
    assert results["runs"]["learned"][0]["input_params"] == 300 * 32 and results["runs"]["affine"][1]["input_params"] == 0
    affine = [json.loads((tmp_path / "runs" / f"affine-seed{k}" / "config.json").read_text()) for k in (0, 1)]
    assert [a["model"]["code_seed"] for a in affine] == [0, 1]  # each seed draws its own A and b
    assert results["runs"]["binary"][0]["val_loss"] != results["runs"]["binary"][1]["val_loss"]  # seeds differ

    monkeypatch.setattr(train, "train", lambda s: pytest.fail("a finished run was trained again"))
    compare.main(argv)  # everything finished: the table is rebuilt from the logs
    monkeypatch.undo()
    longer = [a.replace("--max_iters=4", "--max_iters=6").replace("--lr_decay_iters=4", "--lr_decay_iters=6") for a in argv]
    compare.main([*longer, "--inputs", "binary", "--seeds", "1"])  # the run continues from its step-4 checkpoint
    log = [json.loads(line) for line in (tmp_path / "runs" / "binary-seed0" / "log.jsonl").read_text().splitlines()]
    assert [r["iter"] for r in log if "loss" in r] == [1, 2, 3, 4, 5, 6]
