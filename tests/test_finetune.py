"""Fine-tuning from a checkpoint (--init_from=<run>) and supervised fine-tuning data with a loss mask
(prepare.py --sft). Run: python -m pytest tests/test_finetune.py"""

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import prepare
import train
from conftest import TINY
from model import GPT, GPTConfig, INPUTS
from tablefree.checkpoint import load_checkpoint
from tablefree.common import UserError
from tablefree.configurator import resolve
from tablefree.data import open_masks, open_split, read_meta, windows
from tablefree.rundir import read_log
from tablefree.tokenizer import load_tokenizer
from tools import evaluate


def run(data_dir, out_dir, *argv, dataset="tiny"):
    """train.py in this process, as its command line would (only the settings given count as given);
    returns its evaluations (step, val loss)."""
    given = set()
    train.train(resolve(train.DEFAULTS, ["--data_dir", str(data_dir), f"--dataset={dataset}", f"--out_dir={out_dir}",
                                         *TINY, *argv], given), given)
    return [(r["iter"], r["val_loss"]) for r in read_log(out_dir / "log.jsonl") if "val_loss" in r]


@pytest.mark.parametrize("kind", [*INPUTS, "binary+ternary"])
def test_fine_tuning_starts_from_the_checkpoints_weights_with_a_fresh_optimizer(data_dir, tmp_path, kind):
    kind, _, body = kind.partition("+")
    source = tmp_path / "table.pt"
    torch.save(torch.randn(300, 40, generator=torch.Generator().manual_seed(0)), source)
    model = [f"--input={kind}", f"--body={body or 'float'}", *([f"--codes_from={source}"] if kind == "frozen" else [])]
    trained = run(data_dir, tmp_path / "a", *model, "--max_iters=6", "--eval_interval=3", "--dropout=0.1")
    # a new run from it: no model setting given, so all come from the checkpoint (dropout may change)
    tuned = run(data_dir, tmp_path / "b", f"--init_from={tmp_path / 'a'}", "--max_iters=2", "--eval_interval=2",
                "--learning_rate=1e-3", "--dropout=0.0")
    assert tuned[0] == (0, trained[-1][1])  # step 0 scores the checkpoint's weights on the same batches, exactly
    a, b = load_checkpoint(tmp_path / "a"), load_checkpoint(tmp_path / "b")
    assert b["iter_num"] == 2 and {s["step"].item() for s in b["optimizer"]["state"].values()} == {2.0}  # fresh AdamW
    assert {s["step"].item() for s in a["optimizer"]["state"].values()} == {6.0}
    assert b["model_config"] == {**a["model_config"], "dropout": 0.0}
    fixed = [k for k in a["model"] if not any(k == n for n, _ in GPT(GPTConfig(**a["model_config"])).named_parameters())]
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in fixed)  # codes and buffers come with the model
    config = json.loads((tmp_path / "b" / "config.json").read_text())
    assert config["finetuned_from"] == {"checkpoint": str(tmp_path / "a" / "ckpt.pt"), "iter_num": 6, "dataset": "tiny"}
    resumed = run(data_dir, tmp_path / "b", "--init_from=resume", "--max_iters=3", "--eval_interval=1")
    assert [step for step, _ in resumed] == [0, 2, 3]  # a fine-tuning run resumes as any run
    assert load_checkpoint(tmp_path / "b")["finetuned_from"] == config["finetuned_from"]


def test_fine_tuning_refuses_another_tokenizer_another_shape_and_its_own_folder(data_dir, tmp_path):
    run(data_dir, tmp_path / "a", "--max_iters=2", "--eval_interval=2")
    other = tmp_path / "other.txt"
    other.write_text("A wholly different text, with its own byte pairs: zebra quartz jukebox.\n" * 200)
    prepare.prepare(prepare.parse_args(["--input", str(other), "--name", "other", "--out_dir", str(data_dir),
                                        "--vocab_size", "300", "--quiet"]))
    with pytest.raises(UserError, match=r"prepared with another .*--tokenizer_from .*tiny"):
        run(data_dir, tmp_path / "b", f"--init_from={tmp_path / 'a'}", "--max_iters=2", dataset="other")
    with pytest.raises(UserError, match="trained with n_layer=2, not 3; a fine-tuned model keeps"):
        run(data_dir, tmp_path / "b", f"--init_from={tmp_path / 'a'}", "--max_iters=2", "--n_layer=3")
    with pytest.raises(UserError, match="holds the run being fine-tuned"):
        run(data_dir, tmp_path / "a", f"--init_from={tmp_path / 'a'}", "--max_iters=2", "--overwrite=True")
    with pytest.raises(UserError, match="is not 'scratch', 'resume' or a trained run"):
        run(data_dir, tmp_path / "b", f"--init_from={tmp_path / 'missing'}", "--max_iters=2")
    with pytest.raises(UserError, match="no checkpoint at"):
        run(data_dir, tmp_path / "b", f"--init_from={data_dir}", "--max_iters=2")  # a folder without one
    # with the model's tokenizer the same text trains
    prepare.prepare(prepare.parse_args(["--input", str(other), "--name", "other2", "--out_dir", str(data_dir),
                                        "--tokenizer_from", str(data_dir / "tiny"), "--quiet"]))
    assert run(data_dir, tmp_path / "c", f"--init_from={tmp_path / 'a'}", "--max_iters=2", dataset="other2")


