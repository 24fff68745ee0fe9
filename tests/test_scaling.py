"""experiments/scaling.py's grid and tables on tiny runs. Run: python -m pytest tests/test_scaling.py"""

import json
import math

import pytest

from conftest import TINY
from experiments import scaling

TINY_POINTS = {  # the grid's shape at a size that runs in seconds
    "base": ("base", {}, ("learned", "binary")),
    "width-48": ("width", {"n_embd": 48}, ("learned", "binary")),
    "tokens-2x": ("tokens", {"max_iters": 8, "lr_decay_iters": 8}, ("learned", "binary", "affine")),
}


def test_point_settings_change_one_thing():
    base = {"n_embd": 160, "n_layer": 6, "max_iters": 1200, "lr_decay_iters": 1200, "learning_rate": 2e-3, "min_lr": 2e-4,
            "dataset": "cpu-mix-1k"}
    assert scaling.point_settings(base, "base") == base
    assert scaling.point_settings(base, "width-384") == {**base, "n_embd": 384}
    assert scaling.point_settings(base, "vocab-8k") == {**base, "dataset": "cpu-mix-8k"}
    assert scaling.point_arguments("depth-12") == ["--n_layer=12"] and scaling.POINTS["depth-3"][0] == "depth"
    changed = {name: {k for k in scaling.point_settings(base, name) if scaling.point_settings(base, name)[k] != base[k]}
               for name in scaling.POINTS}
    assert all(len(keys) <= 2 for keys in changed.values())  # (lr points change min_lr with it)
    assert {axis for axis, _, _ in scaling.POINTS.values()} == {"base", *scaling.AXES}
    assert all(kinds[0] == "learned" for _, _, kinds in scaling.POINTS.values())  # the gap needs learned first


def test_fit_recovers_a_known_line():
    points = [{"compute": 10.0 ** x, "gap": 0.5 - 0.1 * x, "stderr": 0.01} for x in (12, 13, 14)]
    a, b, cov = scaling.fit(points)
    assert a == pytest.approx(0.5) and b == pytest.approx(-0.1) and cov[1, 1] > 0
    fits = scaling.analyse([{**p, "axis": "tokens", "input": "binary"} for p in points], papers=1e16)
    assert fits["tokens"]["at_papers"] == pytest.approx(0.5 - 1.6) and fits["tokens"]["zero_at"] == pytest.approx(1e5)
    assert "power" not in fits["tokens"]  # a gap below zero: no power law
    power = [{"compute": 10.0 ** x, "gap": 0.2 * 10 ** (-0.5 * (x - 12)), "stderr": 0.001, "axis": "width", "input": "binary"}
             for x in (12, 13, 14)]  # gap 0.2, 0.063, 0.02: a power law with exponent -0.5
    law = scaling.analyse(power, papers=1e18)["width"]["power"]
    assert law["exponent"] == pytest.approx(-0.5) and law["at_papers"] == pytest.approx(0.2e-3)


def test_each_input_at_its_best_learning_rate():
    def summary(bpb):  # two seeds, std 0.01 each
        return {"seeds": 2, "val_bpb": bpb, "val_bpb_std": 0.01, "val_loss": bpb, "val_loss_std": 0.01, "val_ppl": 1.0}

    rows = [{"axis": axis, "input": "binary", "lr": lr, "summaries": {"learned": summary(ours), "binary": summary(theirs)}}
            for axis, lr, ours, theirs in [("lr", 1e-3, 2.0, 2.3), ("base", 2e-3, 1.9, 2.1), ("lr", 4e-3, 1.95, 2.05)]]
    lr = scaling.analyse(rows, papers=1e18)["lr"]
    assert (lr["learned_lr"], lr["binary_lr"]) == (2e-3, 4e-3)  # each its own best, not the same lr
    assert lr["gap"] == pytest.approx(2.05 - 1.9) and lr["stderr"] == pytest.approx(0.01)  # sqrt(2 * 0.01^2 / 2)
    assert lr["swept"] == [1e-3, 2e-3, 4e-3]


