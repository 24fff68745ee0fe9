"""GGUF export: llama.cpp loads our files and computes what we compute.
Run: python -m pytest tests/test_gguf.py -s -n 0   (-s -n 0 prints the ternary agreement it measures)

Needs llama-cpp-python (requirements-extras.txt builds it: about 3 minutes on 2 cores)."""

import numpy as np
import pytest
import torch

import sample
import train
from conftest import TINY
from tablefree.checkpoint import build_model, load_checkpoint
from tablefree.common import UserError
from tablefree.configurator import resolve
from tablefree.data import read_meta, split_ids
from tablefree.tokenizer import load_encoding
from tools import export, llama
from tools.gguf import write_gguf
from tools.llamacpp import load_llama

pytest.importorskip("gguf", reason="the GGUF writer is the gguf package: pip install -r requirements-extras.txt")
pytest.importorskip("llama_cpp", reason="the export is checked with llama.cpp: pip install -r requirements-extras.txt")
KINDS = ["learned", "binary", "frozen"]  # in CI; affine and Kronecker with -m slow (their tables, like binary's, are derived)
SHAPE = ["--block_size=64", "--max_iters=30", "--eval_interval=30", "--lr_decay_iters=30"]  # room for 16 + 32 tokens


def train_kind(root, data_dir, kind):
    """A short run of one input kind (frozen's codes from the learned one) and its F32 GGUF, under root."""
    common = ["--data_dir", str(data_dir), "--dataset=tiny", *TINY, *SHAPE]
    extra = [f"--codes_from={root / 'learned'}"] if kind == "frozen" else []
    train.train(resolve(train.DEFAULTS, [*common, f"--out_dir={root / kind}", f"--input={kind}", *extra]))
    export.main(["--ckpt", str(root / kind), "--format", "gguf"])


@pytest.fixture(scope="module")
def runs(data_dir, tmp_path_factory):
    """A short run per input kind in KINDS as an F32 GGUF, and a ternary run 256 wide (TQ2_0's block) as
    TQ2_0, TQ1_0 and our packed file."""
    root = tmp_path_factory.mktemp("gguf")
    for kind in KINDS:
        train_kind(root, data_dir, kind)
    train.train(resolve(train.DEFAULTS, ["--data_dir", str(data_dir), "--dataset=tiny", *TINY, *SHAPE,
                                         f"--out_dir={root / 'ternary'}", "--body=ternary", "--n_embd=256", "--n_head=4"]))
    for kind in ("TQ2_0", "TQ1_0"):
        export.main(["--ckpt", str(root / "ternary"), "--format", "gguf", "--gguf_type", kind])
    export.main(["--ckpt", str(root / "ternary")])  # -> model.ternary.pt
    return root


@pytest.mark.parametrize("kind", [*KINDS, *(pytest.param(kind, marks=pytest.mark.slow) for kind in ("affine", "kronecker"))])
def test_llama_cpp_computes_our_logits_and_greedy_tokens(runs, data_dir, kind):
    if not (runs / kind).exists():  # a kind the fixture leaves to -m slow
        train_kind(runs, data_dir, kind)
    ours = build_model(load_checkpoint(runs / kind)).eval()
    llm = load_llama(runs / kind / "model.f32.gguf", threads=2, logits_all=True)
    ids = split_ids(data_dir / "tiny", read_meta(data_dir / "tiny"), "val")[:64].tolist()
    llm.reset()
    llm.eval(ids)
    theirs = np.array(llm.scores[:len(ids)])
    with torch.no_grad():
        expected = ours(torch.tensor([ids]), all_positions=True)[0][0].numpy()
    assert expected.std() > 0.2  # trained logits, not an untrained model's near-constant ones
    # llama.cpp's GELU is the tanh approximation read from a float16 table, ours the exact erf:
    # measured here within 0.05% of the logits' range; 0.5% still fails any wrong weight or layout
    assert np.abs(theirs - expected).max() < 5e-3 * (expected.max() - expected.min())
    assert (theirs.argmax(-1) == expected.argmax(-1)).all()
    llm.close()
    same, first, gaps = llama.check(llama.parse_args(["--gguf", str(runs / kind / "model.f32.gguf"), "--check",
                                                      str(runs / kind), "--data_dir", str(data_dir)]))
    # 8 held-out prompts, 32 greedy tokens each: equal, but where our top two logits were a near tie
    # (4e-6 apart, seen once), which the GELU's rounding above may flip
    assert same >= 7 and len(first) == 8 and all(gap < 1e-4 for gap in gaps)


def test_llama_cpp_tokenizes_and_detokenizes_as_we_do(runs, data_dir):
    ckpt = load_checkpoint(runs / "binary")
    enc = load_encoding(ckpt["tokenizer"])
    llm = load_llama(runs / "binary" / "model.f32.gguf", threads=1)
    ids = split_ids(data_dir / "tiny", read_meta(data_dir / "tiny"), "val")
    held_out = enc.decode(ids[ids != enc.eot_token].tolist())
    for text in [held_out, "Crème brûlée, naïve café", "日本語のテキスト and 中文", "🤖🎉 emoji 👍🏽", "  spaces\t\ttabs\n\n\nlines   ",
                 "it's 12345 they'll", " ", ""]:
        assert llm.tokenize(text.encode(), add_bos=False, special=False) == enc.encode_ordinary(text), text
        assert llm.detokenize(enc.encode_ordinary(text)) == text.encode()
    assert llm.token_eos() == llm.token_bos() == enc.eot_token == 299
    llm.close()


