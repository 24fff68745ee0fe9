"""experiments/bench.py's `paper` section: the frozen-code paper's system at its own shape.

The paper: "with a ternary BitNet b1.58 body the whole model is a 46 MB file", which "on a laptop
CPU generates 615 to 740 tokens per second in 62 MB of memory, five to six times the speed of the
float model's 8-bit GGUF in llama.cpp at a seventh of the memory". Ours at that shape
(config/frozen_270m_ternary.py: 18 layers x 640, MLP 3,072, 4 heads, V = 262,144, 512-bit codes in
and out), random weights (speed and size do not depend on them), then at 8 x 768, V = 1,024:

- the packed file's parts and its size on disk, as tools/export.py writes a trained run;
- decoding at batch 1, a 16-token prompt, 256 new tokens greedy, this machine's threads, each
  model in a fresh process, the median of 3: our runtime (tablefree/run.c) and our torch packed
  path on the frozen code-head ternary model; llama.cpp through llama-cpp-python on the learned tied
  model of the same shape, float body in Q8_0 and F16 (the paper's comparison), and ternary body in
  TQ2_0, with our runtime on that same ternary model beside it;
- llama.cpp's own benchmark, llama-bench (experiments/engines.py), against our runtime with its
  float32 and float16 KV cache (and a code head's float32 and int16 tables): the engines alternate
  run by run, PAIRS pairs at 1 thread and at all, then all again beside one busy process; medians,
  the per-pair ratio, peak RSS, the bytes a step reads and the bandwidth that makes, against this
  machine's (experiments/bandwidth.py). The issue-56 targets are against these rows.
"""

import importlib.util
import statistics
import tempfile
from dataclasses import asdict, replace
from pathlib import Path
from types import SimpleNamespace

import torch

from experiments import engines
from experiments.bandwidth import read_bandwidth
from experiments.bench_infer import in_fresh_process
from experiments.bench_train import ROOT
from experiments.runs import train_settings
from model import GPT, frozen_dim
from tablefree import runtime
from tablefree.packed import packed_ternary
from tablefree.common import UserError
from tablefree.configurator import model_config
from tablefree.data import tokenizer_state
from tablefree.tokenizer import GPT2_PATTERN, save_ranks
from tools.gguf import write_gguf

PAPER_CONFIG = ROOT / "config" / "frozen_270m_ternary.py"
PAPER = "the paper's"
SHAPES = {PAPER: {}, "8 x 768": dict(n_layer=8, n_embd=768, n_head=12, vocab_size=1024, block_size=512)}
QUICK = {PAPER: dict(n_layer=2, vocab_size=8192), "8 x 768": dict(n_layer=2, n_embd=256, n_head=4, vocab_size=1024)}
PROMPT = engines.PROMPT
PAIRS = 5  # runs of each engine, in turns


def paper_config(fields):
    """PAPER_CONFIG's GPTConfig with fields changed."""
    return replace(model_config(SimpleNamespace(**train_settings([str(PAPER_CONFIG)])), 262144), **fields)


def random_models(fields):
    """(name, model, checkpoint stub) at one shape, one model at a time, random weights: the frozen
    code-head ternary model (random codes fill its placeholders: no source table, no SVD) and the
    learned tied model with a ternary and, where llama.cpp is installed (only it runs that one), a
    float body. The stub's tokenizer is the 256 bytes and 256 pairs (GGUF needs one; the other ids
    stay unused tokens)."""
    config = paper_config(fields)
    with tempfile.TemporaryDirectory() as folder:
        pairs = {b"e" + bytes([b]): 256 + b for b in range(256)}  # llama.cpp wants some merges
        save_ranks({**{bytes([b]): b for b in range(256)}, **pairs}, Path(folder) / "bytes.tiktoken")
        info = {"name": "bpe", "file": "bytes.tiktoken", "pattern": GPT2_PATTERN, "eot_id": config.vocab_size - 1}
        tokenizer = tokenizer_state(info, Path(folder) / "bytes.tiktoken")
    learned = dict(input="learned", head="untied", tie_weights=True, codes_from="")
    for name, changes in (("frozen+codes, ternary", {}), ("learned+tied, ternary", learned),
                          ("learned+tied, float", {**learned, "body": "float"})):
        if changes.get("body") == "float" and not importlib.util.find_spec("llama_cpp"):
            continue  # the float model is only llama.cpp's
        torch.manual_seed(0)
        model = GPT(replace(config, **changes)).eval()
        if model.config.input == "frozen":
            model.wte.packed.random_(0, 256)
        yield name, model, {"model_config": asdict(model.config), "tokenizer": tokenizer}


