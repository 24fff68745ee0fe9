"""Adding words after training (tools/extend.py, tablefree/extension.py). Run: python -m pytest tests/test_extend.py"""

import json
from collections import Counter

import pytest
import regex
import torch

import train
from codes import binary_code, byte_buffer, sign_pca, sign_project, unpack_bits
from conftest import ROOT, TINY
from model import GPT, GPTConfig
from tablefree.checkpoint import load_checkpoint
from tablefree.configurator import resolve
from tablefree.data import read_meta, tokenizer_state
from tablefree.extension import add_tokens
from tablefree.tokenizer import load_encoding, parse_ranks
from tools import extend

VOCAB = [bytes([97 + t % 26]) * (1 + t // 26) for t in range(64)]  # a .. z, aa .. zz, aaa ..: V = 64 = 2^6
PIECES = [[0, 1], [2, 3], [0, 1, 2]]  # new tokens "ab", "cd", "abc"
NEW_BYTES = [b"ab", b"cd", b"abc"]


def tiny(kind):
    torch.manual_seed(0)
    source = torch.randn(64, 40)
    config = GPTConfig(vocab_size=64, block_size=64, n_layer=1, n_head=2, n_embd=32, input=kind,
                       codes_from="random" if kind == "frozen" else "")
    return GPT(config, VOCAB, source if kind == "frozen" else None), source


@pytest.mark.parametrize("kind", ["learned", "binary", "affine", "kronecker", "frozen"])
def test_old_tokens_are_unchanged_and_new_ones_coded_by_the_rule(kind):
    model, source = tiny(kind)
    model.eval()
    old = torch.arange(64)[None]
    inputs, head = model.wte(old).clone(), model.lm_head.weight.clone()
    with torch.no_grad():
        logits_before = model(old, all_positions=True)[0]
    note = add_tokens(model, PIECES, NEW_BYTES, source)
    new = torch.arange(64, 67)[None]
    assert model.config.vocab_size == 67 and model.lm_head.weight.shape == (67, 32)
    assert torch.equal(model.wte(old), inputs) and torch.equal(model.lm_head.weight[:64], head)
    for i, p in enumerate(PIECES):
        assert torch.allclose(model.lm_head.weight[64 + i], head[p].mean(dim=0))
    with torch.no_grad():  # old text scores exactly as before, apart from the new tokens' logits
        assert torch.equal(model(old, all_positions=True)[0][..., :64], logits_before)
    x = model.wte(new)[0]  # (3, n_embd)
    if kind == "learned":
        assert all(torch.allclose(x[i], inputs[0, p].mean(dim=0)) for i, p in enumerate(PIECES))
    if kind in ("binary", "affine"):  # V = 2^6: no free code, ids 64.. read as 0..
        assert note == {"free_codes": 0, "aliased": 3} and torch.equal(x, inputs[0, :3])
    if kind == "kronecker":
        fresh, _ = tiny(kind)
        fresh.wte.cells.data.copy_(model.wte.cells)
        fresh.wte.token_bytes, fresh.wte.lengths = byte_buffer(VOCAB + NEW_BYTES, 16)
        assert torch.allclose(x, fresh.wte(new)[0])
    if kind == "frozen":
        rows = torch.stack([source[p].double().mean(dim=0) for p in PIECES])
        bits = sign_project(rows, *sign_pca(source, 32)[1:])  # the old codes' mean and components
        assert torch.equal(unpack_bits(model.wte.packed[64:], 32), bits)


def test_a_new_words_code_head_row_is_its_code():
    """head='codes': a new token's logit is its new code read back through the projection, plus its
    pieces' mean bias; old tokens' logits do not move. tie_weights: the head is the grown table."""
    torch.manual_seed(0)
    source = torch.randn(64, 40)
    model = GPT(GPTConfig(vocab_size=64, block_size=64, n_layer=1, n_head=2, n_embd=32, input="frozen",
                          codes_from="random", head="codes"), VOCAB, source).eval()
    model.lm_head.bias.data.normal_()
    old, bias = torch.arange(64)[None], model.lm_head.bias.clone()
    with torch.no_grad():
        before = model(old, all_positions=True)[0]
    add_tokens(model, PIECES, NEW_BYTES, source)
    assert model.lm_head.bias.shape == (67,) and not any(p.size(0) == 67 and p.dim() == 2 for p in model.parameters())
    rows = torch.stack([source[p].double().mean(dim=0) for p in PIECES])
    codes = sign_project(rows, *sign_pca(source, 32)[1:])  # (3, D): the input's new codes
    assert torch.equal(unpack_bits(model.wte.packed[64:], 32), codes)
    assert torch.allclose(model.lm_head.bias[64:], torch.stack([bias[p].mean() for p in PIECES]))
    with torch.no_grad():
        h = model.ln_f(model.h[0](model.wte(old).float(), model.rotary(0, 64)))  # (1, 64, n_embd)
        after = model(old, all_positions=True)[0]
    z = model.lm_head.proj(h).double() / 32 ** 0.5  # (1, 64, D)
    assert torch.allclose(after[..., 64:].double(), z @ (2 * codes.double() - 1).T + model.lm_head.bias[64:].double(),
                          atol=1e-5)
    assert torch.equal(after[..., :64], before)
    tied = GPT(GPTConfig(vocab_size=64, block_size=8, n_layer=1, n_head=2, n_embd=32, input="learned",
                         tie_weights=True))
    add_tokens(tied, PIECES, NEW_BYTES)
    assert tied.lm_head.weight is tied.wte.weight and tied.wte.weight.shape == (67, 32)


def test_binary_codes_are_free_while_they_last():
    model = GPT(GPTConfig(vocab_size=50, block_size=8, n_layer=1, n_head=2, n_embd=32, input="binary"))
    note = add_tokens(model, [[0, 1]] * 16, [b"x"] * 16)  # 64 - 50 = 14 free codes, then 2 alias
    assert note == {"free_codes": 14, "aliased": 2}
    assert torch.equal(model.wte.code(torch.tensor([64, 65])), binary_code(torch.tensor([0, 1]), 6))


def test_frozen_refuses_another_source():
    model, source = tiny("frozen")
    with pytest.raises(ValueError, match="not the one they were derived from"):
        add_tokens(model, PIECES, NEW_BYTES, torch.randn_like(source))
    with pytest.raises(ValueError, match="give it"):
        add_tokens(model, PIECES, NEW_BYTES)
    add_tokens(model, PIECES, NEW_BYTES, source + 1)  # shifted rows: the same codes, so the same new ones
    assert model.config.vocab_size == 67


def test_adaptation_moves_only_the_new_rows():
    model, _ = tiny("learned")
    add_tokens(model, PIECES, NEW_BYTES)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ids = torch.randint(0, 67, (400,), generator=torch.Generator().manual_seed(0)).numpy()
    extend.adapt(model, ids, 64, steps=5, lr=1e-2, batch_size=4)
    after = model.state_dict()
    for key in before:
        old_rows = before[key][:64] if before[key].size(0) == 67 else before[key]
        assert torch.equal(after[key][:old_rows.size(0)], old_rows), key
    assert not torch.equal(after["lm_head.weight"][64:], before["lm_head.weight"][64:])
    assert not torch.equal(after["wte.weight"][64:], before["wte.weight"][64:])


def test_learned_merges_extend_the_tokenizer(data_dir, tmp_path):
    run = tmp_path / "run"
    train.train(resolve(train.DEFAULTS, ["--data_dir", str(data_dir), "--dataset=tiny", f"--out_dir={run}", *TINY,
                                         "--max_iters=2", "--eval_interval=2"]))
    ckpt = load_checkpoint(run)
    enc, ranks, info = load_encoding(ckpt["tokenizer"]), parse_ranks(ckpt["tokenizer"]["ranks"].encode()), ckpt["tokenizer"]["info"]
    text = "The bright crown of the castle. " * 20
    merges = extend.learn_merges(enc, ranks, info["pattern"], [text], 5)
    assert len(merges) == 5 and all(a + b not in ranks for a, b in merges)
    assert len({a + b for a, b in merges}) == 5
    new_enc = extend.extended_encoding(info, ranks, merges)
    ids = new_enc.encode_ordinary(text)
    assert new_enc.decode(ids) == text and max(ids) >= 300 and new_enc.eot_token == enc.eot_token == 299
    assert len(ids) < len(enc.encode_ordinary(text))
    for made_of, (a, b) in zip(extend.old_pieces(ranks, merges), merges):  # every piece an old token, spelling it
        assert max(made_of) < 299 and b"".join(enc.decode_single_token_bytes(t) for t in made_of) == a + b


def slow_merges(enc, ranks, pattern, texts, count):
    """learn_merges' rule as first written: every pair counted again each round, every chunk merged."""
    chunks = Counter(c for t in texts for c in regex.findall(pattern, t))
    words = {c: [enc.decode_single_token_bytes(t) for t in enc.encode_ordinary(c)] for c in chunks}
    known, merges = set(ranks), []
    while len(merges) < count:
        pairs = Counter()
        for chunk, parts in words.items():
            for pair in zip(parts, parts[1:]):
                pairs[pair] += chunks[chunk]
        candidates = [(-n, pair) for pair, n in pairs.items() if pair[0] + pair[1] not in known]
        if not candidates:
            return merges
        left, right = min(candidates)[1]
        merges.append((left, right))
        known.add(left + right)
        words = {chunk: extend.merge_pair(parts, left, right) for chunk, parts in words.items()}
    return merges


def test_the_kept_pair_counts_merge_as_counting_again_each_round(data_dir):
    state = tokenizer_state(read_meta(data_dir / "tiny")["tokenizer"], data_dir / "tiny" / "tokenizer.tiktoken")
    enc, ranks, pattern = load_encoding(state), parse_ranks(state["ranks"].encode()), state["info"]["pattern"]
    texts = [(ROOT / "model.py").read_text(), "aaaaaaa aaaa abab ababab xyzxyz " * 3]  # runs of a letter: overlaps
    merges = extend.learn_merges(enc, ranks, pattern, texts, 400)
    assert len(merges) == 400 and merges == slow_merges(enc, ranks, pattern, texts, 400)
    every = extend.learn_merges(enc, ranks, pattern, texts[1:], 10 ** 6)  # until no pair is left to merge
    assert every == slow_merges(enc, ranks, pattern, texts[1:], 10 ** 6) and len(every) < 50


def test_extend_end_to_end(data_dir, tmp_path):
    common = ["--data_dir", str(data_dir), "--dataset=tiny", *TINY, "--max_iters=4", "--eval_interval=4"]
    train.train(resolve(train.DEFAULTS, [*common, "--input=learned", f"--out_dir={tmp_path / 'learned'}"]))
    train.train(resolve(train.DEFAULTS, [*common, "--input=frozen", f"--codes_from={tmp_path / 'learned'}",
                                         f"--out_dir={tmp_path / 'frozen'}"]))
    extend.main(["--ckpt", str(tmp_path / "learned"), str(tmp_path / "frozen"), "--new_tokens", "8", "--data_dir",
                 str(data_dir), "--results_dir", str(tmp_path), "--adapt_steps", "2"])
    rows = json.loads((tmp_path / "extension.json").read_text())["runs"]
    assert [r["input"] for r in rows] == ["learned", "frozen"] and all(r["new_tokens"] == 8 for r in rows)
    assert rows[0]["examples"] == rows[1]["examples"]  # one dataset: the same new words
    for r in rows:
        assert r["before"]["n"] > r["after"]["n"]  # fewer tokens for the same bytes
        assert r["after"]["new_tokens"]["n"] > 0 and abs(r["bpb_change"]) < 1
    assert "| frozen | 1 |" in (tmp_path / "extension.md").read_text()
    for how in ("mean", "random"):  # no adaptation: only the new rows' start differs; the report goes to the run
        extend.main(["--ckpt", str(tmp_path / "learned"), "--new_tokens", "8", "--data_dir", str(data_dir),
                     "--name", how, "--new_rows", how])
    mean, drawn = (json.loads((tmp_path / "learned" / f"{how}.json").read_text())["runs"][0] for how in ("mean", "random"))
    assert drawn["table_rows"] == "random" and mean["table_rows"] == "mean" and rows[1]["table_rows"] is None
    assert drawn["before"] == mean["before"] and drawn["after"]["bpb"] != mean["after"]["bpb"]
    table = torch.zeros(5, 3, requires_grad=True)
    extend.random_rows(table, 3, seed=0)  # rows 3 and 4 drawn at the table's init scale, the old ones kept
    assert not table[:3].any() and torch.equal(table[3:], torch.randn(2, 3, generator=torch.Generator().manual_seed(0)) * 0.02)
    (tmp_path / "learned" / "ckpt.pt").rename(tmp_path / "gone.pt")  # the frozen codes' source is gone
    with pytest.raises(SystemExit) as stopped:
        extend.main(["--ckpt", str(tmp_path / "frozen"), "--data_dir", str(data_dir), "--results_dir", str(tmp_path)])
    assert stopped.value.code.startswith("extend.py: error: no checkpoint at")


def test_a_merge_joins_pairs_from_the_start_without_overlap():
    assert extend.merge_pair([b"a"] * 5, b"a", b"a") == [b"aa", b"aa", b"a"]
    assert extend.merge_pair([b"x", b"a", b"b", b"a", b"b", b"a"], b"a", b"b") == [b"x", b"ab", b"ab", b"a"]
    assert extend.merge_pair([b"b", b"a"], b"a", b"b") == [b"b", b"a"]
