"""experiments/fairness.py: which runs each comparison needs, and a part of it end to end on the tiny
corpus (the whole takes hours: python -m experiments.fairness). Run: python -m pytest tests/test_fairness.py"""

import json
import shutil

import pytest

from conftest import TINY
from experiments import fairness
from experiments.runs import run_size


def test_each_part_brings_its_runs_and_every_frozen_runs_source_first():
    frozen = fairness.chosen(["frozen"])
    assert frozen[:2] == ["learned", "binary"] and frozen.index("learned-10pct") < frozen.index("frozen-10pct")
    assert fairness.chosen(["lr"]) == ["learned", "binary", "learned-table0.25x", "learned-table0.5x", "learned-table2x",
                                       "learned-lr8e-3", "learned-lr8e-3-table0.25x", "binary-lr8e-3"]
    args = fairness.arguments("frozen-25pct", 2, fairness.Path("runs"))
    assert args[1:] == ["--input=frozen", "--seed=2", "--code_seed=2", "--codes_from=runs/learned-25pct-seed2"]
    assert fairness.steps(120) == ["--max_iters=120", "--lr_decay_iters=120", "--warmup_iters=10"]


def test_compute_counts_frozens_source_and_each_question_finds_its_control():
    names = fairness.chosen(list(fairness.PARTS))
    steps = {"learned-10pct": 120, "learned-25pct": 300, "learned-1.1x": 1320, "learned-1.25x": 1500, "learned-2x": 2400}
    run_flops = {n: 7.0 * steps.get(n, 1200) for n in names}  # FLOPs proportional to steps, as train.py counts them
    bpb = {"learned": 2.0, "binary": 2.1, "frozen-25pct": 1.9, "learned-1.25x": 1.95, "learned-table0.5x": 1.97,
           "binary-lr8e-3": 1.99}
    runs = {n: [{"val_bpb": bpb.get(n, 2.05) + d, "input_params": 0} for d in (-0.01, 0.01)] for n in names}
    summary = fairness.summarize(runs, run_flops)
    assert [summary[n]["compute"] for n in ("frozen-10pct", "frozen-25pct", "frozen-full", "learned-2x")] == \
        pytest.approx([1.1, 1.25, 2.0, 2.0])
    found = {(q.split(":")[0], name, control): round(g["gap"], 6) for q, name, control, g in fairness.answers(summary)}
    assert found[("frozen at equal compute", "frozen-25pct", "learned-1.25x")] == -0.05
    assert ("frozen at equal compute", "frozen-10pct", "learned-1.1x") in found and len(found) == 5
    assert found[("the table at its own learning rate", "learned-table0.5x", "binary-lr8e-3")] == -0.02
    assert found[("kronecker at equal input parameters", "kronecker-pos4", "learned")] == 0.05


@pytest.mark.slow  # train.py processes and their probes: 40 s; CI runs the summaries
def test_the_kronecker_part_end_to_end_and_from_the_comparisons_runs(data_dir, tmp_path, capsys):
    def study(runs_dir, *extra):
        fairness.main(["--parts", "kronecker", "--seeds", "1", "--runs_dir", str(tmp_path / runs_dir), "--results_dir",
                       str(tmp_path / runs_dir / "results"), f"--data_dir={data_dir}", "--dataset=tiny", *TINY,
                       "--max_iters=4", "--lr_decay_iters=4", "--eval_interval=4", *extra])
        return json.loads((tmp_path / runs_dir / "results" / "fairness.json").read_text())["summary"]

    summary = study("runs")
    assert "4 runs, 4 to train: 4.0 base learned runs of compute" in capsys.readouterr().out
    assert list(summary) == ["learned", "binary", "kronecker-pos16", "kronecker-pos4"]
    assert summary["kronecker-pos4"]["input_params"] == 256 * 4 * 32 and summary["learned"]["input_params"] == 300 * 32
    assert "vs_learned" in summary["kronecker-pos4"] and "| kronecker-pos4 | kronecker | kronecker |" in (
        tmp_path / "runs" / "results" / "fairness.md").read_text()
    for name, kind in (("learned", "learned"), ("binary", "binary"), ("kronecker-pos16", "kronecker")):  # a comparison's
        shutil.copytree(tmp_path / "runs" / f"{name}-seed0", tmp_path / "compare" / f"{kind}-seed0")
    again = study("runs2", "--base_runs", str(tmp_path / "compare"))
    assert "4 runs, 1 to train: 1.0 base learned runs" in capsys.readouterr().out  # the estimate counts what is left
    made = sorted(p.name for p in (tmp_path / "runs2").glob("[!.]*"))  # not runs.claimed's dot-file locks
    assert made == ["kronecker-pos4-seed0", "results"]  # one trained
    assert {n: s["val_bpb"] for n, s in again.items()} == {n: s["val_bpb"] for n, s in summary.items()}
    with pytest.raises(SystemExit, match=r"trained with other settings \(learning_rate\); leave --base_runs out"):
        study("runs3", "--base_runs", str(tmp_path / "compare"), "--learning_rate=1e-3")
    assert not (tmp_path / "runs3" / "kronecker-pos4-seed0").exists()  # refused before any run


def test_a_frozen_runs_compute_is_binarys_without_its_source(tmp_path):
    settings = fairness.train_settings([*fairness.arguments("frozen-10pct", 0, tmp_path), "--dataset=shakespeare-plays"])
    binary = fairness.train_settings([*fairness.arguments("binary", 0, tmp_path), "--dataset=shakespeare-plays"])
    assert settings["codes_from"] and run_size(settings, 1024)[0] == run_size(binary, 1024)[0] > 0