def file_parts(contents):
    """Bytes of a packed file's tensors by part: [(part, bytes)]."""
    def size(t):
        return t.numel() * t.element_size()
    tensors = contents["model"]
    parts = {"codes (V x D bits, the input's and the head's)": size(tensors["wte.packed"]),
             "body: ternary weights, 2 bits each, and their scales": sum(
                 size(layer["packed"]) + size(layer["gamma"]) for layer in contents["ternary"].values()),
             "code head: projection n_embd x D (float16)": size(tensors["lm_head.proj.weight"]),
             "code head: bias, one per token (float32)": size(tensors["lm_head.bias"])}
    parts["norms and the rest"] = sum(size(t) for t in tensors.values()) + parts["body: ternary weights, 2 bits each, "
                                                                                "and their scales"] - sum(parts.values())
    return list(parts.items())


def c_probe(flat, new_tokens, threads):
    """Our runtime on a flat file in its own process, three times: (median tokens/s, peak RSS bytes)."""
    runs = [engines.ours(flat, threads, new_tokens) for _ in range(3)]
    return statistics.median(r["tok_s"] for r in runs), max(r["peak_rss"] for r in runs)


def decode_rows(fields, new_tokens, threads, folder):
    """The decoding rows at one shape (see the module docstring), and the files they read:
    {model: {"config", "flat" (ternary), "bytes" (a step's, of the flat file), "gguf": {type: path}}}."""
    rows, files = [], {}
    for name, model, ckpt in random_models(fields):
        path, made = Path(folder) / name.replace(", ", "-"), {"config": model.config, "gguf": {}}
        files[name] = made
        if model.config.body == "ternary":
            contents = packed_ternary(model, ckpt)
            torch.save(contents, path.with_suffix(".ternary.pt"))
            made["flat"], made["bytes"] = path.with_suffix(".bin"), engines.our_bytes(contents, model.config)
            runtime.write_flat(contents, made["flat"])
            tok_s, peak = c_probe(made["flat"], new_tokens, threads)
            rows.append({"engine": "ours, run.c", "model": name, "file": made["flat"].stat().st_size,
                         "tok_s": tok_s, "peak_rss": peak})
            if model.config.input == "frozen":
                rows.append({"engine": "ours, torch packed", "model": name, "parts": dict(file_parts(contents)),
                             "file": path.with_suffix(".ternary.pt").stat().st_size,
                             **in_fresh_process("experiments.bench_infer", str(path.with_suffix(".ternary.pt")), "ternary",
                                                 new_tokens)})
        if model.config.input != "learned" or not importlib.util.find_spec("llama_cpp"):
            continue  # llama.cpp cannot hold a code head (tools/hf.py's neox_head), or is not installed
        for kind in (("TQ2_0",) if model.config.body == "ternary" else ("Q8_0", "F16")):
            try:
                made["gguf"][kind] = write_gguf(model, ckpt, path.with_suffix(f".{kind}.gguf"), kind)
            except UserError as e:  # TQ2_0's rows are blocks of 256 weights: not n_embd 640
                rows.append({"engine": f"llama.cpp {kind}", "model": name, "refused": str(e).split(";")[0]})
                continue
            rows.append({"engine": f"llama.cpp {kind}", "model": name, "file": made["gguf"][kind].stat().st_size,
                         **in_fresh_process("tools.llamacpp", str(made["gguf"][kind]), new_tokens, threads)})
        del model
    return rows, files