def test_a_ternary_model_in_tq2_0_and_tq1_0_decodes_as_our_packed_path(runs, data_dir):
    """llama.cpp quantises the activations per block of 256 (Q8_K), BitNet b1.58 (and so our
    packed path) per token: the products differ slightly, so a greedy path may part. Measured
    and printed (run with -s); most prompts must agree throughout."""
    for kind in ("tq2_0", "tq1_0"):
        same, first, _ = llama.check(llama.parse_args(["--gguf", str(runs / "ternary" / f"model.{kind}.gguf"), "--check",
                                                    str(runs / "ternary" / "model.ternary.pt"), "--data_dir", str(data_dir)]))
        assert same >= 4 and len(first) == 8


def test_the_file_says_its_table_is_derived_and_the_runner_reads_it(runs, capsys):
    from tools.llamacpp import read_gguf
    fields = read_gguf(runs / "binary" / "model.f32.gguf")
    assert fields["tablefree.input"] == "binary" and "derived, not trained" in fields["tablefree.token_embd"]
    assert read_gguf(runs / "learned" / "model.f32.gguf")["tablefree.token_embd"] == "token_embd is the trained input table"
    llama.main(["--gguf", str(runs / "binary" / "model.f32.gguf"), "--start", "The crown of the", "--temperature", "0",
                "--max_new_tokens", "20"])
    printed = capsys.readouterr()
    tokens = sample.sample(sample.parse_args(["--ckpt", str(runs / "binary"), "--start", "The crown of the",
                                              "--temperature", "0", "--max_new_tokens", "20", "--num_samples", "1",
                                              "--device", "cpu"]))[0]
    enc = load_encoding(load_checkpoint(runs / "binary")["tokenizer"])
    assert printed.out.startswith("The crown of the" + enc.decode(tokens))  # llama.cpp's greedy sampler, our tokens
    assert "tokens/s" in printed.err


def test_ternary_types_store_the_ternary_weights_exactly(runs):
    """TQ2_0 and TQ1_0 read back as W_t x gamma, with gamma rounded to float16: every weight."""
    import gguf
    from tools.gguf import ternary_of

    model = build_model(load_checkpoint(runs / "ternary"))
    w_t, gamma = ternary_of(model.h[1].mlp.c_fc)
    for kind in ("tq2_0", "tq1_0"):
        tensor = next(t for t in gguf.GGUFReader(runs / "ternary" / f"model.{kind}.gguf").tensors
                      if t.name == "blk.1.ffn_up.weight")
        stored = gguf.quants.dequantize(tensor.data, tensor.tensor_type)  # (out, in)
        assert np.array_equal(stored, w_t.numpy() * np.float32(np.float16(gamma.item())))


@pytest.mark.parametrize("name", ["binary/model.f32.gguf", "ternary/model.tq2_0.gguf"])
def test_a_flipped_tensor_byte_is_refused_not_run(runs, tmp_path, name):
    """issue 54: a GGUF file records the crc32 of its tensors; a byte flipped inside one (which
    llama.cpp runs without a word) is a one-line error for tools.llama, generating or --check."""
    from tools.gguf import gguf_package
    reader = gguf_package("the test").GGUFReader(runs / name)
    fields = {n: f.contents() for n, f in reader.fields.items() if not n.startswith("tokenizer.")}
    offset = int(reader.tensors[-1].data_offset) + 5  # inside the last tensor's bytes
    data = bytearray((runs / name).read_bytes())
    data[offset] ^= 0x10
    flipped = tmp_path / "flipped.gguf"
    flipped.write_bytes(bytes(data))
    assert isinstance(fields["tablefree.tensors_crc32"], int)
    for argv in (["--start", "The crown"], ["--check", str(runs / name.split("/")[0])]):
        with pytest.raises(SystemExit) as error:
            llama.main(["--gguf", str(flipped), *argv])
        assert "flipped.gguf is damaged: its tensors are not the ones it was written with" in str(error.value)


def test_a_weight_past_float16s_range_is_refused_not_written_as_inf(runs, tmp_path):
    """--gguf_type F16 of a model with a weight of 1e6: one line naming the tensor and F32, no file."""
    ckpt = load_checkpoint(runs / "learned")
    model = build_model(ckpt)
    with torch.no_grad():
        model.h[0].mlp.c_fc.weight[0, 0] = 1e6
    with pytest.raises(UserError, match=r"blk.0.ffn_up.weight holds weights past float16's range .*--gguf_type F32"):
        write_gguf(model, ckpt, tmp_path / "x.gguf", "F16")
    assert not (tmp_path / "x.gguf").exists()


def test_a_flipped_bit_in_the_metadata_is_refused_not_run(runs, tmp_path):
    """issue 65: the file's metadata (rope base, context length, norm epsilon, the merges) sits inside a
    crc32 too; llama.cpp would run any of these flips with other logits and no word."""
    from tools.gguf import gguf_package
    path = runs / "binary" / "model.f32.gguf"
    reader = gguf_package("the test").GGUFReader(path)
    data = path.read_bytes()
    at = {name: reader.fields[name].offset + sum(p.nbytes for p in reader.fields[name].parts[:-1])
          for name in ("gptneox.rope.freq_base", "gptneox.context_length", "gptneox.attention.layer_norm_epsilon")}
    at["a merge"] = data.index(reader.fields["tokenizer.ggml.merges"].contents()[0].encode())
    del reader
    assert llama.read_gguf(path)["tablefree.metadata_crc32"] != 0
    for what, offset in at.items():
        flipped = bytearray(data)
        flipped[offset] ^= 0x04
        (tmp_path / "flipped.gguf").write_bytes(bytes(flipped))
        with pytest.raises(SystemExit) as error:
            llama.main(["--gguf", str(tmp_path / "flipped.gguf"), "--start", "The crown"])
        assert "flipped.gguf is damaged: its metadata" in str(error.value), what