def test_the_table_has_compute_and_both_inputs_trainable_parameters():
    summaries = {"learned": {"input_params": 163840, "skipped": [[], [], []]},
                 "binary": {"input_params": 0, "skipped": [[], [1055], [346, 641]]}}
    row = {"point": "depth-12", "axis": "depth", "input": "binary", "n_layer": 12, "n_embd": 160, "V": 1024,
           "tokens": 2457600, "epochs": 0.6, "lr": 2e-3, "compute": 6.1e13, "share": 0.04, "seeds": 3,
           "learned_bpb": 1.9, "bpb": 1.95, "gap": 0.05, "stderr": 0.01, "loss_gap": 0.09, "loss_stderr": 0.02,
           "summaries": summaries}
    info = {"cpu": "x", "threads": 1, "gpu": None, "torch": "2", "date": "d"}
    table = scaling.report("python -m experiments.scaling", info, [row], {}, 5e19, "base.py")
    assert ("| depth-12 | depth | 12 x 160 | 1,024 | 2.46M (0.6) | 0.002 | 6.10e+13 | 4.0% | 163,840 / 0 | 3 | "
            "1.9000 | binary | 1.9500 | +0.0500 ± 0.0100 | +0.0900 ± 0.0200 |") in table
    assert ("Updates skipped for a non-finite loss or gradient (`--nonfinite=skip`): depth-12 binary seed 1: "
            "step 1055; depth-12 binary seed 2: step 346, 641.") in table
    header = next(line for line in table.splitlines() if line.startswith("| point"))
    assert header.count("|") == table.splitlines()[table.splitlines().index(header) + 1].count("|") == 16


def test_estimate_scales_by_measured_speed():
    assert scaling.estimate([3.6e12], []) is None
    assert scaling.estimate([7.2e15, 3.6e15], [(1e12, 1.0)]) == pytest.approx(3.0)  # 1e12 FLOP/s: 10,800 s
    assert scaling.estimate([7.2e15, 3.6e15], [(1e12, 1.0), (1e12, 4.0)]) == pytest.approx(3.0)  # a slowed run: ignored


@pytest.mark.slow  # a dozen train.py processes: a minute and a half; CI runs the plan, fits and table
def test_tiny_grid_end_to_end_and_resumes(data_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(scaling, "POINTS", TINY_POINTS)
    argv = ["--seeds", "2", "--results_dir", str(tmp_path / "results"), "--runs_dir", str(tmp_path / "runs"),
            "--base", "config/shakespeare.py", "--data_dir", str(data_dir), "--dataset=tiny", *TINY, "--max_iters=4",
            "--lr_decay_iters=4", "--eval_interval=4"]
    scaling.main(argv)
    out = capsys.readouterr().out
    assert "== base: learned, binary; 14 run(s) left" in out and "h at the fastest speed measured so far" in out
    results = json.loads((tmp_path / "results" / "scaling.json").read_text())
    rows = results["rows"]
    assert [(r["point"], r["input"]) for r in rows] == [("base", "binary"), ("width-48", "binary"),
                                                        ("tokens-2x", "binary"), ("tokens-2x", "affine")]
    base, wide = rows[0], rows[1]
    assert base["n_embd"] == 32 and wide["n_embd"] == 48 and base["V"] == 300
    assert base["share"] == pytest.approx(300 * 32 / (300 * 32 + trainable(tmp_path, "base")))
    assert rows[2]["compute"] == pytest.approx(2 * base["compute"])  # twice the tokens, the same model
    assert rows[2]["tokens"] == 8 * 2 * 8 * 32 and rows[2]["epochs"] > base["epochs"]
    learned = [json.loads((tmp_path / "runs" / "base" / f"learned-seed{k}" / "log.jsonl").read_text().splitlines()[-1])
               for k in (0, 1)]
    assert base["learned_bpb"] == pytest.approx(sum(r["val_bpb"] for r in learned) / 2)
    assert set(results["fits"]) == {"width", "tokens"} and math.isfinite(results["fits"]["tokens"]["at_papers"])
    table = (tmp_path / "results" / "scaling.md").read_text()
    assert "| tokens-2x | tokens | 2 x 32 | 300 |" in table and "- tokens axis (2 points)" in table
    assert (tmp_path / "results" / "scaling.png").read_bytes()[:4] == b"\x89PNG"  # matplotlib: requirements-extras.txt
    logs = {p: p.read_bytes() for p in (tmp_path / "runs").rglob("log.jsonl")}
    scaling.main(argv)  # everything finished: rebuilt from the logs
    out = capsys.readouterr().out
    assert "0 run(s) left" in out and "== base, seed" not in out and logs == {p: p.read_bytes() for p in logs}


def trainable(tmp_path, point):
    config = json.loads((tmp_path / "runs" / point / "binary-seed0" / "config.json").read_text())
    return config["params"]["trainable"]