def contestants(files):
    """(engine, model, variant) of the paired runs: ours with each KV cache (and a code head with each kind of
    table: engines.VARIANTS), llama-bench on each GGUF."""
    return [*(("ours", name, variant) for name, f in files.items() if "flat" in f for variant in engines.VARIANTS
              if f["config"].head == "codes" or "i16" not in variant),
            *(("llama-bench", name, kind) for name, f in files.items() for kind in f["gguf"])]


def paired_rows(files, program, counts, pairs, new_tokens, bandwidth):
    """Ours and llama-bench in turns (see the module docstring): one row per engine, model, variant,
    thread count and load, with the per-pair ratio of each of ours to llama-bench Q8_0 or TQ2_0."""
    runs = {}
    for load, threads in [*(("idle", t) for t in counts), ("busy", counts[-1])]:
        playing = [c for c in contestants(files) if load == "idle" or c[2] != "F16"]  # F16 busy: minutes, no claim
        competitor = engines.busy() if load == "busy" else None
        try:
            for _ in range(pairs):
                for engine, name, variant in playing:
                    f = files[name]
                    runs.setdefault((engine, name, variant, threads, load), []).append(
                        engines.ours(f["flat"], threads, new_tokens, engines.VARIANTS[variant]) if engine == "ours" else
                        engines.llama(program, f["gguf"][variant], threads, new_tokens))
        finally:
            if competitor:
                competitor.kill(), competitor.wait()
    rows = []
    for (engine, name, variant, threads, load), done in runs.items():
        config, f = files[name]["config"], files[name]
        read = (f["bytes"] + engines.kv_bytes(config, PROMPT + new_tokens / 2, engines.cache_bytes(engines.VARIANTS[variant], config))
                if engine == "ours" else engines.gguf_bytes(f["gguf"][variant], config) +
                engines.kv_bytes(config, PROMPT + (new_tokens + 1) / 2, 2))
        tok_s = statistics.median(r["tok_s"] for r in done)
        rows.append({"engine": engine, "model": name, "variant": variant, "threads": threads, "load": load,
                     "file": (f["flat"] if engine == "ours" else f["gguf"][variant]).stat().st_size,
                     "tok_s": tok_s, "runs": [r["tok_s"] for r in done],
                     "prompt_tok_s": statistics.median(r["prompt_tok_s"] for r in done),
                     "threads_used": statistics.mean(r["threads_used"] for r in done),
                     "peak_rss": max(r["peak_rss"] for r in done), "bytes": read, "gb_s": read * tok_s / 1e9,
                     "of_probe": read * tok_s / 1e9 / bandwidth[threads]["gb_s"]})
    for row in rows:  # pair by pair: the frozen model against the float one's Q8_0, our ternary one against TQ2_0
        kind = "TQ2_0" if row["model"] == "learned+tied, ternary" else "Q8_0"
        rival = next((r for r in rows if (r["engine"], r["variant"], r["threads"], r["load"]) ==
                      ("llama-bench", kind, row["threads"], row["load"])), None)
        if row["engine"] == "ours" and rival:
            row["rival"] = f"{rival['variant']}, {rival['model']}"
            row["ratio"] = statistics.median(a / b for a, b in zip(row["runs"], rival["runs"]))
    return rows


