"""Hugging Face export: transformers loads our checkpoints as GPT-NeoX and computes what we compute.
Run: python -m pytest tests/test_hf.py"""

import base64
from dataclasses import asdict

import pytest
import torch

import sample
import train
from conftest import TINY
from model import GPT, GPTConfig
from tablefree.checkpoint import build_model, load_checkpoint
from tablefree.common import UserError
from tablefree.configurator import resolve
from tablefree.data import read_meta, split_ids
from tablefree.tokenizer import load_encoding
from tools import evaluate, export
from tools.hf import bpe_merges, export_hf, hf_tokenizer

transformers = pytest.importorskip("transformers", reason="the export is checked with transformers: "
                                   "pip install -r requirements-dev.txt")
KINDS = ["learned", "binary", "affine", "kronecker", "frozen"]


@pytest.fixture(scope="module")
def runs(data_dir, tmp_path_factory):
    """One short training run per input kind (frozen's codes from the learned run), exported to run/hf."""
    root = tmp_path_factory.mktemp("hf")
    for kind in KINDS:
        extra = [f"--codes_from={root / 'learned'}"] if kind == "frozen" else []
        train.train(resolve(train.DEFAULTS, ["--data_dir", str(data_dir), "--dataset=tiny", f"--out_dir={root / kind}",
                                             *TINY, f"--input={kind}", *extra, "--max_iters=20", "--eval_interval=20",
                                             "--lr_decay_iters=20"]))
        export.main(["--ckpt", str(root / kind)])
    return root


@pytest.mark.parametrize("kind", KINDS)
def test_transformers_computes_our_logits_and_greedy_tokens(runs, data_dir, kind):
    ckpt = load_checkpoint(runs / kind)
    ours = build_model(ckpt).eval()
    theirs = transformers.AutoModelForCausalLM.from_pretrained(runs / kind / "hf").eval()
    assert type(theirs).__name__ == "GPTNeoXForCausalLM"
    ids = torch.from_numpy(split_ids(data_dir / "tiny", read_meta(data_dir / "tiny"), "val")[:4 * 32].copy()).view(4, 32)
    with torch.no_grad():
        expected, got = ours(ids, all_positions=True)[0], theirs(ids).logits
    assert expected.std() > 0.2  # trained logits (an untrained model gives about 0.1)
    assert (got - expected).abs().max() < 1e-4
    prompt = "The crown of the"
    tokens = sample.sample(sample.parse_args(["--ckpt", str(runs / kind), "--start", prompt, "--temperature", "0",
                                              "--max_new_tokens", "20", "--num_samples", "1", "--device", "cpu"]))[0]
    enc = load_encoding(ckpt["tokenizer"])
    start = torch.tensor([enc.encode(prompt)])
    generated = theirs.generate(start, max_new_tokens=20, do_sample=False)[0, start.size(1):].tolist()
    assert generated[:len(tokens)] == tokens and len(tokens) >= 5
    assert generated[len(tokens):] in ([], [enc.eot_token])  # sample.py stops before the end-of-text token


