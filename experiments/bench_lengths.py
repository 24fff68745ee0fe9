"""experiments/bench.py's `lengths` section (issue 66): the paper section's two engines at every length.

At the frozen-code paper's shape (experiments/bench_paper.py's random models): our runtime (tablefree/run.c)
on the frozen code-head ternary model, at its defaults (the KV cache's int16 sums, the code head's int16 tables),
with --exact (float32 everywhere), --kv_cache f16 and --kv_cache i8 (the options); llama.cpp's own llama-bench on the tied float
model in Q8_0, run the same way: `-p 512 -n 0` for a 512-token prompt, `-p 0 -n N -d D` for N tokens after
D of context (ours: a D-token prompt, then N steps). Each work idle and beside one busy process; the engines
alternate run by run, PAIRS runs each: tokens/s medians, each ratio the median of the pairs' ratios, and
for decoding the bytes a step reads (the file's tensors and the KV cache at the mean context) against
this machine's measured read bandwidth.
"""

import os
import statistics
import tempfile
from pathlib import Path

import torch

from experiments import engines
from experiments.bandwidth import read_bandwidth
from experiments.bench_paper import PAPER, QUICK, SHAPES, random_models
from tablefree import runtime
from tablefree.packed import packed_ternary
from tools.gguf import write_gguf

WORKS = {"a 512-token prompt": (512, 0), "256 tokens after 16": (16, 256), "128 tokens after 512": (512, 128),
         "64 tokens after 960": (960, 64)}  # name: (tokens of context, new tokens); 0 new: the prompt's rate
QUICK_WORKS = {"a 64-token prompt": (64, 0), "16 tokens after 48": (48, 16)}
OURS = {"defaults": (), "--exact": ("--exact",), "--kv_cache f16": ("--kv_cache", "f16"), "--kv_cache i8": ("--kv_cache", "i8")}
OPTIONS = ("--kv_cache f16", "--kv_cache i8")  # issue 66 asks 7x of the options
PAIRS = 3


def files(folder, fields):
    """(config, flat file, the bytes of its tensors a step reads; Q8_0 GGUF, its bytes a step) at the paper's shape."""
    made = {}
    for name, model, ckpt in random_models(fields):
        if name == "frozen+codes, ternary":
            contents = packed_ternary(model, ckpt)
            made["flat"], made["config"] = Path(folder) / "frozen.bin", model.config
            runtime.write_flat(contents, made["flat"])
            made["flat_bytes"] = engines.our_bytes(contents, model.config)
        if name == "learned+tied, float":
            made["gguf"] = write_gguf(model, ckpt, Path(folder) / "tied.Q8_0.gguf", "Q8_0")
            made["gguf_bytes"] = engines.gguf_bytes(made["gguf"], model.config)
        del model
    return made


def one_run(engine, made, program, threads, context, new):
    """tokens/s of one run: the prompt's where new is 0, else decoding's."""
    if engine == "llama-bench":
        found = engines.llama(program, made["gguf"], threads, new, prompt=context if not new else 0, depth=context if new else 0)
        return found["prompt_tok_s"] if not new else found["tok_s"], found["peak_rss"]
    found = engines.ours(made["flat"], threads, new + 1, OURS[engine], prompt=context)
    return found["prompt_tok_s"] if not new else found["tok_s"], found["peak_rss"]


def bench_lengths(args):
    """The section: (results, its markdown lines)."""
    program, threads = engines.llama_bench(), torch.get_num_threads()
    if program is None:
        return {}, ["llama-bench is not built here: `bash dev/build_llama_bench.sh` builds it (15-20 minutes on 2 cores)."]
    works, pairs = (QUICK_WORKS, 1) if args.quick else (WORKS, PAIRS)
    bandwidth = read_bandwidth(threads, *((64, 1) if args.quick else (1024, 5)))["gb_s"]
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        made = files(folder, (QUICK if args.quick else SHAPES)[PAPER])
        os.sync()  # the files' 670 MB on disk before any timing: the kernel's writeback slowed the first runs
        for work, (context, new) in works.items():
            for load in ("idle", "busy"):
                runs = {engine: [] for engine in ["llama-bench", *OURS]}
                competitor = engines.busy() if load == "busy" else None
                try:
                    for _ in range(pairs):
                        for engine in runs:
                            runs[engine].append(one_run(engine, made, program, threads, context, new))
                finally:
                    if competitor:
                        competitor.kill(), competitor.wait()
                rows += summarize(work, load, runs, made, context, new, bandwidth)
    return {"rows": rows, "bandwidth_gb_s": bandwidth, "threads": threads}, table(rows, bandwidth, threads, pairs)


