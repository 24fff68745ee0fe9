"""experiments/compare.py end to end on a tiny preset (every run a real train.py process), and the table's arithmetic. Run: python -m pytest tests/test_compare.py"""

import json
import math

import pytest

from conftest import TINY
from experiments import compare, stats
from model import INPUTS


def fake_run(loss, trainable=1000, input_params=0):
    return {"val_loss": loss, "val_ppl": math.exp(loss), "val_bpb": 1.0, "tokens": 4096, "trainable": trainable,
            "input_params": input_params, "wall_s": 60.0, "steady_s": 50.0, "curve": [[0, 5.0], [10, loss]], "skipped": []}


def test_lane_hours_by_hand():
    """A study's cost line: the runs' lengths at their median step and by their wall clocks, summed, in hours."""
    runs = [{**fake_run(4.0), "steady_s": 1800.0, "wall_s": 3600.0}, {**fake_run(4.1), "steady_s": 5400.0, "wall_s": 7200.0}]
    assert stats.lane_hours(runs) == {"runs": 2, "steady": 2.0, "wall": 3.0}
    assert stats.lane_hours_line(stats.lane_hours(runs)) == (
        "The 2 runs: 2.0 lane-hours at their median step times (3.0 by their wall clocks, which also count the queue's "
        "pauses and restarts).")


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
    machine = {"cpu": "x", "threads": 2, "gpu": None, "torch": "2", "date": "d"}
    table = compare.report("t", "python -m experiments.compare", machine, s)
    assert "| learned | 3 | 1.1000 ± 0.1000 |" in table and "exceeds seed variation" in table and "is within seed variation" in table


def test_the_norms_first_and_last_evaluation_mean_over_seeds():
    def normed(first, last, projection=None):
        parts = [{"input": {"mean": v, "std": 0.1}, "head": {"mean": 2 * v, "std": 0.1},
                  **({"projection": {"mean": projection, "std": 0.0}} if projection else {})} for v in (first, 0.0, last)]
        return {**fake_run(1.0), "norms": [[step, n] for step, n in zip((0, 5, 10), parts)]}
    s = compare.summarize({"learned": [normed(0.2, 0.5), normed(0.4, 0.7)], "kronecker": [normed(1.0, 1.5, 0.25)] * 2})
    assert s["learned"]["norms"]["input"] == pytest.approx([0.3, 0.6]) and s["learned"]["norms"]["head"] == pytest.approx([0.6, 1.2])
    table = "\n".join(compare.norm_table(s))
    assert "| learned | 0.300 -> 0.600 (2.00x) | 0.600 -> 1.200 (2.00x) |  |" in table
    assert "| kronecker | 1.000 -> 1.500 (1.50x) | 2.000 -> 3.000 (1.50x) | 0.250 -> 0.250 (1.00x) |" in table


def test_probe_summary_arithmetic():
    def probed(top1, echo):
        return {**fake_run(1.0), "probes": {"spelling_top1": top1, "spelling_kl": 2 * top1, "echo_rate": echo,
                                            "echo_rate_sampled": echo / 2,
                                            "spelling_by_category": {"case": top1, "swap": 1 - top1},
                                            "layers": {"byte_similar": [1.0, top1], "meaning_similar": [0.5, echo]}}}
    kronecker = [probed(0.7, 1.0), probed(0.7, 1.0)]
    for k, run in enumerate(kronecker):  # only the Kronecker input has the override's rates
        run["probes"] |= {"echo_rate_override": 0.2 * k, "echo_rate_override_sampled": 0.1}
    s = compare.summarize({"learned": [probed(0.4, 0.0), probed(0.6, 0.5)], "kronecker": kronecker})
    assert s["learned"]["spelling_top1"] == pytest.approx(0.5) and s["learned"]["spelling_top1_std"] == pytest.approx(0.1414, abs=1e-4)
    assert s["learned"]["echo_rate"] == pytest.approx(0.25) and s["kronecker"]["spelling_by_category"]["swap"] == pytest.approx(0.3)
    table = "\n".join(compare.probe_tables(s))
    assert "| learned | 0.500 ± 0.141 | 1.000 ± 0.283 | 0.250 ± 0.354 | 0.125 ± 0.177 |  |  |" in table
    assert "| 1.000 ± 0.000 | 0.500 ± 0.000 | 0.100 ± 0.141 | 0.100 ± 0.000 |" in table and "echo_rate_override" not in s["learned"]
    assert "| swap | 0.50 | 0.30 |" in table
    assert "| learned | byte similar | 1.000 | 0.500 |" in table and "| kronecker | meaning similar | 0.500 | 1.000 |" in table


