"""experiments/depth_width.py: the order its runs are made in, its base shape's tiles and table share,
when a kept scaling run is read instead of trained, and the study end to end with --quick (the real
study takes about 16 lane-hours: python -m experiments.depth_width). Run: python -m pytest tests/test_depth_width.py"""

import json

import pytest

from experiments import depth_runs, depth_width
from experiments.runs import train_settings
from tablefree.data import read_meta


def test_the_deepest_first_its_strict_seeds_before_the_rest():
    items = depth_width.plan(depth_width.FULL, seeds=3, seeds_24=2)
    assert items[:2] == [("learned", 32, 160, 0), ("binary", 32, 160, 0)]  # --nonfinite=stop's pair leads
    assert [i for i in items[:9]] == [(a, 32, 160, s) for s in range(3) for a in ("learned", "binary", "affine")]
    assert items[9:15] == [(a, 32, 80, s) for s in range(3) for a in ("learned", "binary")]
    assert items[15:19] == [(a, 24, 160, s) for s in range(2) for a in ("learned", "binary")]  # --seeds_24 2
    assert {i[1] for i in items[19:]} == {12, 6, 3} and len(items) == 19 + 3 * 3 * 2


def test_the_base_shape_tiles_a_ten_bit_code_sixteen_times():
    settings = train_settings(depth_width.BASE)
    assert (settings["n_embd"], settings["max_iters"], settings["batch_size"] * settings["block_size"]) == (160, 1200, 2048)
    assert depth_width.code_bits(1024) == 10 and 160 / depth_width.code_bits(1024) == 16
    assert depth_width.code_bits(2560) == 12  # depth.py's 40-wide study: 3.3 tiles
    learned = depth_runs.param_table(settings, (32,), 1024)[32]["learned"]
    assert learned["input"] == 1024 * 160 and 0.015 < learned["input"] / learned["trainable"] < 0.02


def test_width_trend_has_a_standard_error():
    trend = depth_runs.depth_trend((80, 160), {80: [0.10, 0.12, 0.08], 160: [0.05, 0.04, 0.06]})
    assert trend["per_doubling"] == pytest.approx(-0.05)
    # residuals +-0.02, 0, +-0.01: variance 0.001 / 4 over sum (x - mean)^2 = 6 * 0.25
    assert trend["per_doubling_stderr"] == pytest.approx((0.001 / 4 / 1.5) ** 0.5)


@pytest.mark.slow  # nine train.py processes: a minute; CI runs the order, the shape and the trend
def test_quick_study_end_to_end_and_a_kept_run_read_only_when_it_matches(data_dir, tmp_path, capsys):
    argv = ["--quick", "--dataset", "tiny", "--seeds", "1", "--data_dir", str(data_dir),
            "--runs_dir", str(tmp_path / "runs"), "--results_dir", str(tmp_path / "results")]
    depth_width.main(argv)
    out = capsys.readouterr().out
    assert out.count(": training in") == 9  # 3 arms at 3 x 16, 2 at 3 x 12, 2 at each of 2 and 1 layers
    results = json.loads((tmp_path / "results" / "depth-width.json").read_text())
    summary = results["summary"]
    assert set(summary["widths"]) == {"12", "16"} and set(summary["depths"]) == {"1", "2", "3"}
    binary = summary["depths"]["3"]["binary"]
    assert binary["gaps"]["paired_bpb"]["mean"] == pytest.approx(binary["val_bpb"] - summary["depths"]["3"]["learned"]["val_bpb"])
    narrow = json.loads((tmp_path / "runs" / "n_embd12" / "binary-L3-seed0" / "config.json").read_text())
    assert (narrow["model"]["n_embd"], narrow["model"]["n_layer"]) == (12, 3)
    md = (tmp_path / "results" / "depth-width.md").read_text()
    assert "tiles a bit" in md and "per doubling of depth" in md and "ran to the end: no update lost" in md
    # a kept run is read only when it is exactly the run asked for
    run = tmp_path / "runs" / "learned-L2-seed0"
    asked = [*depth_width.BASE, *depth_width.QUICK, "--dataset=tiny", f"--data_dir={data_dir}", "--n_embd=16",
             "--input=learned", "--seed=0", "--code_seed=0", "--n_layer=2"]
    meta = read_meta(data_dir / "tiny")
    assert depth_width.why_not_kept(run, asked, meta, 12) is None
    assert depth_width.why_not_kept(run, [*asked, "--n_layer=3"], meta, 12) == "made with n_layer=2, not 3"
    assert "tokenizer" in depth_width.why_not_kept(run, asked, {**meta, "tokenizer": {}}, 12)
    assert depth_width.why_not_kept(tmp_path / "nothing", asked, meta, 12) == "not kept"
    depth_width.main(argv)  # everything kept: nothing trained again
    assert "training in" not in capsys.readouterr().out
