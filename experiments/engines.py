"""Two decoders as processes, timed on the same terms: our runtime (tablefree/run.c) and llama.cpp's own
benchmark, llama-bench (built by dev/build_llama_bench.sh, or on PATH, or at $LLAMA_BENCH), for
experiments/bench_paper.py (issue 56).

Each run is one process: its decoding tokens/s (ours: its closing line; llama-bench: `tg N`, the mean
of one repetition after its warm-up), its prompt tokens/s, and its peak resident memory from the
kernel (VmHWM, read the same way for both). The bytes a decoding step reads are counted from each
file's tensors and the KV cache at the run's mean context: what a token must stream from memory if
nothing stays in the caches between tokens, so bytes x tokens/s is the bandwidth an engine uses."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tablefree import runtime
from tablefree.build import cache_dir
from tools.llamacpp import gguf_package

PROMPT = 16  # tokens: ours gets a 16-token prompt, llama-bench a 16-token `pp` test beside its `tg`
# run.c's variants: the KV cache in float32 (--exact), float16, or int16 sums (the default: float32's
# numbers), and (a code head's only) its tables in float32 (--exact: the torch path's logits within 1e-4) or
# int16 (the default: within about 1e-3)
VARIANTS = {"f32": ("--exact",), "f16": ("--kv_cache", "f16", "--head_tables", "f32"), "sums, i16 tables": (),
            "f16, i16 tables": ("--kv_cache", "f16")}


def llama_bench():
    """The llama-bench executable, or None: $LLAMA_BENCH, then PATH, then where dev/build_llama_bench.sh puts it."""
    for candidate in (os.environ.get("LLAMA_BENCH"), shutil.which("llama-bench"),
                      cache_dir() / "llama-bench" / "bin" / "llama-bench"):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


def measured(command, threads):
    """(stdout, stderr, peak RSS bytes) of command run to its end with OMP_NUM_THREADS=threads. The peak
    is the process's VmHWM, read every 10 ms while it runs (it only grows; wait4's ru_maxrss would
    count the pages of this Python process it was forked from)."""
    peak = 0
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, env={**os.environ, "OMP_NUM_THREADS": str(threads)})
        status = Path(f"/proc/{process.pid}/status")
        while process.poll() is None:
            try:
                found = re.search(r"VmHWM:\s+(\d+) kB", status.read_text())
            except OSError:  # gone between poll and read
                found = None
            peak = max(peak, int(found[1]) * 1024 if found else 0)
            time.sleep(0.01)
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    if process.returncode:
        raise RuntimeError(f"{Path(command[0]).name} failed on {command[1:3]}: {stderr.strip()[-300:]}")
    return stdout, stderr, peak


def ours(flat, threads, new_tokens, flags=(), prompt=PROMPT):
    """run.c on a flat file, greedy from a fixed prompt of `prompt` tokens, with flags (as VARIANTS'):
    {tok_s, prompt_tok_s, threads_used, peak_rss}."""
    ids = ",".join(str(7 * i % 251) for i in range(prompt))
    _, err, peak = measured([str(runtime.binary()), str(flat), "--ids", ids, "--max_new_tokens", str(new_tokens),
                             "--temperature", "0", "--print_ids", *flags], threads)
    found = re.search(r"([\d.]+) prompt tokens/s\), decoding ([\d.]+) tokens/s; peak RSS ([\d.]+) MB.*\(([\d.]+) a step",
                      err)
    if not found:
        raise RuntimeError(f"the runtime's closing line is not the one expected: {err.strip()[-300:]}")
    return {"tok_s": float(found[2]), "prompt_tok_s": float(found[1]), "threads_used": float(found[4]),
            "peak_rss": max(peak, float(found[3]) * 2 ** 20)}  # its own VmHWM at exit: a run shorter than a poll


def llama(program, gguf, threads, new_tokens, prompt=PROMPT, depth=PROMPT):
    """llama-bench on a GGUF file, one repetition of `pp prompt` and `tg new_tokens` (either may be 0: not
    run), each after `depth` tokens of context (`-d 16` by default: where ours decodes after its prompt),
    its F16 KV cache, `threads` threads: {tok_s, prompt_tok_s (None where not run), peak_rss}."""
    out, _, peak = measured([str(program), "-m", str(gguf), "-p", str(prompt), "-n", str(new_tokens), "-d", str(depth),
                             "-t", str(threads), "-r", "1", "-o", "json"], threads)
    tests = {("pp" if r["n_gen"] == 0 else "tg"): r["avg_ts"] for r in json.loads(out)}
    return {"tok_s": tests.get("tg"), "prompt_tok_s": tests.get("pp"), "threads_used": threads, "peak_rss": peak}


def cache_bytes(flags, config):
    """The bytes run.c's KV cache spends on a key or value with these flags: the default int16 sums and
    int8 add a float scale for each head's vector."""
    kind = flags[flags.index("--kv_cache") + 1] if "--kv_cache" in flags else "f32" if "--exact" in flags else "sums"
    scale = 4 * config.n_head / config.n_embd
    return {"f32": 4, "f16": 2, "sums": 2 + scale, "i8": 1 + scale}[kind]


def kv_bytes(config, positions, bytes_per_value):
    """Bytes of keys and values a step reads at a context of `positions`."""
    return 2 * config.n_layer * config.n_embd * bytes_per_value * positions


def our_bytes(contents, config):
    """Bytes of the flat file's tensors a decoding step reads: all but the token table (the bytes of the
    chosen token) and, where the input's table is not the head's, all of that table but one row."""
    tensors = runtime.tensors(contents)
    total = sum(t.numel() * t.element_size() for name, t in tensors.items() if not name.startswith("tokens."))
    if "input.table" in tensors and runtime.head_kind(config) != "tied":
        total -= (config.vocab_size - 1) * config.n_embd * 2  # float16 rows, one read
    return total


def gguf_bytes(path, config):
    """Bytes of a GGUF file's tensors a llama.cpp step reads: all but token_embd (one row of it)."""
    reader = gguf_package("counting a GGUF file's tensors").GGUFReader(path)
    sizes = {t.name: int(t.n_bytes) for t in reader.tensors}
    return sum(sizes.values()) - sizes["token_embd.weight"] * (config.vocab_size - 1) // config.vocab_size


def busy():
    """A competing CPU-bound process (a Python loop), to be killed by the caller."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])
