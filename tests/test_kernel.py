"""The 2-bit ternary C kernel: integer-exact against torch._int_mm, and the fallback it replaces.
Run: python -m pytest tests/test_kernel.py (skipped where gcc or AVX2 is missing)"""

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
    odd = PackedTernaryLinear(pack_ternary(w_t[:, :200]), 200, gamma, lib=lib)  # a row padded to 256 in the kernel
    assert torch.equal(odd(x[..., :200]), PackedTernaryLinear(pack_ternary(w_t[:, :200]), 200, gamma)(x[..., :200]))