def test_a_model_with_biases_maps_them_too(runs, tmp_path):
    ckpt = load_checkpoint(runs / "affine")
    config = GPTConfig(**{**ckpt["model_config"], "bias": True})
    torch.manual_seed(0)
    model = GPT(config).eval()
    for name, p in model.named_parameters():  # every bias and norm away from its initial value
        if p.dim() == 1:
            p.data.normal_(0, 0.5)
    export_hf(model, {**ckpt, "model_config": asdict(config)}, tmp_path / "hf")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    ids = torch.randint(0, 300, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (theirs(ids).logits - model(ids, all_positions=True)[0]).abs().max() < 1e-4


def test_the_model_card_says_how_the_input_table_was_made(runs):
    card = (runs / "binary" / "hf" / "README.md").read_text()
    assert "derived, not trained" in card and "x(t) = R bin_K(t)" in card
    table = transformers.AutoModelForCausalLM.from_pretrained(runs / "binary" / "hf").gpt_neox.embed_in.weight
    assert table.shape == (300, 32) and set(table.unique().tolist()) == {0.0, 1.0}  # the tiled bits, one row per id
    assert table[5, :9].tolist() == [0, 0, 0, 0, 0, 0, 1, 0, 1]  # K = 9 bits of 5, most significant first


def test_the_exported_tokenizer_encodes_as_ours(runs, data_dir):
    ckpt = load_checkpoint(runs / "binary")
    enc = load_encoding(ckpt["tokenizer"])
    tok = transformers.AutoTokenizer.from_pretrained(runs / "binary" / "hf")
    ids = split_ids(data_dir / "tiny", read_meta(data_dir / "tiny"), "val")
    text = enc.decode(ids[ids != enc.eot_token].tolist())
    samples = [text, "Crème brûlée, 日本語 and 🤖!\n\n  spaces\tand\r\nlines 12345 it's", ""]
    for s in samples:
        assert tok(s)["input_ids"] == enc.encode_ordinary(s)
        assert tok.decode(enc.encode_ordinary(s)) == s
    assert tok.eos_token_id == enc.eot_token == 299


def test_merges_recovered_from_ranks_encode_as_tiktoken():
    ranks = {bytes([b]): b for b in range(256)} | {b"ab": 256, b"abc": 257, b"bc": 258, b"abab": 259}
    assert bpe_merges(ranks) == [(b"a", b"b"), (b"ab", b"c"), (b"b", b"c"), (b"ab", b"ab")]
    state = {"ranks": "".join(f"{base64.b64encode(t).decode()} {r}\n" for t, r in ranks.items()),
             "info": {"name": "toy", "pattern": r"\S+|\s+", "eot_id": 260, "file": ""}}
    tok, enc = hf_tokenizer(state), load_encoding(state)
    assert tok.encode("ababc").ids == enc.encode_ordinary("ababc") == [256, 257]  # ab first (lowest), then abc
    for text in ["abc ababc bcab", "abab", "ababab", "abcabc", "bcbc abcab", "cba"]:
        assert tok.encode(text).ids == enc.encode_ordinary(text)
    assert tok.encode("<|endoftext|>").ids == [260]
    with pytest.raises(UserError, match="not a merge of two lower-ranked tokens"):
        bpe_merges({b"a": 0, b"b": 1, b"c": 2, b"abc": 3})


def test_the_real_harness_scores_as_eval_py(runs, tmp_path):
    pytest.importorskip("lm_eval", reason="the harness comparison needs lm-eval: pip install -r requirements-dev.txt")
    from test_eval import write_jsonl_folder

    folder = write_jsonl_folder(tmp_path / "tasks")
    tasks = "hellaswag,piqa,arc_easy,arc_challenge,lambada"
    common = ["--ckpt", str(runs / "learned"), "--tasks", tasks, "--data", str(folder), "--device", "cpu"]
    ours = evaluate.evaluate(evaluate.parse_args([*common, "--out", str(tmp_path / "ours.json")]))["results"]
    theirs = evaluate.evaluate(evaluate.parse_args([*common, "--harness", "--out", str(tmp_path / "theirs.json")]))["results"]
    for task in tasks.split(","):
        assert theirs[task]["n"] == ours[task]["n"]
        for metric in ("acc", "acc_norm"):
            assert theirs[task].get(metric) == ours[task].get(metric), (task, metric)
    assert theirs["lambada"]["ppl"] == pytest.approx(ours["lambada"]["ppl"], rel=1e-4)
    yaml = (runs / "learned" / "harness" / "tablefree_hellaswag.yaml").read_text()
    assert "lm_eval/tasks/hellaswag/hellaswag.yaml" in yaml  # the harness's own task definition, our rows


def test_without_safetensors_the_export_says_how_to_get_it_and_writes_nothing(monkeypatch, tmp_path):
    import importlib.util
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "safetensors" else find_spec(name, *a))
    model = GPT(GPTConfig(vocab_size=300, n_layer=1, n_head=2, n_embd=32, block_size=16))
    with pytest.raises(UserError, match="needs the safetensors package: pip install -r requirements-extras.txt"):
        export_hf(model, {}, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_a_model_card_the_user_edited_is_kept_unless_forced(runs, tmp_path):
    """Exporting again into our own folder: a file the user changed since (its sha256 no longer tablefree.json's)
    is theirs: the export is refused in one line naming the file and --force, and nothing is touched; --force
    replaces it, as the message says."""
    import shutil
    folder = tmp_path / "hf"
    shutil.copytree(runs / "binary" / "hf", folder)
    card = folder / "README.md"
    card.write_text(card.read_text() + "\nMy notes on this model.\n")
    before = {f.name: f.read_bytes() for f in folder.iterdir()}
    with pytest.raises(SystemExit, match=rf"export.py: error: {card} was changed since tools.export wrote it; copy it "
                                         r"elsewhere to keep it, then export again with --force to replace it"):
        export.main(["--ckpt", str(runs / "binary"), "--out", str(folder)])
    assert {f.name: f.read_bytes() for f in folder.iterdir()} == before
    export.main(["--ckpt", str(runs / "binary"), "--out", str(folder), "--force"])
    assert "My notes" not in card.read_text() and export.main(["--verify", str(folder)]) is None
