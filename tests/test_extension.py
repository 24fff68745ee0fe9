"""experiments/extension.py end to end on the tiny corpus (its grid at V = 8,192 takes hours:
python -m experiments.extension). Run: python -m pytest tests/test_extension.py"""

import json

import pytest

from conftest import TINY
from experiments import extension


def test_the_grid_is_every_combination():
    cells = extension.grid((64, 512), ("mean", "random"), (0,))
    assert [c[:3] for c in cells] == [(64, "mean", 0), (64, "random", 0), (512, "mean", 0), (512, "random", 0)]
    assert len({c[3] for c in cells}) == 4  # one report name each
    full = extension.grid((64, 2048), ("mean", "random"), (0, 200))
    assert [c[:3] for c in extension.model_cells("frozen+codes", full)] == [(2048, "mean", 0), (2048, "mean", 200)]
    assert len(extension.model_cells("learned+tied", full)) == 4 and len(extension.model_cells("learned", full)) == 8


@pytest.mark.slow  # a grid of train.py and extend processes: over a minute; CI runs the grid's plan
def test_tiny_grid_end_to_end_and_kept(data_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(extension, "BASE", [f"--data_dir={data_dir}", "--dataset=tiny", *TINY, "--max_iters=4",
                                            "--lr_decay_iters=4", "--eval_interval=4"])
    argv = ["--seeds", "1", "--inputs", "learned,binary,frozen", "--new_tokens", "8", "--new_rows", "mean,random",
            "--adapt_steps", "0", "--data_dir", str(data_dir), "--runs_dir", str(tmp_path / "runs"),
            "--results_dir", str(tmp_path / "results")]
    part = [*argv[:-1], str(tmp_path / "part"), "--inputs", "frozen"]  # a second process's share of the work
    extension.main(part)
    out = capsys.readouterr().out
    assert out.count(": training in") == 2 and "== learned, seed 0: adding" not in out  # frozen's source: trained only
    assert json.loads((tmp_path / "part" / "extension.json").read_text())["summary"]["8-mean-0"].keys() == {"frozen"}
    extension.main(argv)
    out = capsys.readouterr().out
    assert "== frozen" not in out and "== learned, seed 0 at" not in out  # read, not trained or extended again
    assert out.count(": adding 8 words") == 3  # learned's two cells, binary's mean cell
    results = json.loads((tmp_path / "results" / "extension.json").read_text())
    assert set(results["runs"]) == {"extend-8-mean-0", "extend-8-random-0"}
    binary = json.loads((tmp_path / "runs" / "binary-seed0" / "config.json").read_text())["model"]
    assert binary["extra_bits"] == 1  # headroom: 2^10 codes for 300 + 8 ids
    rows = {r["input"]: r for r in results["runs"]["extend-8-random-0"]}
    assert list(rows) == ["learned"] and rows["learned"]["table_rows"] == "random"  # the others have no table
    mean = {r["input"]: r for r in results["runs"]["extend-8-mean-0"]}
    assert list(mean) == ["learned", "binary", "frozen"] and mean["binary"]["input_note"]["aliased"] == 0
    md = (tmp_path / "results" / "extension.md").read_text()
    assert "| 8 | random | 0 |" in md and "| 8 | random | 0 | learned |" in md  # the grids and the buckets' table
    learned = results["summary"]["8-random-0"]["learned"]  # one seed: its buckets are the run's own
    assert learned["buckets_after"] == [[b["train_count"], b["loss"]] for b in rows["learned"]["after"]["buckets"]]
    assert learned["after"] == rows["learned"]["after"]["bpb"]
    kept = tmp_path / "runs" / "extensions" / "extend-8-mean-0" / "binary-seed0.json"
    assert sorted(p.name for p in kept.parent.glob("*.json")) == ["binary-seed0.json", "frozen-seed0.json",
                                                                  "learned-seed0.json"]  # one report per model
    made = kept.stat().st_mtime
    extension.main(argv)  # nothing is redone
    assert kept.stat().st_mtime == made
    pair = [*argv[:3], "learned+tied,frozen+codes", *argv[4:-1], str(tmp_path / "pair")]  # the frozen-code paper's
    extension.main(pair)
    rows = {r["kind"]: r for r in json.loads((tmp_path / "pair" / "extension.json").read_text())["runs"]["extend-8-mean-0"]}
    assert list(rows) == ["learned+tied", "frozen+codes"]
    coded = json.loads((tmp_path / "runs" / "frozen+codes-seed0" / "config.json").read_text())["model"]
    assert (coded["head"], coded["codes_from"]) == ("codes", str(tmp_path / "runs" / "learned+tied-seed0"))
    assert "The frozen-code paper: its frozen table accepts" in (tmp_path / "pair" / "extension.md").read_text()
