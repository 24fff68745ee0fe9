"""run.c wherever llama2.c builds: its plain C99 loops against its x86 paths, gcc and clang, with and
without OpenMP, and an aarch64 build run under qemu, all giving the torch path's greedy tokens.
Run: python -m pytest tests/test_portable.py

The clang, OpenMP-for-clang and aarch64 builds need Debian's packages (each build skips in one line
where its tools are missing): apt-get install clang libomp-dev gcc-aarch64-linux-gnu qemu-user"""

import os
import shutil
import subprocess

import numpy as np
import pytest

from tablefree import build, runtime
from tablefree.common import UserError
from test_runtime import PROMPT, packed_model, reference

X86 = ["-mavx2", "-mfma", "-mf16c"]
BUILDS = {  # name: (compiler, flags, the command that runs the program)
    "gcc plain, one thread": ("gcc", ["-O3", "-std=c99"], []),
    "gcc plain, OpenMP": ("gcc", ["-O3", "-std=c99", "-fopenmp"], []),
    "gcc -DTABLEFREE_PLAIN with the x86 flags": ("gcc", ["-O3", *X86, "-fopenmp", "-DTABLEFREE_PLAIN"], []),
    "gcc AVX2, OpenMP": ("gcc", ["-O3", *X86, "-fopenmp"], []),
    "gcc with all this CPU's x86 paths, OpenMP": ("gcc", ["-O3", *build.x86_flags(), "-fopenmp"], []),  # AVX-512, VNNI
    "clang plain, one thread": ("clang", ["-O3", "-std=c99"], []),
    "clang AVX2, OpenMP": ("clang", ["-O3", *X86, "-fopenmp"], []),
    "aarch64 gcc, OpenMP, under qemu": ("aarch64-linux-gnu-gcc", ["-O3", "-std=c99", "-fopenmp", "-static"], ["qemu-aarch64"]),
}
# every flag set build.py may choose (plain, AVX2, AVX-512, AVX-512 VNNI) with gcc -O0 and clang -O3 too: an
# intrinsic that needs a constant (an immediate) fails at -O0 and with clang, where gcc -O3 folds a loop's index
FLAG_SETS = {"plain": [], "AVX2": build.X86["AVX2"], "AVX-512": build.X86["AVX512"],
             "AVX-512 VNNI": [*build.X86["AVX512"], *build.VNNI]}
for cc, level in (("gcc", "-O0"), ("gcc", "-O3"), ("clang", "-O3")):
    for paths, flags in FLAG_SETS.items():
        BUILDS.setdefault(f"{cc} {level} {paths}", (cc, [level, *flags], []))
KINDS = ["binary", "affine", "learned+tied", "kronecker", "frozen+codes", "binary+bias"]
NEEDS_X86 = {"gcc AVX2, OpenMP", "clang AVX2, OpenMP", "gcc -DTABLEFREE_PLAIN with the x86 flags",
             "gcc with all this CPU's x86 paths, OpenMP"}  # and the FLAG_SETS builds past plain: their flags


