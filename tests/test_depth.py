"""experiments/depth.py: its shape's table share is the paper's, its paired statistics and depth trend
on hand-made cases, and the study end to end on the tiny corpus with --quick (the real study takes
hours: python -m experiments.depth). Run: python -m pytest tests/test_depth.py"""

import json
import math

import pytest

from experiments import depth
from experiments.runs import train_settings
from experiments.stats import paired


def test_the_shape_puts_an_eighth_of_the_model_in_the_table():
    params = depth.param_table(train_settings(depth.BASE), depth.DEPTHS, 2560)
    learned, binary = params[32]["learned"], params[32]["binary"]
    assert (learned["trainable"], learned["input"], binary["trainable"]) == (821_800, 102_400, 719_400)  # the config's
    assert 0.10 <= learned["input"] / learned["trainable"] <= 0.15  # the paper: 67.1M of 537M, 12.5%
    assert params[32]["affine"]["trainable"] == binary["trainable"] and binary["input"] == 0
    assert set(params[6]) == set(params[12]) == {"learned", "binary"}  # affine at the papers' depth only
    tokens = 810 * 16 * 128
    assert 2.0 <= tokens / learned["trainable"] <= 2.2  # at least 2 tokens a trainable parameter


def test_paired_difference_by_hand():
    p = paired([3.0, 5.0, 4.0], [2.0, 2.0, 2.0])  # differences 1, 3, 2: mean 2, std 1
    assert p["mean"] == 2.0 and p["stderr"] == pytest.approx(1 / math.sqrt(3)) and p["seeds"] == 3
    assert paired([1.5], [1.0]) == {"mean": 0.5, "stderr": 0.0, "seeds": 1}


def test_depth_trend_by_hand():
    # gaps on the line 0.3 - 0.1 log2(depth): 0.1 at 4 layers, 0.0 at 8, -0.1 at 16 (two seeds each, +-0.01)
    trend = depth.depth_trend((4, 8, 16), {4: [0.11, 0.09], 8: [0.01, -0.01], 16: [-0.09, -0.11]})
    assert trend["per_doubling"] == pytest.approx(-0.1) and trend["intercept"] == pytest.approx(0.3)
    assert trend["at"][8] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.slow  # a dozen train.py processes: a minute; CI runs the shape, the statistics and the trend
def test_quick_study_end_to_end_and_kept(data_dir, tmp_path, capsys):
    argv = ["--quick", "--dataset", "tiny", "--seeds", "1", "--data_dir", str(data_dir),
            "--runs_dir", str(tmp_path / "runs"), "--results_dir", str(tmp_path / "results")]
    depth.main(argv)
    out = capsys.readouterr().out
    assert out.count(": training in") == 7  # 2 + 2 + 3 arms
    assert out.count("(--nonfinite=stop): training in") == 2  # seed 0 of learned and binary at the deepest
    results = json.loads((tmp_path / "results" / "depth.json").read_text())
    deepest = results["summary"]["depths"]["3"]
    runs = results["runs"]["3"]
    ratios = [b["run"]["val_ppl"] / l["run"]["val_ppl"] - 1 for b, l in zip(runs["binary"], runs["learned"])]
    assert deepest["binary"]["paired_ppl"] == {"mean": pytest.approx(ratios[0]), "stderr": 0.0, "seeds": 1}
    assert runs["binary"][0]["stability"]["strict"] == {"nonfinite": "stop", "stopped": False}
    assert runs["affine"][0]["stability"]["strict"] is None
    for seed in runs["learned"]:
        s = seed["stability"]
        assert s["skipped"] == [] and s["residual_rms"] > 0 and s["grad_norm_max"] > 0 and 0 <= s["grad_norm_step"] < 12
    assert set(results["summary"]["depths"]["1"]) == {"learned", "binary"}
    config = json.loads((tmp_path / "runs" / "affine-L3-seed0" / "config.json").read_text())
    assert config["model"]["n_layer"] == 3 and config["model"]["input"] == "affine"
    md = (tmp_path / "results" / "depth.md").read_text()
    assert "per doubling of depth" in md and "ran to the end: no update lost" in md and "The 7 runs: " in md
    assert (tmp_path / "results" / "depth.png").exists()
    depth.main(argv)  # everything kept: nothing trained again
    assert "training in" not in capsys.readouterr().out
