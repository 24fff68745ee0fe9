"""The reference section of experiments/bench.py: what run.c's techniques buy over tablefree/reference.c.

One packed ternary model (bench_infer's decoding shape, random weights: speed does not depend on them), one
prompt of 16 ids, greedy; each engine is a program run as a process, in turns, several rounds. Its decoding
rate is (new tokens - 1) over the time a run of that many new tokens takes beyond a run of one (the load, the
prompt and the first token cancel), the median over the rounds. The engines, one technique added a row:

    reference.c            float32 loops over float weights unpacked on the fly, one position at a time
    run.c, plain C         + 2-bit rows read in place, int8 activations with integer sums, the int16 sums KV
                             cache, the head's int16 tables (its defaults); the plain C build, one thread
    run.c, float KV cache  the same with --kv_cache f32 (what the sums cache costs or buys)
    run.c, x86 paths       + this CPU's AVX2 / AVX-512 / VNNI kernels, one thread
    run.c, as it runs      + OpenMP on every core: sample.py --engine c's build
"""

import os
import statistics
import subprocess
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch

from experiments.bench_infer import DECODE_SHAPE, QUICK_DECODE_SHAPE
from model import GPT, GPTConfig
from tablefree import build, runtime
from tablefree.packed import packed_ternary

REFERENCE = runtime.SOURCE.with_name("reference.c")
PROMPT = list(range(1, 17))


def engines():
    """{name: (the command, the environment's OMP_NUM_THREADS or None)}: each built here (cached)."""
    plain = ["-O3", "-std=c99"]
    x86 = build.x86_flags()
    made = {"reference.c (cc -O3)": (build.build(REFERENCE, "the reference decoder", "", sets=[["-O3"]])[0], [], "1"),
            "run.c, plain C, one thread": (build.build(runtime.SOURCE, "run.c", "", runtime.INCLUDED, sets=[plain])[0],
                                           [], "1")}
    made["run.c, plain C, --kv_cache f32"] = (made["run.c, plain C, one thread"][0], ["--kv_cache", "f32"], "1")
    if x86:
        made["run.c, x86 paths, one thread"] = (build.build(runtime.SOURCE, "run.c", "", runtime.INCLUDED,
                                                            sets=[["-O3", *x86]])[0], [], "1")
    made[f"run.c as sample.py builds it, {os.cpu_count()} threads"] = (runtime.binary(), [], None)
    return made


def timed(command, extra, threads, flat, new_tokens):
    env = {**os.environ, **({"OMP_NUM_THREADS": threads} if threads else {})}
    start = time.perf_counter()
    subprocess.run([str(command), str(flat), "--ids", ",".join(map(str, PROMPT)), "--max_new_tokens", str(new_tokens),
                    "--temperature", "0", "--print_ids", *extra], check=True, capture_output=True, env=env)
    return time.perf_counter() - start


def bench_reference(args):
    fields = QUICK_DECODE_SHAPE if args.quick else DECODE_SHAPE
    new_tokens, rounds = (8, 2) if args.quick else (64, 3)
    torch.manual_seed(0)
    config = GPTConfig(**fields, body="ternary")
    contents = packed_ternary(GPT(config).eval(), {"model_config": asdict(config), "tokenizer": {"info": {}, "ranks": ""}})
    made = engines()
    with tempfile.TemporaryDirectory() as folder:
        flat = Path(folder) / "model.bin"
        runtime.write_flat(contents, flat)
        times = {name: [] for name in made}
        for _ in range(rounds):  # in turns: a slow spell of the host falls on every engine alike
            for name, (command, extra, threads) in made.items():
                times[name].append(timed(command, extra, threads, flat, new_tokens)
                                   - timed(command, extra, threads, flat, 1))
    rows = [{"engine": name, "tok_s": (new_tokens - 1) / statistics.median(t), "runs": t} for name, t in times.items()]
    return rows, reference_table(rows, fields, new_tokens, rounds)


def reference_table(rows, fields, new_tokens, rounds):
    base = rows[0]["tok_s"]
    table = [f"Shape: {fields['n_layer']} layers, n_embd {fields['n_embd']}, V = {fields['vocab_size']:,}, binary input, "
             f"ternary body, random weights; a 16-token prompt, {new_tokens} new tokens greedy; the decoding rate "
             f"beyond a run of one new token, median of {rounds} rounds in turns (experiments/bench_reference.py).", "",
             "| engine | decoding tokens/s | x the reference |", "|---|---|---|"]
    table += [f"| {r['engine']} | {r['tok_s']:,.1f} | {r['tok_s'] / base:.1f}x |" for r in rows]
    return table