def built(name):
    """[the command] that runs this build of run.c, or a skip naming what is missing."""
    cc, flags, runner = BUILDS[name]
    missing = [tool for tool in [cc, *runner] if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed: apt-get install clang libomp-dev gcc-aarch64-linux-gnu qemu-user")
    if name in NEEDS_X86 and not build.x86_flags():
        pytest.skip("this CPU has no AVX2")
    if not set(flags) - {"-O0", "-O3", "-std=c99", "-fopenmp", "-static", "-DTABLEFREE_PLAIN"} <= set(
            build.x86_flags()):
        pytest.skip(f"this CPU does not run {name}'s paths ({' '.join(flags)})")
    try:
        program, _ = build.build(runtime.SOURCE, f"run.c ({name})", "see its error", runtime.INCLUDED,
                                 cc=shutil.which(cc), sets=[flags])
    except UserError as e:
        if "-fopenmp" not in flags:  # the compiler and the CPU are here: the code must build
            pytest.fail(f"{name} does not build: {e}")
        pytest.skip(f"{name} does not build here: {e}")  # clang's -fopenmp without libomp-dev
    return [*runner, str(program)]


def kernel_checks(tmp_path, name, program, flag_sets):
    """[the built program] for each flag set: program's C, which #includes kernel.c (its "KERNEL"), cached
    by kernel.c's text too, so a changed kernel is built again."""
    kernel = runtime.SOURCE.with_name("kernel.c")
    (tmp_path / f"{name}.c").write_text(program.replace("KERNEL", str(kernel)))
    return [build.build(tmp_path / f"{name}.c", f"the {name} check", "see its error", [kernel], sets=[flags])[0]
            for flags in flag_sets]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """{kind: (flat file, the torch path's 20 greedy tokens, its logits before each)}."""
    root, out = tmp_path_factory.mktemp("portable"), {}
    for kind in KINDS:
        contents = packed_model(kind)
        runtime.write_flat(contents, root / f"{kind}.bin")
        out[kind] = (root / f"{kind}.bin", *reference(contents, 20))
    return out


def decode(command, flat, tmp_path, *extra):
    done = subprocess.run([*command, str(flat), "--ids", ",".join(map(str, PROMPT)), "--max_new_tokens", "20",
                           "--temperature", "0", "--print_ids", "--logits", str(tmp_path / "logits"), *extra],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return [int(t) for t in done.stdout.split()], np.fromfile(tmp_path / "logits", dtype=np.float32).reshape(20, 300)


@pytest.mark.parametrize("name", BUILDS)
def test_every_build_gives_the_torch_paths_tokens_and_logits(name, models, tmp_path):
    """Each build, each input and head: the torch path's greedy tokens, with --exact its logits within 1e-4
    of their range (plain C sums in another order than the x86 lanes: measured 2e-7 against 1.6e-7), but at
    most one step where an activation's int8 rounding falls the other way; and a float16 KV cache (plain C:
    float_to_half by hand; x86: F16C) and an int8 one keep the tokens too; the default cache of integer
    sums gives the float32 cache's logits bytes."""
    command = built(name)
    for kind, (flat, tokens, logits) in models.items():
        ours, ours_logits = decode(command, flat, tmp_path, "--exact")
        assert decode(command, flat, tmp_path, "--head_tables", "f32")[1].tobytes() == ours_logits.tobytes(), (name, kind)
        assert ours == tokens, (name, kind)
        errors = np.sort(np.abs(ours_logits[:len(logits)] - logits).max(axis=1)) / (logits.max() - logits.min())
        assert errors[-2] <= 1e-4 and errors[-1] <= 1e-3, (name, kind, errors[-3:])
        assert decode(command, flat, tmp_path, "--kv_cache", "f16")[0] == tokens, (name, kind)
        assert decode(command, flat, tmp_path, "--kv_cache", "i8")[0] == tokens, (name, kind)


SUMS_PROGRAM = r"""
#include <stdio.h>
#include "KERNEL"
int main(void) {  /* in: bytes, a block of codes (bytes x 32), the float tables (bytes x 32), the int16 ones (same) */
    int bytes;
    static uint8_t block[32 * 64];
    static float lut[32 * 64], out[64];
    static int16_t raw[32 * 64], tables[32 * 64];
    if (fread(&bytes, 4, 1, stdin) != 1 || bytes > 64 || fread(block, 1, 32 * bytes, stdin) != (size_t)(32 * bytes) ||
        fread(lut, 4, 32 * bytes, stdin) != (size_t)(32 * bytes) || fread(raw, 2, 32 * bytes, stdin) != (size_t)(32 * bytes))
        return 1;
    for (int j = 0; j < bytes; j++)  /* each path's own layout of the same entries */
        for (int k = 0; k < 2; k++)
            for (int n = 0; n < 16; n++) put(tables, j, k, n, raw[32 * j + 16 * k + n]);
    sums_f32(block, bytes, lut, out), sums_i16(block, bytes, tables, out + 32);
    fwrite(out, 4, 64, stdout);
    return 0;
}
"""


@pytest.mark.parametrize("bytes_", [1, 8, 63])
def test_the_code_heads_sums_are_the_same_bits_in_every_path(bytes_, tmp_path):
    """The code head's per-token sums of table entries, float32 and int16, from the plain loops, the AVX2
    path and (where the CPU has it) the AVX-512 one, against numpy adding in the same order (even and odd
    code bytes apart, then together): the same bits, float32 too, for an odd and an even count of bytes."""
    rng = np.random.default_rng(bytes_)
    block = rng.integers(0, 256, (bytes_, 32), dtype=np.uint8)
    lut = rng.standard_normal((bytes_, 32)).astype(np.float32)
    raw = rng.integers(-32767 // (2 * bytes_), 32767 // (2 * bytes_), (bytes_, 32)).astype(np.int16)  # no sum past 32,767
    x86 = build.x86_flags()
    flag_sets = [["-O3", "-std=c99"], *([["-O3", *X86], ["-O3", *x86]] if x86 else [])]
    outputs = []
    for program in kernel_checks(tmp_path, "sums", SUMS_PROGRAM, flag_sets):
        data = np.int32(bytes_).tobytes() + block.tobytes() + lut.tobytes() + raw.tobytes()
        outputs.append(subprocess.run([str(program)], input=data, capture_output=True, check=True).stdout)
    even, odd, low, high = np.zeros(32, np.float32), np.zeros(32, np.float32), block & 15, block >> 4
    for j in range(bytes_):  # nibble_sum's order: the low nibble's entry, then the high one's
        part = even if j % 2 == 0 else odd
        part += lut[j, low[j]]
        part += lut[j, 16 + high[j]]
    integers = sum(raw[j, high[j]].astype(np.int32) + raw[j, 16 + low[j]] for j in range(bytes_))
    expected = np.concatenate([even + odd, integers.astype(np.float32)])
    for out in outputs:
        assert np.array_equal(np.frombuffer(out, dtype=np.float32), expected)


TERNARY_PROGRAM = r"""
#include <stdio.h>
#include "KERNEL"
int main(void) {  /* in: N, in, out, x (N x in int8), the packed weights (out x in / 4); out: the sums (N x out int32) */
    int n[3];
    static int8_t x[16 * 640];
    static uint8_t w[64 * 160];
    static int32_t y[16 * 64];
    if (fread(n, 4, 3, stdin) != 3 || n[0] > 16 || n[1] > 640 || n[2] > 64 ||
        fread(x, 1, (size_t)n[0] * n[1], stdin) != (size_t)n[0] * n[1] ||
        fread(w, 1, (size_t)n[2] * n[1] / 4, stdin) != (size_t)n[2] * n[1] / 4)
        return 1;
    ternary_matmul(x, w, y, n[0], n[1], n[2]);
    fwrite(y, 4, (size_t)n[0] * n[2], stdout);
    return 0;
}
"""


@pytest.mark.parametrize("rows", [1, 4, 7, 16])
def test_the_ternary_sums_are_the_same_integers_in_every_path(rows, tmp_path):
    """ternary_matmul's integer sums from the plain loops, the AVX2 path and this CPU's best (AVX-512 VNNI's
    vpdpbusd where present), one row of x at a time and four (a prompt's), against numpy: the same integers,
    for in = 128, 384 (not a whole 512: dot4's int16 groups end early) and 640, extreme int8 values included."""
    x86 = build.x86_flags()
    flag_sets = [["-O3", "-std=c99"], *([["-O3", *X86, "-fopenmp"], ["-O3", *x86, "-fopenmp"]] if x86 else [])]
    programs = kernel_checks(tmp_path, "ternary", TERNARY_PROGRAM, flag_sets)
    rng = np.random.default_rng(rows)
    for in_ in (128, 384, 640):
        w = rng.integers(-1, 2, (64, in_))
        x = rng.integers(-128, 128, (rows, in_)).astype(np.int8)
        x[0, :64] = -128  # the int16 pairs' worst case on the AVX2 path
        lifted = (w + 1).reshape(64, in_ // 128, 4, 32)  # byte k of a 128-block: weights k, k + 32, k + 64, k + 96
        packed = (lifted << np.array([0, 2, 4, 6])[:, None]).sum(axis=2).astype(np.uint8).reshape(64, in_ // 4)
        data = np.array([rows, in_, 64], np.int32).tobytes() + x.tobytes() + packed.tobytes()
        expected = x.astype(np.int64) @ w.T
        for program in programs:
            out = subprocess.run([str(program)], input=data, capture_output=True, check=True).stdout
            assert np.array_equal(np.frombuffer(out, np.int32).reshape(rows, 64), expected), (program.name, in_)


HALF_PROGRAM = r"""
#include <stdio.h>
#include "KERNEL"
int main(void) {  /* float32 in, float_to_half and half_to_float of it out */
    float f;
    while (fread(&f, 4, 1, stdin) == 1) {
        uint16_t h = float_to_half(f);
        float back = half_to_float(h);
        fwrite(&h, 2, 1, stdout), fwrite(&back, 4, 1, stdout);
    }
    return 0;
}
"""


def test_float16_by_hand_rounds_as_numpy_does(tmp_path):
    """The plain float_to_half against numpy's (IEEE round to nearest even) on every float16 boundary and
    half-way point, subnormals, overflow, infinities and a million random floats; half_to_float exact."""
    rng = np.random.default_rng(66)
    halves = np.arange(0, 1 << 16, dtype=np.uint32)
    halves = halves[(halves & 0x7C00) != 0x7C00]  # finite float16s: each, and each half-way to the next
    exact = halves.astype(np.uint16).view(np.float16).astype(np.float32)
    between = (exact.view(np.uint32) + np.where(np.abs(exact) < 6.1e-5, 0, 1 << 12).astype(np.uint32)).view(np.float32)
    special = np.array([0.0, -0.0, 65504.0, 65519.99, 65520.0, 1e10, -1e10, np.inf, -np.inf, 2.0 ** -25, 2.0 ** -24 * 1.5,
                        2.0 ** -26, 5.9604645e-08, 3e-08], dtype=np.float32)
    randoms = rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32)
    floats = np.concatenate([exact, between, special, randoms[np.isfinite(randoms)]]).astype(np.float32)
    program, = kernel_checks(tmp_path, "float16", HALF_PROGRAM, [["-O3", "-std=c99"]])
    out = subprocess.run([str(program)], input=floats.tobytes(), capture_output=True, check=True).stdout
    pairs = np.frombuffer(out, dtype=np.dtype([("h", "<u2"), ("back", "<f4")]))
    with np.errstate(over="ignore"):
        expected = floats.astype(np.float16)
    assert np.array_equal(pairs["h"], expected.view(np.uint16))
    assert np.array_equal(pairs["back"], expected.astype(np.float32))


GELU_PROGRAM = r"""
#include <stdio.h>
#include "KERNEL"
int main(void) {  /* float32 in, gelu() of them out */
    static float x[1 << 21];
    size_t n = fread(x, 4, 1 << 21, stdin);
    gelu(x, (int64_t)n);
    fwrite(x, 4, n, stdout);
    return 0;
}
"""


@pytest.mark.parametrize("flags", [["-O3", "-std=c99"], ["-O3", *X86]], ids=["plain", "x86"])
def test_gelu_is_torchs(flags, tmp_path):
    """The exact GELU on a million values: within 1e-6 of float64's (measured 4.5-4.8e-7) in plain C (erff)
    and on the x86 path, which computes ATen's AVX2 erf: where torch runs its AVX2 kernels, the same bits as
    torch for most values (measured 82%, plain C 42%), so an int8 rounding downstream rarely differs. (torch's
    AVX-512 kernel rounds otherwise: 1.1e-6 from float64 on a Zen 4, the same bits as ours for 39%.)"""
    if "-mavx2" in flags and not build.x86_flags():
        pytest.skip("this CPU has no AVX2")
    x = np.concatenate([np.random.default_rng(7).standard_normal(1 << 20) * 3, np.linspace(-12, 12, 10001)]).astype(np.float32)
    program, = kernel_checks(tmp_path, "GELU", GELU_PROGRAM, [flags])
    ours = np.frombuffer(subprocess.run([str(program)], input=x.tobytes(), capture_output=True, check=True).stdout,
                         dtype=np.float32)
    gelu, torch = runtime.torch.nn.functional.gelu, runtime.torch
    assert np.abs(ours - gelu(torch.from_numpy(x).double()).numpy()).max() <= 1e-6
    if "-mavx2" in flags and torch.backends.cpu.get_cpu_capability() == "AVX2":
        assert (ours == gelu(torch.from_numpy(x)).numpy()).mean() > 0.75


def test_a_cpu_or_compiler_without_the_fast_paths_still_gets_a_build(monkeypatch, tmp_path, capsys):
    """Never refused for its CPU: without AVX2 the plain loops; a compiler without OpenMP (Apple's clang)
    one thread; no compiler at all is one line naming the fix."""
    monkeypatch.setattr(build.torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    assert build.flag_sets() == [["-O3", "-fopenmp"], ["-O3"]]
    fussy = tmp_path / "cc"  # a compiler that refuses -fopenmp, as Apple's does
    fussy.write_text(f'#!/bin/sh\nfor a in "$@"; do [ "$a" = -fopenmp ] && echo "unsupported option -fopenmp" >&2 && exit 1; done\n'
                     f'exec {shutil.which("gcc") or "cc"} "$@"\n')
    fussy.chmod(0o755)
    monkeypatch.setenv("CC", str(fussy))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    program, how = build.build(runtime.SOURCE, "the C runtime", "", runtime.INCLUDED)
    assert how == "cc, plain C, one thread" and os.access(program, os.X_OK)
    assert len(list((tmp_path / "cache" / "tablefree").glob("*.failed"))) == 1  # remembered, not tried again
    # the fall back from the best flags is said, with the compiler's first error, each time it is used
    assert capsys.readouterr().err == ("note: cc could not build the C runtime as cc, plain C, OpenMP (unsupported "
                                       "option -fopenmp); built as cc, plain C, one thread\n")
    build.build(runtime.SOURCE, "the C runtime", "", runtime.INCLUDED)
    assert "could not build the C runtime as cc, plain C, OpenMP" in capsys.readouterr().err
    monkeypatch.setenv("CC", str(tmp_path / "none"))  # a CC that names no program: that, not "none installed"
    with pytest.raises(UserError, match=r"built with \$CC, '.*none', which is not a program on PATH; set CC to a C "
                                        r"compiler's name or path, or unset it to use gcc, clang or cc"):
        runtime.binary()
    monkeypatch.delenv("CC")
    path = os.environ["PATH"]
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no compiler at all
    with pytest.raises(UserError, match="none is installed .*install one or sample with --engine torch"):
        runtime.binary()
    monkeypatch.setenv("PATH", path)
    (tmp_path / "readonly").mkdir(mode=0o500)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "readonly"))  # an unwritable cache: one line, no traceback
    if os.geteuid() != 0:  # root writes anywhere
        with pytest.raises(UserError, match="cannot be written .*set XDG_CACHE_HOME to a writable folder"):
            runtime.binary()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a-file"))
    (tmp_path / "a-file").write_text("not a folder")
    with pytest.raises(UserError, match="a-file/tablefree, which cannot be written"):
        runtime.binary()