def summarize(work, load, runs, made, context, new, bandwidth):
    """One row per engine: medians, the ratio to llama-bench pair by pair, bytes a step and their share."""
    config, rows = made["config"], []
    rival = [tok_s for tok_s, _ in runs["llama-bench"]]
    for engine, done in runs.items():
        tok_s = statistics.median(t for t, _ in done)
        row = {"work": work, "load": load, "engine": engine, "tok_s": tok_s, "runs": [t for t, _ in done],
               "peak_rss": max(p for _, p in done)}
        if engine != "llama-bench":
            row["ratio"] = statistics.median(ours / theirs for (ours, _), theirs in zip(done, rival))
        if new:  # a decoding step's bytes: the weights it uses and the KV cache at the mean context
            kv = 2 if engine == "llama-bench" else engines.cache_bytes(OURS[engine], config)
            read = (made["gguf_bytes"] if engine == "llama-bench" else made["flat_bytes"]) + engines.kv_bytes(
                config, context + new / 2, kv)
            row.update(bytes=read, of_bandwidth=read * tok_s / 1e9 / bandwidth)
        rows.append(row)
    return rows


def table(rows, bandwidth, threads, pairs):
    lines = [f"Against llama-bench (built by `dev/build_llama_bench.sh` from the llama.cpp that llama-cpp-python 0.3.36 "
             f"vendors; its F16 KV cache): the paper's shape with random weights, {threads} threads, each engine's "
             f"process run {pairs} times in turns with the others. Ours: the frozen code-head ternary model in run.c "
             f"(defaults: the KV cache as int16 sums, the float32 cache's numbers, and int16 code-head tables; --exact: "
             f"float32 cache and tables; --kv_cache i8: int8 keys and values, a float scale for each head's); llama-bench: the "
             f"tied float model in Q8_0. This machine's read bandwidth (experiments/bandwidth.c): {bandwidth:.1f} GB/s.",
             "", "| work | load | engine | tokens/s | ratio to llama-bench | MB a step | of the bandwidth | peak RSS (MB) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = f"{r['ratio']:.2f}x" if "ratio" in r else ""
        step = (f"{r['bytes'] / 1e6:,.1f} | {100 * r['of_bandwidth']:.0f}%" if "bytes" in r else "| ")
        lines.append(f"| {r['work']} | {r['load']} | {r['engine']} | {r['tok_s']:,.1f} | {ratio} | {step} | "
                     f"{r['peak_rss'] / 1e6:,.0f} |")
    return [*lines, "", *targets(rows)]


def targets(rows):
    """Issue 66's targets, each met or not; for decoding, also the share of the bandwidth each would need:
    a step streams its bytes, so a ratio past llama-bench's bytes over ours needs more than llama-bench's share."""
    by = {(r["work"], r["load"], r["engine"]): r for r in rows}
    lines = []
    for work in dict.fromkeys(r["work"] for r in rows):
        prompt = "prompt" in work
        for engine, goal in ((("defaults", 2.0),) if prompt else (("defaults", 5.0), *((o, 7.0) for o in OPTIONS))):
            r, rival = by[(work, "idle", engine)], by[(work, "idle", "llama-bench")]
            line = (f"- {work}, {engine}: {r['ratio']:.2f}x llama-bench (target at least {goal:g}x: "
                    f"{'met' if r['ratio'] >= goal else 'NOT met'})")
            if not prompt:  # a step streams its bytes: reading memory as well as llama-bench, ours is bytes / bytes faster
                bound = rival["bytes"] / r["bytes"]
                line += (f"; its bytes a step allow {bound:.2f}x at llama-bench's {100 * rival['of_bandwidth']:.0f}% of "
                         f"the bandwidth, so {goal:g}x needs {100 * rival['of_bandwidth'] * goal / bound:.0f}% of it")
            lines.append(line)
        kept = by[(work, "busy", "defaults")]["tok_s"] / by[(work, "idle", "defaults")]["tok_s"]
        theirs = by[(work, "busy", "llama-bench")]["tok_s"] / by[(work, "idle", "llama-bench")]["tok_s"]
        lines.append(f"- {work} beside one busy process: ours keeps {100 * kept:.0f}% of its idle speed (target at "
                     f"least 40%: {'met' if kept >= 0.4 else 'NOT met'}); llama-bench {100 * theirs:.0f}%")
    return lines
