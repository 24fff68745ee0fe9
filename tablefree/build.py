"""Building tablefree's C at first use (run.c, the kernels' library for the torch path, the bandwidth
probe): the best build the compiler and the CPU allow, kept in a cache keyed by the sources and flags.

    compiler   $CC, else the first of gcc, clang and cc on PATH
    x86 paths  -mavx2 -mfma -mf16c where torch finds AVX2; -mavx512f -mavx512bw too where it finds AVX-512,
               and -mavx512vl -mavx512vnni where Linux lists avx512_vnni (the ternary sums' int8 dot)
    threads    -fopenmp where the compiler has it (Apple's clang has not): else one thread, same results

Every kernel is plain C99 first (tablefree/kernel.c), so the flags only add speed: the sets are tried
from the fastest to `-O3` alone, and a set the compiler refuses is remembered (a `.failed` file) and
passed over. Only a machine where no C compiler works at all has no build.
"""

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch

from tablefree.common import UserError

X86 = {"AVX2": ["-mavx2", "-mfma", "-mf16c"], "AVX512": ["-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512bw"]}
VNNI = ["-mavx512vl", "-mavx512vnni"]  # with AVX512's: vpdpbusd (kernel.c's VNNI)


def cache_dir():
    """Where built C code is kept: ~/.cache/tablefree (or under $XDG_CACHE_HOME)."""
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tablefree"


def compiler():
    """The C compiler's path: $CC, else gcc, clang or cc; None if there is none."""
    names = [os.environ["CC"]] if os.environ.get("CC") else ["gcc", "clang", "cc"]
    return next((path for path in map(shutil.which, names) if path), None)


def x86_flags():
    """The x86 paths this CPU runs, as compiler flags ([] on another CPU). torch names AVX2 and AVX-512;
    VNNI, which torch does not tell apart, from Linux's list of the CPU's features (elsewhere not used)."""
    flags = X86.get(torch.backends.cpu.get_cpu_capability(), [])
    try:
        features = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        features = []
    return flags + VNNI if "-mavx512f" in flags and {"avx512_vnni", "avx512vl"} <= set(features) else flags


def flag_sets():
    """The flags to try, fastest first: this CPU's x86 paths with and without OpenMP, then plain C."""
    x86 = x86_flags()
    sets = [[*x86, "-fopenmp"], x86, ["-fopenmp"], []]
    return [["-O3", *s] for i, s in enumerate(sets) if s not in sets[:i]]


def describe(cc, flags):
    """One line: which compiler, which paths, how many threads."""
    paths = ("AVX-512 VNNI" if "-mavx512vnni" in flags else "AVX-512" if "-mavx512f" in flags
             else "AVX2" if "-mavx2" in flags else "plain C")
    return f"{Path(cc).name}, {paths}, {'OpenMP' if '-fopenmp' in flags else 'one thread'}"


def build(source, what, instead, included=(), shared=False, cc=None, sets=None):
    """(the built file, describe()'s line) for the C program at source (a library with shared), which
    #includes the files `included`: the first of `sets` (default flag_sets()) that cc (default
    compiler()) builds. Where none builds, a one-line UserError naming `what` and the fix `instead`."""
    cc = cc or compiler()
    if cc is None and os.environ.get("CC"):
        raise UserError(f"{what} is built with $CC, {os.environ['CC']!r}, which is not a program on PATH; set CC to "
                        f"a C compiler's name or path, or unset it to use gcc, clang or cc")
    if cc is None:
        raise UserError(f"{what} is built with a C compiler, and none is installed (gcc, clang or cc; or set CC); "
                        f"install one or {instead}")
    code = b"".join(Path(f).read_bytes() for f in [source, *included])
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
        if not os.access(cache_dir(), os.W_OK):
            raise PermissionError(13, "not writable")
    except OSError as e:
        raise UserError(f"{what} is built into {cache_dir()}, which cannot be written ({e.strerror}); set "
                        f"XDG_CACHE_HOME to a writable folder, or {instead}") from None
    errors = []
    for flags in sets or flag_sets():
        command = [*flags, *(["-shared", "-fPIC"] if shared else [])]
        key = hashlib.sha256(code + " ".join([cc, *command]).encode()).hexdigest()[:16]
        built = cache_dir() / f"{Path(source).stem}-{key}{'.so' if shared else ''}"
        failed = built.with_name(built.name + ".failed")
        if built.exists():
            return fell_back(built, cc, flags, errors, what, sets)
        if failed.exists():
            errors.append(failed.read_text())
            continue
        tmp = built.with_name(f"{built.name}.{os.getpid()}.tmp")
        done = subprocess.run([cc, *command, str(source), "-o", str(tmp), "-lm"], capture_output=True, text=True)
        if done.returncode == 0:
            os.replace(tmp, built)  # whole or not at all, for a concurrent first use
            return fell_back(built, cc, flags, errors, what, sets)
        lines = done.stderr.strip().splitlines() or ["no message"]
        errors.append(next((line for line in lines if "error" in line), lines[-1])[:160])
        try:
            failed.write_text(errors[-1])
        except OSError:  # not remembered: tried again next time
            pass
    raise UserError(f"{Path(cc).name} could not build {what} ({errors[-1]}); {instead}")


def fell_back(built, cc, flags, errors, what, sets):
    """(built, describe()'s line), saying in one line on stderr when the CPU's best flags did not build
    with this compiler (its first error): a slower build is never a silent one."""
    if errors:
        best = describe(cc, (sets or flag_sets())[0])
        print(f"note: {Path(cc).name} could not build {what} as {best} ({errors[0]}); built as "
              f"{describe(cc, flags)}", file=sys.stderr)
    return built, describe(cc, flags)
