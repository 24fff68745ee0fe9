"""The dry run: its counts are the model's own, its activation estimate matches measured memory."""

import ctypes
import gc
import math

import pytest
import torch

import train
from model import GPT, GPTConfig, param_counts
from tablefree.configurator import check_settings, model_config, resolve
from tablefree.cost import at_depth, estimate_cost, flops_per_token, forward_memory

SMALL = ["--n_layer=3", "--n_head=4", "--n_embd=64", "--block_size=64", "--batch_size=4", "--vocab_size=300",
         "--max_iters=100", "--eval_interval=50", "--eval_iters=5", "--gradient_accumulation_steps=3"]


@pytest.mark.parametrize("extra", [["--input=learned", "--tie_weights=True"], ["--input=affine"], ["--input=kronecker"],
                                   ["--input=frozen", "--codes_from=run", "--code_dim=16"], ["--body=ternary", "--mlp_width=96"]])
def test_dry_run_counts_are_the_models(extra):
    s = check_settings(resolve(train.DEFAULTS, SMALL + extra))
    torch.manual_seed(0)
    vocab = [bytes([65 + t % 26]) * (1 + t % 5) for t in range(300)]  # what train.py gives a new model
    source = torch.randn(300, 64) if s.input == "frozen" else None
    model = GPT(model_config(s, 300), vocab, source)
    cost = estimate_cost(s, 300, activations=False)
    assert cost["params"] == param_counts(model)
    assert cost["flops_per_token"] == flops_per_token(model)
    tokens = 3 * 4 * 64 * 100  # steps x tokens a step
    eval_tokens = (100 // 50 + 1) * 2 * 5 * 4 * 64  # evaluations x splits x batches x tokens
    assert cost["flops"] == pytest.approx(flops_per_token(model) * (tokens + eval_tokens / 3))
    assert cost["memory"]["AdamW state"] == 8 * param_counts(model)["trainable"]


def test_dry_run_prints_and_touches_nothing(tmp_path, capsys):
    train.main(["--dry_run=True", "--vocab_size=65536", f"--out_dir={tmp_path / 'run'}", f"--data_dir={tmp_path / 'none'}"])
    report = capsys.readouterr().out
    assert "parameters: 469,828,608 trainable = input 0 + body 402,719,744 + head 67,108,864" in report
    assert "= 5.49e+19 FLOP" in report and "8 x H100 4.82 h" in report  # the papers' shape: 17B tokens
    assert list(tmp_path.iterdir()) == []  # no run directory, no data read


def test_a_huge_width_is_described_in_seconds_without_its_probe(tmp_path, capsys):
    train.main(["--dry_run=True", "--vocab_size=65536", "--n_embd=65536", "--n_head=512", f"--out_dir={tmp_path / 'run'}"])
    report = capsys.readouterr().out
    assert "weights 6.61 TB + gradients 6.61 TB + AdamW state 13.2 TB = 26.5 TB" in report  # exact, from the counts
    assert "not measured: the probe (2 layers at this width, the input and the head) would have 107B parameters" in report
    assert "DDP keeps all of them on every GPU: choose a smaller model" in report
    assert list(tmp_path.iterdir()) == []


def used_bytes():
    """Bytes glibc's allocator has handed out now: heap in use plus mmap'd blocks (mallinfo2)."""
    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                         "fsmblks", "uordblks", "fordblks", "keepcost")]
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd


def held_by_forward(model, B, dtype):
    """Measured: how much more memory is in use after a training forward (only its loss kept,
    as train.py keeps it) than before it: the activations, and the weights' copies it makes."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD fixed: every large tensor is mmap'd, and counted
    idx = torch.randint(0, model.config.vocab_size, (B, model.config.block_size))
    for _ in range(2):  # once first, so that the CPU libraries' one-time caches are not counted
        gc.collect()
        before = used_bytes()
        with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):  # its weight copies live as long
            loss = model(idx, idx)[1]
            held = used_bytes() - before
        del loss
    return held


@pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "mallinfo2"), reason="needs glibc's mallinfo2")
@pytest.mark.parametrize("shape, dtype", [
    (dict(n_layer=6, n_head=4, n_embd=128, vocab_size=512, block_size=256, input="binary"), torch.float32),
    (dict(n_layer=4, n_head=6, n_embd=192, vocab_size=2048, block_size=128, input="kronecker", body="ternary",
          mlp_width=512), torch.bfloat16),
])
def test_forward_memory_estimate_is_within_10_percent_of_a_measured_forward(shape, dtype):
    config, B = GPTConfig(**shape), 6
    torch.manual_seed(0)
    model = GPT(config).train()
    measured = held_by_forward(model, B, dtype)
    estimate = forward_memory(config, B, dtype)
    assert estimate["activations"] > 4 * estimate["weight copies"]  # mostly activations, the part scaled from probes
    estimate = sum(estimate.values())
    assert estimate == pytest.approx(measured, rel=0.1)  # the issue asks for 20%; measured here within 1.5%
    assert math.isfinite(estimate) and estimate > 10 * 2 ** 20  # tens of MB: far above the allocator's noise


@pytest.mark.parametrize("kind", [dict(input="binary"), dict(input="learned", tie_weights=True),
                                  dict(input="frozen", head="codes", codes_from="x", code_dim=64),
                                  dict(input="kronecker"), dict(input="affine", body="ternary", bias=True)])
def test_the_counts_at_any_depth_are_the_whole_models(kind):
    """issue 54: the dry run counts from meta models of 1 and 2 blocks (an absurd depth once took
    minutes to build); every count is linear in n_layer, so the two give the full model's exactly."""
    config = GPTConfig(vocab_size=1024, n_layer=7, n_head=2, n_embd=128, block_size=128, **kind)
    def measure(model):
        return param_counts(model), flops_per_token(model), sum(b.nbytes for b in model.buffers())
    with torch.device("meta"):
        whole = measure(GPT(config))
    assert at_depth(config, measure) == whole