def bench_paper(args):
    """The frozen-code paper's system at its shape and at 8 x 768: the file's parts, then decoding."""
    shapes = QUICK if args.quick else SHAPES
    new_tokens, threads = (32 if args.quick else 256), torch.get_num_threads()
    counts, program = sorted({1, threads}), engines.llama_bench()
    bandwidth = {t: read_bandwidth(t, *((64, 1) if args.quick else (1024, 5))) for t in counts}
    results, pairs, table = {}, {}, []
    with tempfile.TemporaryDirectory() as folder:
        for shape, fields in shapes.items():
            results[shape], files = decode_rows(fields, new_tokens, threads, folder)
            if program and any(f["gguf"] for f in files.values()):
                pairs[shape] = paired_rows(files, program, counts, 1 if args.quick else PAIRS, new_tokens, bandwidth)
    c = paper_config(shapes[PAPER])
    frozen = next(r for r in results[PAPER] if r["engine"] == "ours, torch packed")
    table += [f"The paper's shape: {c.n_layer} layers x n_embd {c.n_embd}, MLP {c.mlp_hidden():,}, {c.n_head} heads, "
              f"V = {c.vocab_size:,}, D = {frozen_dim(c)} (`{PAPER_CONFIG.relative_to(ROOT)}`"
              f"{', with ' + str(shapes[PAPER]) if args.quick else ''}); random weights. The packed file of "
              f"the frozen code-head ternary model, as `python -m tools.export` writes a trained run (without a "
              f"tokenizer: a run's file also carries its rank file as text):", "", "| part | MB |", "|---|---|"]
    table += [f"| {part} | {size / 1e6:.2f} |" for part, size in frozen["parts"].items()]
    table += [f"| container (names, config, zip records) | {(frozen['file'] - sum(frozen['parts'].values())) / 1e6:.2f} |",
              f"| **the file** | **{frozen['file'] / 1e6:.2f}** |", "",
              f"A trained run's file adds its tokenizer's rank file, as text: GPT-2's is 835,554 bytes for 50,256 tokens, "
              f"16.6 a token, so about {16.6 * c.vocab_size / 1e6:.1f} MB at V = {c.vocab_size:,} (an estimate: it "
              f"depends on the tokens' lengths).", "",
              f"Decoding: batch 1, a {PROMPT}-token prompt, {new_tokens} new tokens greedy with the KV cache, {threads} "
              f"threads, each model loaded from its file in a fresh process (tokens/s: the median of 3; peak RSS: the "
              f"process's VmHWM). llama.cpp: llama-cpp-python 0.3.36's bundled build, through its Python API (its "
              f"process holds Python too); its tied models store the table twice, as token_embd (F16) and output.", ""]
    for shape, rows in results.items():
        table += [f"{shape} shape:", "", "| engine | model | file (MB) | peak RSS (MB) | tokens/s |", "|---|---|---|---|---|"]
        table += [f"| {r['engine']} | {r['model']} | {r['file'] / 1e6:,.1f} | {r['peak_rss'] / 1e6:,.1f} | "
                  f"{r['tok_s']:,.1f} |" if "refused" not in r else f"| {r['engine']} | {r['model']} | refused: "
                  f"{r['refused']} | | |" for r in rows]
        table.append("")
    table += pairs_table(pairs, bandwidth, new_tokens, 1 if args.quick else PAIRS, program)
    return {"rows": results, "pairs": pairs, "bandwidth": bandwidth}, table


def pairs_table(pairs, bandwidth, new_tokens, n, program):
    """The llama-bench comparison's report: the machine's bandwidth, the rows, the targets."""
    if not program:
        return ["llama-bench is not built here, so the targets (against it) are not measured: "
                "`bash dev/build_llama_bench.sh` builds it (15-20 minutes on 2 cores)."]
    table = [f"Against llama-bench ({program.name}, built from the llama.cpp that llama-cpp-python 0.3.36 vendors by "
             f"`dev/build_llama_bench.sh`): each engine's process run {n} times, in turns with the others (tokens/s and "
             f"prompt tokens/s: medians; the ratio: the median of the pairs' ratios; peak RSS: the largest, from the "
             f"kernel). Ours: a {PROMPT}-token prompt, then {new_tokens} tokens (its decoding rate: the steps after the "
             f"prompt); llama-bench: `pp {PROMPT}` and `tg {new_tokens}`, each after {PROMPT} tokens of context (`-d "
             f"{PROMPT}`), its F16 KV cache. Bytes a "
             f"step reads: the file's tensors it uses and the KV cache at the mean context. This machine's read "
             f"bandwidth (experiments/bandwidth.c, 1 GiB, the best of 5): " +
             ", ".join(f"{b['gb_s']:.1f} GB/s at {t} thread{'s' * (t > 1)}" for t, b in bandwidth.items()) + ".", ""]
    for shape, rows in pairs.items():
        table += [f"{shape} shape:", "", "| load | threads | engine | model | KV cache (, head tables) or type | tokens/s | "
                  "ratio | prompt tokens/s | peak RSS (MB) | MB a step | GB/s | of the bandwidth |", "|---" * 12 + "|"]
        table += [pair_line(r) for r in rows]
        lines = targets(shape, rows)
        table += ["", *lines, *(["- what bounds a target not met: dev/LOG.md's `perf record` profiles of run.c at this "
                                 "shape"] if any("NOT met" in line for line in lines) else []), ""]
    return table


