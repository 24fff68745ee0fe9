"""experiments/transfer.py: the corpus split's counts and parts on hand-made cases, the rare gap, that the
started-from-source arms begin at the source's rows and the control's other weights, and the study end to
end on the tiny corpus with --quick (the real study takes hours: python -m experiments.transfer).
Run: python -m pytest tests/test_transfer.py"""

import json

import numpy as np
import pytest
import torch

import train
from experiments import transfer
from experiments.runs import train_settings
from tablefree.checkpoint import build_model, load_checkpoint
from tablefree.configurator import check_settings
from tablefree.corpus import CPU_MIX, doc_split
from tablefree.data import Dataset


def test_count_shares_by_hand():
    counts = [0, 0, 5, 9, 10, 99, 100, 1000]  # 8 ids
    assert transfer.count_shares(counts) == {1: 2 / 8, 10: 4 / 8, 100: 6 / 8}


def test_a_parts_documents_keep_their_split_so_the_held_out_domain_is_in_no_training_split():
    assert set(CPU_MIX["cpu-mix-nowiki"]) | set(CPU_MIX["cpu-mix-wiki"]) == set(CPU_MIX["cpu-mix"])
    assert not set(CPU_MIX["cpu-mix-nowiki"]) & set(CPU_MIX["cpu-mix-wiki"])
    plays = [f"ACT {i}. Enter a player, who speaks line {i}.\n" for i in range(60)]
    articles = [f"Article {i}\n\nAn encyclopedia entry, number {i}.\n" for i in range(60)]
    whole = {doc: split for split, doc, _ in doc_split(plays + articles, 0.2)}  # the source's corpus
    body = {doc: split for split, doc, _ in doc_split(plays, 0.2)}
    held = {doc: split for split, doc, _ in doc_split(articles, 0.2)}
    assert all(whole[doc] == split for doc, split in {**body, **held}.items())  # a part's splits are the whole's
    held_out = {doc for doc, split in held.items() if split == "val"}
    assert held_out and not held_out & {doc for doc, split in {**whole, **body}.items() if split == "train"}


def test_rare_gap_by_hand():
    arms = dict.fromkeys(transfer.ARMS, 3.0)
    rows = [("0", 10, {**arms, "frozen+codes@source": 1.0}), ("1-9", 5, {**arms, "frozen+codes@source": 4.0}),
            ("100-999", 7, {**arms, "frozen+codes@source": 0.0})]  # the last is not rare
    assert transfer.rare_gap(rows, "frozen+codes@source") == pytest.approx((10 * -2.0 + 5 * 1.0) / 15)
    assert transfer.rare_gap(rows, "learned+tied@source") == 0.0


def test_the_started_arm_begins_at_the_source_rows_and_the_controls_other_weights(data_dir, tmp_path):
    argv = [*transfer.BASE, *transfer.QUICK, "--dataset=tiny", f"--data_dir={data_dir}", "--input=learned",
            "--tie_weights=True", "--seed=3"]
    data = Dataset(data_dir, "tiny", 32)
    table = np.random.default_rng(0).standard_normal((data.vocab_size, 16)).astype(np.float32)
    np.save(tmp_path / "table.npy", table)
    transfer.write_start(tmp_path / "start", argv, tmp_path / "table.npy", data)
    started = build_model(load_checkpoint(tmp_path / "start"))
    idx = torch.tensor([[0, 5, data.vocab_size - 1]])
    assert torch.equal(started.wte(idx), torch.from_numpy(table)[idx])  # the first forward's input: the rows
    assert started.lm_head.weight is started.wte.weight  # tied: the head reads the same rows
    control, _ = train.new_model(check_settings(train_settings(argv)), data)  # train.py's own start
    theirs = {k: v for k, v in control.state_dict().items() if not k.startswith(("wte.", "lm_head."))}
    ours = started.state_dict()
    assert theirs and all(torch.equal(ours[k], v) for k, v in theirs.items())


@pytest.mark.slow  # 15 train.py, evaluate and extend processes: a minute and a half; CI runs the parts
def test_quick_study_end_to_end_and_kept(data_dir, tmp_path, capsys):
    data = Dataset(data_dir, "tiny", 32)
    np.save(tmp_path / "table.npy", np.random.default_rng(1).standard_normal((data.vocab_size, 16)).astype(np.float32))
    argv = ["--quick", "--dataset", "tiny", "--heldout", "tiny", "--source_table", str(tmp_path / "table.npy"),
            "--new_tokens", "8", "--seeds", "1", "--data_dir", str(data_dir), "--runs_dir", str(tmp_path / "runs"),
            "--results_dir", str(tmp_path / "results")]
    transfer.main(argv)
    out = capsys.readouterr().out
    assert out.count(": training in") == 5 and out.count(": adding 8 words") == 5
    results = json.loads((tmp_path / "results" / "transfer.json").read_text())
    runs = tmp_path / "runs"
    started = json.loads((runs / "frozen-float@source-seed0" / "config.json").read_text())
    assert started["finetuned_from"]["checkpoint"] == str(runs / "starts" / "frozen-float@source-seed0" / "ckpt.pt")
    assert started["settings"]["input_lr_scale"] == 0
    final = load_checkpoint(runs / "frozen-float@source-seed0")["model"]["wte.weight"]
    assert torch.equal(final, torch.from_numpy(np.load(tmp_path / "table.npy")))  # frozen: not one bit moved
    coded = json.loads((runs / "frozen+codes@source-seed0" / "config.json").read_text())
    assert coded["model"]["codes_from"] == str(tmp_path / "table.npy")
    control = json.loads((runs / "frozen+codes@control-seed0" / "config.json").read_text())
    assert control["model"]["codes_from"] == str(runs / "learned+tied-seed0" / "table.npy")  # kept: no checkpoint needed
    assert torch.equal(torch.from_numpy(np.load(runs / "learned+tied-seed0" / "table.npy")),
                       load_checkpoint(runs / "learned+tied-seed0")["model"]["wte.weight"])
    arms = results["summary"]["arms"]
    tied, source = (results["runs"][a][0] for a in ("learned+tied", "learned+tied@source"))
    assert arms["learned+tied@source"]["vs"]["learned+tied"]["heldout_loss"]["mean"] == pytest.approx(
        source["heldout"]["val"]["loss"] - tied["heldout"]["val"]["loss"])
    assert set(results["shares"]) == {"1", "10", "100"}
    md = (tmp_path / "results" / "transfer.md").read_text()
    assert "| frozen-float@source |" in md and "new words from the held-out articles" in md
    hours = sum(run["run"]["steady_s"] for rows in results["runs"].values() for run in rows) / 3600
    assert f"The 5 runs: {hours:.1f} lane-hours at their median step times" in md
    assert (tmp_path / "results" / "transfer.png").exists()
    for ckpt in runs.glob("*/ckpt.pt"):  # a new machine with the kept files (experiments/keep.py keeps no checkpoint)
        ckpt.unlink()
    transfer.main(argv)  # everything kept: nothing trained, scored or extended again
    out = capsys.readouterr().out
    assert "training in" not in out and "adding" not in out and "scoring" not in out
