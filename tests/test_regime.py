"""experiments/regime.py: its shape is the paper's regime, its buckets and rare gap on a hand-made
case, and the study end to end on the tiny corpus with --quick (the real study takes hours:
python -m experiments.regime). Run: python -m pytest tests/test_regime.py"""

import json

import numpy as np
import pytest
import torch

from experiments import regime
from experiments.runs import train_settings
from model import GPT, param_counts
from tablefree.checkpoint import load_checkpoint
from tablefree.configurator import check_settings, model_config


def counts(**changes):
    settings = train_settings([*regime.BASE, *[f"--{k}={v}" for k, v in changes.items()]])
    with torch.device("meta"):
        return param_counts(GPT(model_config(check_settings(settings), 8192)))


def test_the_shape_is_the_papers_regime():
    tied = counts(input="learned", tie_weights=True)
    coded = counts(input="frozen", head="codes", codes_from="source")
    binary = counts(input="binary")
    assert (tied["trainable"], tied["input"], coded["trainable"]) == (820_032, 524_288, 308_032)  # the docstring's
    assert 0.55 <= tied["input"] / tied["trainable"] <= 0.70  # the paper: 168M of 268M, 63%
    assert 2.4 <= tied["trainable"] / coded["trainable"] <= 2.8  # the paper: 2.6x
    assert binary["trainable"] == tied["trainable"]  # the table moved to an untied head
    tokens = 3000 * 16 * 128
    assert 7.0 <= tokens / tied["trainable"] <= 8.0  # the paper: 2.05B tokens for 268M, 7.6


def buckets(*losses):
    """A run's rare_tokens buckets: three, with 10, 5 and 0 held-out targets."""
    return [{"train_count": label, "n": n, "loss": loss} for (label, n), loss in
            zip((("0", 10), ("1-99", 5), ("100-999", 0)), losses)]


def test_buckets_and_the_rare_gap_by_hand():
    made = {arm: [(None, buckets(*ls), None) for ls in seeds] for arm, seeds in {
        "learned+tied": [(4.0, 3.0, None), (6.0, 5.0, None)],  # means 5.0 and 4.0
        "frozen+codes": [(3.0, 4.0, None), (3.0, 4.0, None)],
        "frozen+codes-long": [(5.0, 4.0, None), (5.0, 4.0, None)],
        "binary": [(5.0, 4.0, None), (5.0, 4.0, None)]}.items()}
    rows = regime.bucket_table(made)
    assert [(label, n) for label, n, _ in rows] == [("0", 10), ("1-99", 5), ("100-999", 0)]
    assert rows[0][2]["learned+tied"] == 5.0 and rows[1][2]["learned+tied"] == 4.0 and rows[2][2]["binary"] is None
    # frozen+codes: -2 nats on 10 targets, 0 on 5: weighted by targets, -20/15
    assert regime.rare_gap(rows, "frozen+codes") == pytest.approx(-20 / 15)
    assert regime.rare_gap(rows, "binary") == 0.0
    edges = [(">=100,000", 7, {"learned+tied": 1.0, "binary": 2.0})]  # not rare: no gap to report
    assert regime.rare_gap(edges, "binary") is None


@pytest.mark.slow  # a dozen train.py and evaluate processes: over a minute; CI runs the shape, buckets and gap
def test_quick_study_end_to_end_and_kept(data_dir, tmp_path, capsys):
    argv = ["--quick", "--dataset", "tiny", "--new_tokens", "8", "--seeds", "1", "--data_dir", str(data_dir),
            "--runs_dir", str(tmp_path / "runs"), "--results_dir", str(tmp_path / "results")]
    regime.main(argv)
    out = capsys.readouterr().out
    assert out.count(": training in") == 5  # the long source, then one seed of each arm
    assert out.count(": adding 8 words") == 2  # the pair only
    results = json.loads((tmp_path / "results" / "regime.json").read_text())
    coded = json.loads((tmp_path / "runs" / "frozen+codes-long-seed0" / "config.json").read_text())
    assert coded["model"]["codes_from"] == str(tmp_path / "runs" / "learned+tied-4x-seed0" / "table.npy")
    source_table = np.load(tmp_path / "runs" / "learned+tied-4x-seed0" / "table.npy")
    assert np.array_equal(source_table, load_checkpoint(tmp_path / "runs" / "learned+tied-4x-seed0")["model"]["wte.weight"])
    source = json.loads((tmp_path / "runs" / "learned+tied-4x-seed0" / "config.json").read_text())["settings"]
    assert source["max_iters"] == regime.LONGER * 12 and source["lr_decay_iters"] == regime.LONGER * 12
    arms = results["summary"]["arms"]
    tied = results["runs"]["learned+tied"][0]
    assert arms["learned+tied"]["val_loss"] == tied["run"]["val_loss"]  # one seed: its run's own numbers
    assert arms["frozen+codes"]["vs_learned"]["loss_gap"] == pytest.approx(
        results["runs"]["frozen+codes"][0]["run"]["val_loss"] - tied["run"]["val_loss"])
    assert arms["learned+tied"]["extension"] == tied["extension"]["bpb_change"]
    assert results["runs"]["binary"][0]["extension"] is None
    assert results["params"]["frozen+codes"]["head"] > 0 and results["params"]["learned+tied"]["head"] == 0
    md = (tmp_path / "results" / "regime.md").read_text()
    assert "the tied table buys" in md and "| 1-9 |" in md and (tmp_path / "results" / "regime.png").exists()
    regime.main(argv)  # everything kept: nothing trained, scored or extended again
    out = capsys.readouterr().out
    assert "training in" not in out and "adding" not in out and "scoring" not in out