def pair_line(r):
    used = f" ({r['threads_used']:.2f} used)" if r["engine"] == "ours" else ""
    ratio = f"{r['ratio']:.2f}x {r['rival']}" if "ratio" in r else ""
    return (f"| {r['load']} | {r['threads']}{used} | {r['engine']} | {r['model']} | {r['variant']} | {r['tok_s']:,.1f} | "
            f"{ratio} | {r['prompt_tok_s']:,.0f} | {r['peak_rss'] / 1e6:,.1f} | {r['bytes'] / 1e6:,.1f} | "
            f"{r['gb_s']:.1f} | {100 * r['of_probe']:.0f}% |")


def targets(shape, rows):
    """Issue 56's targets at one shape, each met or not, from the paired rows at the most threads."""
    most = max(r["threads"] for r in rows)
    by = {(r["engine"], r["model"].split(",")[0], r["variant"], r["load"]): r for r in rows if r["threads"] == most}
    lines = []
    for variant, flags in engines.VARIANTS.items():
        ours, named = by.get(("ours", "frozen+codes", variant, "idle")), f"`{' '.join(flags) or 'its defaults'}`"
        q8 = by.get(("llama-bench", "learned+tied", "Q8_0", "idle"))
        if ours and q8 and shape == PAPER:
            memory = ours["peak_rss"] / q8["peak_rss"]
            lines.append(f"- the paper's claim, our runtime ({named}) against llama-bench Q8_0 at {most} threads: "
                         f"{ours['ratio']:.2f}x the speed (the paper: 5-6x; target at least 5x: "
                         f"{verdict(ours['ratio'] >= 5)}) at {memory:.3f}x the peak memory (the paper: a seventh; target "
                         f"at most 0.143x: {verdict(memory <= 1 / 7)}); {100 * ours['of_probe']:.0f}% of the machine's "
                         f"bandwidth (target at least 60%: {verdict(ours['of_probe'] >= 0.6)})")
        same, tq2 = by.get(("ours", "learned+tied", variant, "idle")), by.get(("llama-bench", "learned+tied", "TQ2_0", "idle"))
        if same and tq2:
            lines.append(f"- our runtime ({named}) against llama-bench TQ2_0 on the same ternary weights: "
                         f"{same['ratio']:.2f}x the speed (target at least 1.0x: {verdict(same['ratio'] >= 1)})")
        idle, loaded = by.get(("ours", "frozen+codes", variant, "idle")), by.get(("ours", "frozen+codes", variant, "busy"))
        rival = [by.get(("llama-bench", "learned+tied", t, load)) for t in ("Q8_0", "TQ2_0") for load in ("idle", "busy")]
        rival = rival[:2] if rival[0] else rival[2:]
        if idle and loaded and all(rival):
            kept = loaded["tok_s"] / idle["tok_s"]
            lines.append(f"- beside one busy process, ours ({named}) keeps {100 * kept:.0f}% of its idle speed "
                         f"(target at least 40%: {verdict(kept >= 0.4)}); llama-bench {rival[0]['variant']} keeps "
                         f"{100 * rival[1]['tok_s'] / rival[0]['tok_s']:.0f}%")
    ours = by.get(("ours", "frozen+codes", "f32", "idle"))
    if shape == PAPER and ours:
        peak, size = ours["peak_rss"], ours["file"]
        lines.append(f"- its peak RSS: {peak / 1e6:.1f} MB (the paper: 62 MB; target at most 80 MB: {verdict(peak <= 80e6)}); "
                     f"its file {size / 1e6:.1f} MB (the paper: 46 MB; target at most 50 MB: {verdict(size <= 50e6)})")
    return lines


def verdict(met):
    return "met" if met else "NOT met"