@pytest.mark.slow  # 12 train.py processes and their probes: minutes; CI runs the parts (summaries, tables, probes)
def test_tiny_preset_end_to_end_and_resumes(data_dir, tmp_path, capsys):
    argv = ["--name", "tiny", "--seeds", "2", "--results_dir", str(tmp_path / "results"), "--runs_dir", str(tmp_path / "runs"),
            "--data_dir", str(data_dir), "--dataset=tiny", *TINY, "--max_iters=4", "--lr_decay_iters=4", "--eval_interval=2"]
    compare.main(argv)
    results = json.loads((tmp_path / "results" / "tiny.json").read_text())
    table = (tmp_path / "results" / "tiny.md").read_text()
    assert "| binary | 2 |" in table and list(results["summary"]) == [*INPUTS, "binary+ternary", "learned+tied", "frozen+codes"]
    assert "| category | learned | binary | affine | kronecker | frozen | binary+ternary | learned+tied | frozen+codes |" in table
    assert "| token inputs | head rows | Kronecker projection rows |" in table  # the logged norms, every input
    ternary = json.loads((tmp_path / "runs" / "binary+ternary-seed1" / "config.json").read_text())["model"]
    assert (ternary["input"], ternary["body"], ternary["code_seed"]) == ("binary", "ternary", 1)
    assert "vs_base" in results["summary"]["binary+ternary"] and "- binary+ternary vs binary (float body)" in table
    frozen = [json.loads((tmp_path / "runs" / f"frozen-seed{k}" / "config.json").read_text()) for k in (0, 1)]
    assert [f["model"]["codes_from"] for f in frozen] == [str(tmp_path / "runs" / f"learned-seed{k}") for k in (0, 1)]
    coded = json.loads((tmp_path / "runs" / "frozen+codes-seed1" / "config.json").read_text())["model"]
    assert (coded["head"], coded["codes_from"]) == ("codes", str(tmp_path / "runs" / "learned+tied-seed1"))
    assert "- frozen+codes vs learned+tied: val loss" in table and "- frozen+codes vs frozen (untied head)" in table
    assert "- The frozen-code paper's pair: the tied learned table buys" in table
    quality = results["summary"]["frozen"]["code_quality"]
    assert quality["V"] == 300 and quality["D"] == 32 and "- frozen codes, mean over seeds" in table
    assert results["runs"]["kronecker"][0]["input_params"] == 4096 * 32  # the projection, D x n_embd
    assert 0 <= results["summary"]["kronecker"]["spelling_top1"] <= 1 and results["runs"]["learned"][1]["probes"]["echo_rate"] >= 0
    assert 0 <= results["summary"]["kronecker"]["echo_rate_override"] <= 1 and "echo_rate_override" not in results["summary"]["binary"]
    for kind, runs in results["runs"].items():
        assert len(runs) == 2 and all(r["tokens"] == 4 * 2 * 8 * 32 for r in runs)
        losses = [r["val_loss"] for r in runs]
        assert results["summary"][kind]["val_loss"] == pytest.approx(sum(losses) / 2)
    assert results["runs"]["learned"][0]["input_params"] == 300 * 32 and results["runs"]["affine"][1]["input_params"] == 0
    affine = [json.loads((tmp_path / "runs" / f"affine-seed{k}" / "config.json").read_text()) for k in (0, 1)]
    assert [a["model"]["code_seed"] for a in affine] == [0, 1]  # each seed draws its own A and b
    assert results["runs"]["binary"][0]["val_loss"] != results["runs"]["binary"][1]["val_loss"]  # seeds differ

    def state():  # every file the runs and their probes write
        return {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").rglob("*") if p.is_file()}

    before, _ = state(), capsys.readouterr()
    compare.main(argv)  # everything finished: the table is rebuilt from the logs and each run's eval.json
    assert state() == before and "== " not in capsys.readouterr().out  # no run trained, no probe scored again
    longer = [a.replace("--max_iters=4", "--max_iters=6").replace("--lr_decay_iters=4", "--lr_decay_iters=6") for a in argv]
    compare.main([*longer, "--inputs", "binary", "--seeds", "1"])  # the run continues from its step-4 checkpoint
    log = [json.loads(line) for line in (tmp_path / "runs" / "binary-seed0" / "log.jsonl").read_text().splitlines()]
    assert json.loads((tmp_path / "runs" / "binary-seed0" / "eval.json").read_text())["iter_num"] == 6  # probed again
    assert [r["iter"] for r in log if "loss" in r] == [1, 2, 3, 4, 5, 6]


def test_steps_to_a_target_loss_are_interpolated_between_evaluations():
    from experiments.stats import steps_to, steps_to_learned
    curve = [[0, 7.0], [100, 5.0], [200, 4.0], [300, 3.5]]
    assert steps_to(curve, 4.5) == 150 and steps_to(curve, 4.0) == 200 and steps_to(curve, 7.5) == 0
    assert steps_to(curve, 3.0) is None
    learned = [{"val_loss": 3.5, "curve": curve}, {"val_loss": 3.5, "curve": curve}]
    faster = [{"curve": [[0, 7.0], [100, 4.5], [200, 3.0]]}, {"curve": [[0, 7.0], [100, 3.0]]}]
    t = steps_to_learned(faster, learned)  # 166.7 and 87.5 steps against learned's 300
    assert t["reached"] == 2 and abs(t["steps"] - (500 / 3 + 87.5) / 2) < 1e-9
    assert abs(t["ratio"] - (300 / (500 / 3) + 300 / 87.5) / 2) < 1e-9
    assert steps_to_learned([{"curve": [[0, 7.0], [100, 6.0]]}], learned[:1])["reached"] == 0
