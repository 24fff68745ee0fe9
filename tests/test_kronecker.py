"""The Kronecker byte x position input against the published reference package and its own
definition. Run: python -m pytest tests/test_kronecker.py

The reference, `kronecker-embeddings` 0.1.1 (Apache-2.0), is fetched from the package index as
a hash-pinned wheel and imported straight from the zip, never installed (it declares a
`transformers` dependency that its code does not import); the test is skipped if the index
cannot be reached.
"""

import json
import sys
from dataclasses import asdict

import pytest
import torch

import train
from codes import byte_buffer, kronecker_values, utf8_safe_truncate
from conftest import TINY, reference_kronecker_code
from model import GPT, GPTConfig, param_counts
from tablefree.checkpoint import build_model, load_checkpoint
from tablefree.common import UserError
from tablefree.configurator import resolve
from tablefree.corpus import fetch_source
from tablefree.tokenizer import load_encoding, load_tokenizer, vocab_bytes

SAMPLES = [b"hello", b" world", b"\xe2\x80", b"", b"a" * 40, "naïve café au lait, très".encode(), b"<|endoftext|>",
           "日本語のテキスト".encode(), b"\xff\xfe\x00\x01", bytes(range(16)), b" " * 17, b"a" * 16 + b"xyz",
           b"\x80" * 20] + [bytes([b]) for b in range(256)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    try:
        wheel, _ = fetch_source("kronecker_embeddings-0.1.1-py3-none-any.whl", tmp_path_factory.mktemp("sources"))
    except UserError as e:
        pytest.skip(f"the reference package cannot be fetched here: {e}")
    sys.path.insert(0, str(wheel))  # a pure-Python wheel is a zip Python can import from
    import kronecker_embeddings
    sys.path.remove(str(wheel))
    return kronecker_embeddings


@pytest.fixture(scope="module")
def tiny_vocab(data_dir):
    """The raw bytes of every token of the shared test corpus's 300-token BPE."""
    meta = json.loads((data_dir / "tiny" / "meta.json").read_text())
    return vocab_bytes(load_tokenizer(data_dir / "tiny", meta["tokenizer"]), meta["vocab_size"])


@pytest.mark.parametrize("pos_dim", [16, 32])
def test_codes_and_forward_equal_the_reference(reference, tiny_vocab, pos_dim):
    for vocab in (SAMPLES, tiny_vocab):
        token_bytes, lengths = byte_buffer(vocab, pos_dim)
        kept = [reference.utf8_safe_truncate(t, pos_dim) for t in vocab]
        assert [bytes(row[:n]) for row, n in zip(token_bytes.tolist(), lengths.tolist())] == kept
        dense = reference_kronecker_code(token_bytes, lengths)  # (V, D): the definition, built densely
        theirs = reference.kronecker_codec(token_bytes, lengths, pos_dim=pos_dim)
        assert (dense - theirs).abs().max() <= 1e-5
        torch.manual_seed(0)
        model = GPT(GPTConfig(vocab_size=len(vocab), n_layer=1, n_head=2, n_embd=32, block_size=8, input="kronecker",
                              pos_dim=pos_dim), vocab)
        embedding = reference.KroneckerEmbedding(len(vocab), 32, pos_dim=pos_dim, byte_buffer=token_bytes,
                                                 length_buffer=lengths)
        embedding.projection.weight.data.copy_(model.wte.cells.data.t())
        idx = torch.randint(0, len(vocab), (4, 8), generator=torch.Generator().manual_seed(pos_dim))
        assert (model.wte(idx) - embedding(idx)).abs().max() <= 1e-5


def test_fast_path_equals_the_dense_definition_forward_and_backward():
    token_bytes, lengths = byte_buffer(SAMPLES, 16)
    torch.manual_seed(1)
    model = GPT(GPTConfig(vocab_size=len(SAMPLES), n_layer=1, n_head=2, n_embd=24, block_size=8, input="kronecker"),
                SAMPLES)
    idx = torch.randint(0, len(SAMPLES), (3, 8), generator=torch.Generator().manual_seed(2))
    W = model.wte.cells  # (D, n_embd)
    fast = model.wte(idx)
    dense = reference_kronecker_code(token_bytes[idx], lengths[idx]).double() @ W.double()  # (B, T, D) @ (D, n_embd)
    assert torch.allclose(fast.double(), dense, atol=1e-5)
    (grad_fast,) = torch.autograd.grad(fast.square().sum(), W)
    (grad_dense,) = torch.autograd.grad(dense.square().sum(), W)  # through the float64 product
    assert torch.allclose(grad_fast.double(), grad_dense.double(), atol=1e-5)


def test_defining_properties_of_the_code(tiny_vocab):
    assert tiny_vocab[0] == b""  # reserved (tokenizer.reserved_ids): no token, the all-zero code
    tiny_vocab = tiny_vocab[1:]
    token_bytes, lengths = byte_buffer(tiny_vocab, 16)
    code = reference_kronecker_code(token_bytes, lengths)  # (V, D)
    hot, cold = kronecker_values(lengths, 16)
    for t in range(len(tiny_vocab)):
        L = int(lengths[t])
        assert int((code[t] - hot[t]).abs().lt(1e-5).sum()) == L  # L hot cells, all with the same value
        assert torch.allclose(code[t][(code[t] - hot[t]).abs() >= 1e-5], cold[t].expand(4096 - L), atol=1e-6)
        assert abs(code[t].mean()) < 1e-6 and abs(code[t].std() - 1) < 1e-3  # z-normalised (eps: std is 1 - 6e-5)
    assert torch.unique(code, dim=0).size(0) == len(tiny_vocab)  # injective: no token here is truncated
    collided = len(SAMPLES) - torch.unique(reference_kronecker_code(*byte_buffer(SAMPLES, 16)), dim=0).size(0)
    assert collided == 2  # "a" * 40 and "a" * 16 + "xyz" cut to the same 16 bytes; b"\x80" * 20 (no UTF-8-safe
    # cut: emptied, as the reference does) and b"" both have the all-zero code


def test_truncation_never_cuts_a_character():
    assert utf8_safe_truncate("aé".encode(), 2) == b"a"  # é is 2 bytes: cut before it
    assert utf8_safe_truncate("日本".encode(), 4) == "日".encode()
    assert utf8_safe_truncate(b"\x80" * 20, 16) == b""  # no prefix of 13-16 bytes decodes: empty, as the reference
    assert utf8_safe_truncate(b"\x80" * 5, 16) == b"\x80" * 5  # short tokens are kept as they are


def test_parameter_accounting_at_both_scales():
    with torch.device("meta"):
        cpu = GPT(GPTConfig(vocab_size=1024, n_layer=6, n_head=4, n_embd=160, block_size=128, input="kronecker"))
        papers = GPT(GPTConfig(vocab_size=65536, n_layer=32, n_head=32, n_embd=1024, input="kronecker"))
    assert param_counts(cpu)["input"] == 4096 * 160 == 655_360  # larger than the 1,024 x 160 = 163,840 table
    assert param_counts(papers)["input"] == 4096 * 1024 == 4_194_304  # far smaller than 67,108,864
    assert param_counts(papers)["input_fixed"] == 65536 * 16 + 65536  # the byte buffer and the lengths


def test_a_checkpoint_carries_its_byte_buffer_and_resumes_exactly(data_dir, tmp_path, tiny_vocab):
    common = ["--data_dir", str(data_dir), "--dataset=tiny", *TINY, "--input=kronecker", "--lr_decay_iters=8",
              "--eval_interval=4"]
    train.train(resolve(train.DEFAULTS, [*common, f"--out_dir={tmp_path / 'a'}", "--max_iters=8"]))
    train.train(resolve(train.DEFAULTS, [*common, f"--out_dir={tmp_path / 'b'}", "--max_iters=4"]))
    train.train(resolve(train.DEFAULTS, [*common, f"--out_dir={tmp_path / 'b'}", "--max_iters=8", "--init_from=resume"]))
    a, b = load_checkpoint(tmp_path / "a"), load_checkpoint(tmp_path / "b")
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    own = vocab_bytes(load_encoding(a["tokenizer"]), a["model_config"]["vocab_size"])
    token_bytes, lengths = byte_buffer(own, 16)
    assert torch.equal(a["model"]["wte.token_bytes"], token_bytes) and torch.equal(a["model"]["wte.lengths"], lengths)


def test_truncation_counts_on_gpt2s_vocabulary(tmp_path):
    """GPT-2's 50,257 tokens at pos_dim 16: the figures the README quotes."""
    try:
        ranks_file, _ = fetch_source("gpt2.tiktoken", tmp_path)
    except UserError as e:
        pytest.skip(f"GPT-2's rank file cannot be fetched here: {e}")
    from tablefree.tokenizer import GPT2_PATTERN, make_encoding, parse_ranks
    enc = make_encoding({"name": "gpt2", "pattern": GPT2_PATTERN, "eot_id": 50256}, parse_ranks(ranks_file.read_bytes()))
    vocab = vocab_bytes(enc, 50257)
    token_bytes, lengths = byte_buffer(vocab, 16)
    assert sum(len(t) > 16 for t in vocab) == 72 and int((lengths == 0).sum()) == 0  # 72 cut, none emptied
    codes = torch.cat([token_bytes, lengths.unsqueeze(1).to(torch.uint8)], dim=1)  # a code is its bytes and length
    assert len(vocab) - torch.unique(codes, dim=0).size(0) == 30  # 30 tokens share a code with another


def test_a_checkpoint_with_the_projection_as_weight_still_loads(tmp_path):
    """Before `cells` (D, n_embd) the projection was saved as `wte.weight` (n_embd, D)."""
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=len(SAMPLES), n_layer=1, n_head=2, n_embd=24, block_size=8, input="kronecker")
    model = GPT(config, SAMPLES)
    old = {("wte.weight" if k == "wte.cells" else k): (v.t() if k == "wte.cells" else v) for k, v in model.state_dict().items()}
    torch.save({"model": old, "model_config": asdict(config), "tokenizer": {}}, tmp_path / "ckpt.pt")
    loaded = build_model(load_checkpoint(tmp_path))
    idx = torch.randint(0, len(SAMPLES), (2, 8), generator=torch.Generator().manual_seed(3))
    assert torch.equal(loaded(idx)[0], model(idx)[0])