@pytest.fixture(scope="module")
def sft_data(data_dir, tmp_path_factory):
    """A prepared SFT dataset of good and bad rows, in the tiny corpus's tokenizer."""
    rows = tmp_path_factory.mktemp("sft") / "pairs.jsonl"
    good = [json.dumps({"prompt": f"{v}: the {w} of the king is", "response": f" {v}."}) for w in
            ("crown", "horse", "sword", "castle", "queen", "gold") for v in ("gold", "grey", "old", "bright")]
    bad = ['{"prompt": "no response"}', '{"prompt": "x", "response": ""}', "not json at all", '["x", "y"]',
           json.dumps({"prompt": "the king " * 40, "response": "too long"}), '{"prompt": "\\ud800", "response": "a"}']
    rows.write_bytes(("\n".join(good[:12] + bad + good[12:]) + "\n").encode() + b'{"prompt": "\xff", "response": "b"}\n')
    meta = prepare.prepare(prepare.parse_args(["--sft", "--input", str(rows), "--name", "sft", "--out_dir", str(data_dir),
                                               "--tokenizer_from", str(data_dir / "tiny"), "--block_size", "32",
                                               "--val_fraction", "0.25", "--quiet"]))
    return data_dir / "sft", meta


def test_sft_rows_become_bins_and_masks_and_bad_rows_are_counted(sft_data, data_dir, capsys):
    directory, meta = sft_data
    assert meta["sft"]["bad_rows"] == {"not JSON": 1, "not an object": 1, "no prompt or response": 1,
                                       "empty response": 1, "not UTF-8": 1, "a lone surrogate": 1,
                                       "longer than block_size": 1}
    assert meta["sft"]["examples"] == 24 and meta["tokenizer"] == read_meta(data_dir / "tiny")["tokenizer"]
    enc = load_tokenizer(directory, meta["tokenizer"])
    pairs = {}
    for split in ("train", "val"):
        shards = open_split(directory, meta, split)
        ids, mask = np.concatenate(shards), np.concatenate(open_masks(directory, meta, split, shards))
        assert meta["splits"][split]["scored_tokens"] == int(mask.sum())
        ends = np.flatnonzero(ids == enc.eot_token)
        assert ends[-1] == len(ids) - 1 and mask[ends].all()  # each example closes with a counted end-of-text
        for start, end in zip([0, *(ends[:-1] + 1)], ends):
            prompt, response = ids[start:end][mask[start:end] == 0], ids[start:end][mask[start:end] == 1]
            assert (mask[start:end] == 0).sum() == len(prompt) and mask[start:start + len(prompt)].sum() == 0  # prompt first
            pairs[enc.decode(prompt.tolist())] = (enc.decode(response.tolist()), split)
    assert {p: r for p, (r, _) in pairs.items()} == {f"{v}: the {w} of the king is": f" {v}." for w in
                                                     ("crown", "horse", "sword", "castle", "queen", "gold")
                                                     for v in ("gold", "grey", "old", "bright")}
    assert {split for _, split in pairs.values()} == {"train", "val"}


def test_a_masked_target_adds_nothing_to_the_loss_or_its_gradient(sft_data):
    directory, meta = sft_data
    shards = open_split(directory, meta, "train")
    masks = open_masks(directory, meta, "train", shards)
    x, y = windows(shards, 4, 32, torch.Generator().manual_seed(0), masks)
    x0, y0 = windows(shards, 4, 32, torch.Generator().manual_seed(0))
    ones = [np.ones_like(m) for m in masks]
    assert torch.equal(x, x0) and torch.equal(windows(shards, 4, 32, torch.Generator().manual_seed(0), ones)[1], y0)
    counted = y != -1
    assert 0 < counted.sum() < counted.numel() and torch.equal(y[counted], y0[counted])
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=meta["vocab_size"], n_layer=1, n_head=2, n_embd=32, block_size=32))
    logits, loss = model(x, y)
    logits.retain_grad()
    log_probs = F.log_softmax(logits.detach().double(), dim=-1)
    by_hand = -sum(log_probs[b, t, y0[b, t]] for b, t in counted.nonzero().tolist()) / counted.sum()
    assert abs(loss.item() - by_hand.item()) < 1e-5
    loss.backward()
    assert logits.grad[~counted].abs().max() == 0 and logits.grad[counted].abs().max() > 0


def test_sft_training_needs_the_context_the_data_was_made_for_and_scores_exact_match(sft_data, data_dir, tmp_path):
    run(data_dir, tmp_path / "a", "--max_iters=2", "--eval_interval=2")
    with pytest.raises(UserError, match="prepared for block_size 32"):
        run(data_dir, tmp_path / "too-short", "--block_size=16", "--max_iters=2", dataset="sft")
    tuned = run(data_dir, tmp_path / "b", f"--init_from={tmp_path / 'a'}", "--max_iters=2", "--eval_interval=2",
                dataset="sft")
    assert all(np.isfinite(loss) for _, loss in tuned)
    report = evaluate.evaluate(evaluate.parse_args(["--ckpt", str(tmp_path / "b"), "--tasks", "sft", "--data_dir",
                                                    str(data_dir), "--device", "cpu"]))
    sft = report["results"]["sft"]
    directory, meta = sft_data
    val_examples = int(sum((np.asarray(s) == meta["tokenizer"]["eot_id"]).sum() for s in open_split(directory, meta, "val")))
    assert sft["n"] == val_examples and 0 <= sft["exact_match"] <= 1
    assert sft["examples"][0]["prompt"].endswith(" of the king is") and sft["examples"][0]["response"].startswith(" ")
