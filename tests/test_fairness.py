"""experiments/fairness.py: which runs each comparison needs, and a part of it end to end on the tiny
corpus (the whole takes hours: python -m experiments.fairness). Run: python -m pytest tests/test_fairness.py"""

import json

from conftest import TINY
from experiments import fairness


def test_each_part_brings_its_runs_and_every_frozen_runs_source_first():
    frozen = fairness.chosen(["frozen"])
    assert frozen[:2] == ["learned", "binary"] and frozen.index("learned-10pct") < frozen.index("frozen-10pct")
    assert fairness.chosen(["lr"]) == ["learned", "binary", "learned-lr0.25", "learned-lr0.5", "learned-lr2"]
    args = fairness.arguments("frozen-25pct", 2, fairness.Path("runs"))
    assert args[1:] == ["--input=frozen", "--seed=2", "--code_seed=2", "--codes_from=runs/learned-25pct-seed2"]
    assert fairness.RUNS["frozen-25pct"][3] == 1 + fairness.RUNS["learned-25pct"][3]  # the pair's compute
    assert fairness.steps(120) == ["--max_iters=120", "--lr_decay_iters=120", "--warmup_iters=10"]


def test_the_kronecker_part_end_to_end(data_dir, tmp_path):
    fairness.main(["--parts", "kronecker", "--seeds", "1", "--runs_dir", str(tmp_path / "runs"), "--results_dir",
                   str(tmp_path / "results"), f"--data_dir={data_dir}", "--dataset=tiny", *TINY, "--max_iters=4",
                   "--lr_decay_iters=4", "--eval_interval=4"])
    summary = json.loads((tmp_path / "results" / "fairness.json").read_text())["summary"]
    assert list(summary) == ["learned", "binary", "kronecker-pos16", "kronecker-pos4"]
    assert summary["kronecker-pos4"]["input_params"] == 256 * 4 * 32 and summary["learned"]["input_params"] == 300 * 32
    assert "vs_learned" in summary["kronecker-pos4"] and "| kronecker-pos4 | kronecker | kronecker |" in (
        tmp_path / "results" / "fairness.md").read_text()
