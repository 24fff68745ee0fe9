"""The 2-bit ternary C kernel: integer-exact against torch._int_mm, and the fallback it replaces.
Run: python -m pytest tests/test_kernel.py (skipped where gcc or AVX2 is missing)"""

import copy

import pytest
import torch

from tablefree import kernel
from tablefree.ternary import PackedTernaryLinear, pack_ternary

lib = kernel.kernel()
needs_kernel = pytest.mark.skipif(lib is None, reason=f"no C kernel here: {kernel.describe()}")


def random_ternary(out, n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-1, 2, (out, n), generator=g, dtype=torch.int8)


@pytest.mark.parametrize("out, n", [(8, 128), (96, 768), (5, 200), (3, 1)])
def test_repack_round_trips(out, n):
    w_t = random_ternary(out, n, seed=out)
    codes = kernel.repack(w_t)
    assert codes.shape == (out, -(-n // 128) * 32) and codes.dtype == torch.uint8  # 2 bits a weight, padded to 128
    assert torch.equal(kernel.unrepack(codes, n), w_t)


@needs_kernel
@pytest.mark.parametrize("N, out, n", [(1, 64, 128), (7, 96, 768), (16, 33, 3072), (2, 10, 200), (1, 4, 1)])
def test_kernel_equals_int_mm_exactly(N, out, n):
    w_t = random_ternary(out, n, seed=n)
    x_q = torch.randint(-128, 128, (N, n), generator=torch.Generator().manual_seed(N), dtype=torch.int8)
    expected = (x_q.long() @ w_t.long().T).int()  # exact in int64
    assert torch.equal(kernel.matmul(lib, x_q, kernel.repack(w_t), n), expected)
    extreme = torch.full((N, n), -128, dtype=torch.int8)  # the largest products, all of one sign
    ones = torch.ones(out, n, dtype=torch.int8)
    assert torch.equal(kernel.matmul(lib, extreme, kernel.repack(ones), n), torch.full((N, out), -128 * n, dtype=torch.int32))


@needs_kernel
def test_the_kernel_layer_computes_what_the_int8_layer_computes():
    w_t = random_ternary(48, 256, seed=1)
    packed, gamma = pack_ternary(w_t), torch.tensor(0.037)
    fast, reference = PackedTernaryLinear(packed, 256, gamma, lib=lib), PackedTernaryLinear(packed, 256, gamma)
    assert fast.codes.numel() == 48 * 256 // 4 and not hasattr(fast, "weight")  # 2 bits a weight in memory
    x = torch.randn(3, 5, 256) * torch.logspace(-3, 2, 5).view(1, 5, 1)  # rows of very different scales
    x[0, 0] = 0  # an all-zero row: the scale's floor
    assert torch.equal(fast(x), reference(x)) and torch.equal(fast.ternary(), reference.ternary())
    odd = PackedTernaryLinear(pack_ternary(w_t[:, :197]), 197, gamma, lib=lib)  # 197: a scalar tail, padded to 256
    assert torch.equal(odd(x[..., :197]), PackedTernaryLinear(pack_ternary(w_t[:, :197]), 197, gamma)(x[..., :197]))


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("out, n", [(96, 768), (7, 16), (1, 8)])  # 7 and 1: rows left over when split in 4s
def test_the_one_row_float_path_computes_the_linear(dtype, out, n):
    torch.manual_seed(out)
    reference = torch.nn.Linear(n, out).to(dtype)
    fast = kernel.fast_linears(torch.nn.Linear(n, out).to(dtype))
    fast.load_state_dict(reference.state_dict())
    assert isinstance(fast, kernel.KernelLinear) and fast.state_dict().keys() == reference.state_dict().keys()
    x = torch.randn(1, 1, n).to(dtype)
    exact = x.double() @ reference.weight.double().T + reference.bias.double()  # (1, 1, out)
    with torch.no_grad():
        y = fast(x)
    assert y.shape == (1, 1, out) and y.dtype == dtype
    ulp = 2.0 ** -23 if dtype == torch.float32 else 2.0 ** -8  # the output's rounding, relative
    # float32 sums in another order (n roundings at most), then the output's rounding and the bias's
    assert torch.allclose(y.double(), exact, rtol=2 * ulp, atol=max(n * 2.0 ** -23, 2 * ulp) * exact.abs().max().item())
    batch = torch.randn(3, n).to(dtype)  # every other case is nn.Linear's own, bit for bit
    with torch.no_grad():
        assert torch.equal(fast(batch), reference(batch))
    assert torch.equal(fast(x), reference(x))  # with gradients on: the training path


@needs_kernel
def test_a_loaded_float_model_decodes_the_tokens_the_training_model_decodes(tmp_path):
    from dataclasses import asdict

    from model import GPT, GPTConfig
    from tablefree.packed import inference_model
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=512, n_layer=2, n_head=4, n_embd=64, block_size=64, input="binary")).eval()
    loaded = inference_model({"model": model.state_dict(), "model_config": asdict(model.config), "tokenizer": {}},
                         kernels=True).eval()
    assert isinstance(loaded.lm_head, kernel.KernelLinear) and isinstance(loaded.h[0].mlp.c_fc, kernel.KernelLinear)
    prompt = torch.randint(0, 512, (1, 8), generator=torch.Generator().manual_seed(1))
    greedy = torch.cat(list(model.generate(prompt, 80, temperature=0)), dim=1)  # past one window restart
    assert torch.equal(torch.cat(list(loaded.generate(prompt, 80, temperature=0)), dim=1), greedy)
    copied = copy.deepcopy(loaded)  # as the echo probe's override copies a model before adding tokens
    assert isinstance(copied.lm_head, kernel.KernelLinear)
    assert torch.equal(torch.cat(list(copied.generate(prompt, 80, temperature=0)), dim=1), greedy)