def test_a_string_at_a_spare_id_is_the_packages_byte_override(reference, tiny_vocab, data_dir):
    from tools.scoring import spare_ids
    meta = json.loads((data_dir / "tiny" / "meta.json").read_text())
    enc = load_tokenizer(data_dir / "tiny", meta["tokenizer"])
    V = len(tiny_vocab)
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=V, n_layer=1, n_head=2, n_embd=32, block_size=64, input="kronecker"), tiny_vocab)
    prompts = [{"category": "x", "string": "Zorbifax", "prompt": "The king said his name was Zorbifax. His name was"},
               {"category": "y", "string": "naïvetè", "prompt": "naïvetè, the queen said"}]  # no leading space
    grown, ids, strings = spare_ids(model, enc, prompts)
    assert model.config.vocab_size == V and grown.config.vocab_size == V + 2  # the model itself is untouched
    token_bytes, lengths = byte_buffer(tiny_vocab, 16)
    embedding = reference.KroneckerEmbedding(V, 32, pos_dim=16, byte_buffer=token_bytes, length_buffer=lengths)
    embedding.projection.weight.data.copy_(model.wte.cells.data.t())
    for i, (row, string) in enumerate(zip(ids, strings)):
        pos = row.index(V + i)
        assert string == (b" Zorbifax", "naïvetè".encode())[i] and row.count(V + i) == 1
        theirs = embedding.forward_with_byte_override(torch.tensor([t if t < V else 0 for t in row]), {pos: string})
        assert (grown.wte(torch.tensor([row]))[0] - theirs).abs().max() <= 1e-5
    from tools.scoring import ECHO_SAMPLES, run_echo
    result = run_echo(model.eval(), enc, prompts, torch.autocast("cpu", enabled=False), new_tokens=4, override=True)
    assert result["n"] == 2 and all(len(a["samples"]) == ECHO_SAMPLES for a in result["answers"])
    assert 0 <= result["echo_rate_sampled"] <= 1 and result["sampling"] == {"temperature": 0.7, "top_p": 0.9,
                                                                            "samples": ECHO_SAMPLES, "seed": 0}
    with pytest.raises(UserError, match="echo_override needs the Kronecker input"):
        spare_ids(GPT(GPTConfig(vocab_size=V, n_layer=1, n_head=2, n_embd=32, block_size=64)), enc, prompts)
