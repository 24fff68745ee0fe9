"""experiments/bench.py's inference sections.

generate: tokens/s and time to first token of sampling with the KV cache and with full
          recomputation, batch 1 and 8, for 256 and 1024 new tokens.
ternary:  the packed ternary model (tools/export.py, integer matmuls) against the same shape in
          float32 and in bfloat16, at batch 1: file size, resident memory of the process and of
          the weights, and tokens/s for 256 new tokens (median of 3), each model loaded from its
          file in a fresh process (so one's memory cannot hide another's).
"""

import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch

from experiments.bench_train import ROOT, memory_status, sync
from model import GPT, GPTConfig
from tablefree.checkpoint import build_model, load_checkpoint, packed_ternary

# decoding is memory-bound here: a 56.6M-weight body (8 x 12 x 768^2) read once per token
DECODE_SHAPE = dict(vocab_size=1024, n_layer=8, n_head=12, n_embd=768, block_size=512, input="binary")
QUICK_DECODE_SHAPE = dict(vocab_size=1024, n_layer=2, n_head=4, n_embd=128, block_size=512, input="binary")


def timed_generation(model, prompt, new_tokens, device, **kw):
    """(seconds in all, seconds to the first token) of generating new_tokens after prompt."""
    start = time.perf_counter()
    steps = model.generate(prompt, new_tokens, **kw)
    next(steps)
    sync(device)
    first = time.perf_counter() - start
    for _ in steps:
        pass
    sync(device)
    return time.perf_counter() - start, first


def bench_generate(args):
    """Sampling speed of the quick-start model shape (untrained weights: speed does not depend on them)."""
    lengths = (32, 64) if args.quick else (256, 1024)
    config = GPTConfig(vocab_size=1024, n_layer=4, n_head=4, n_embd=160, block_size=max(lengths) + 16, input="binary")
    torch.manual_seed(0)
    model = GPT(config).to(args.device).eval()
    rows = []
    for batch in (1, 8):
        prompt = torch.randint(0, 1024, (batch, 16), device=args.device)
        for new_tokens in lengths:
            for use_cache in (True, False):
                with args.autocast:
                    seconds, first = timed_generation(model, prompt, new_tokens, args.device, temperature=1.0,
                                                      use_cache=use_cache)
                rows.append({"batch": batch, "new_tokens": new_tokens, "kv_cache": use_cache, "seconds": seconds,
                             "tok_s": batch * new_tokens / seconds, "first_token_ms": 1000 * first})
    table = [f"Model: the quick-start shape (4 layers, n_embd 160, V = 1,024, binary input), block_size "
             f"{config.block_size}, prompt 16 tokens, {args.dtype_name}.", "",
             "| batch | new tokens | KV cache | tokens/s | first token (ms) | speed-up |", "|---|---|---|---|---|---|"]
    for cached, full in zip(rows[::2], rows[1::2]):
        for r in (cached, full):
            speedup = f"{cached['tok_s'] / full['tok_s']:.1f}x" if r is cached else ""
            table.append(f"| {r['batch']} | {r['new_tokens']} | {'yes' if r['kv_cache'] else 'no'} | "
                         f"{r['tok_s']:,.0f} | {r['first_token_ms']:.1f} | {speedup} |")
    longest = [c["tok_s"] / f["tok_s"] for c, f in zip(rows[::2], rows[1::2]) if c["new_tokens"] == max(lengths)]
    table += ["", "Target:", f"- KV cache at {max(lengths)} new tokens: {min(longest):.1f}x faster than recomputation "
              f"at worst (target 5x): {'met' if min(longest) >= 5 else 'NOT met'}"]
    return rows, table


def write_models(fields, folder):
    """The three files of one shape, weights drawn at random (speed and size do not depend on
    them): a float32 and a bfloat16 model (weights, config, no optimizer) and a packed ternary
    export of a body='ternary' model. Returns {name: path}."""
    torch.manual_seed(0)
    config = GPTConfig(**fields)
    weights = GPT(config).state_dict()
    files = {"float32": weights, "bfloat16": {k: v.bfloat16() if v.is_floating_point() else v for k, v in weights.items()}}
    paths = {}
    for name, state in files.items():
        paths[name] = Path(folder) / f"{name}.pt"
        torch.save({"model": state, "model_config": asdict(config), "tokenizer": {}}, paths[name])
    ternary = GPTConfig(**fields, body="ternary")
    paths["ternary"] = Path(folder) / "ternary.pt"
    torch.save(packed_ternary(GPT(ternary), {"model_config": asdict(ternary), "tokenizer": {}}), paths["ternary"])
    return paths


def decode_probe(path, dtype, new_tokens):
    """In a fresh process: load a model file as sample.py does, decode greedily at batch 1 with
    the KV cache (the median of 3 timings), and print JSON: tokens/s, weight bytes, resident
    memory now and at peak."""
    model = build_model(load_checkpoint(path)).eval()
    if dtype == "bfloat16":
        model = model.to(torch.bfloat16)  # computed in bfloat16 throughout
    weights = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    prompt = torch.randint(0, model.config.vocab_size, (1, 16), generator=torch.Generator().manual_seed(0))
    timed_generation(model, prompt, 8, "cpu", temperature=0)  # warm-up
    seconds = statistics.median(timed_generation(model, prompt, new_tokens, "cpu", temperature=0)[0] for _ in range(3))
    print(json.dumps({"tok_s": new_tokens / seconds, "weights": weights, "rss": memory_status("VmRSS"),
                      "peak_rss": memory_status("VmHWM")}))


def bench_ternary(args, fields=None):
    """Packed ternary vs float32 vs bfloat16 at batch 1 on the CPU (at fields, or the section's shape)."""
    fields = fields or (QUICK_DECODE_SHAPE if args.quick else DECODE_SHAPE)
    new_tokens = 32 if args.quick else 256
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name, path in write_models(fields, folder).items():
            probe = subprocess.run([sys.executable, "-c", f"from experiments.bench_infer import decode_probe; decode_probe("
                                    f"{str(path)!r}, {name!r}, {new_tokens})"], cwd=ROOT, capture_output=True, text=True)
            if probe.returncode:
                raise RuntimeError(f"the decode probe for {name} failed: {probe.stderr.strip()[-300:]}")
            rows.append({"model": name, "file": path.stat().st_size, **json.loads(probe.stdout.strip().splitlines()[-1])})
    return rows, ternary_table(rows, fields, new_tokens, torch.get_num_threads())


def ternary_table(rows, fields, new_tokens, threads):
    """bench_ternary's report from its measured rows (float32, bfloat16, ternary)."""
    body = fields["n_layer"] * 12 * fields["n_embd"] ** 2
    table = [f"Shape: {fields['n_layer']} layers, n_embd {fields['n_embd']}, V = {fields['vocab_size']:,}, binary input: "
             f"{body / 1e6:.1f}M body weights; random weights (speed and size do not depend on them); batch 1, prompt "
             f"16 tokens, {new_tokens} new tokens greedy with the KV cache, {threads} threads. Each "
             f"model is loaded from its file in a fresh process, as sample.py does.", "",
             "| model | file (MB) | weights in memory (MB) | process RSS after decoding (MB) | process peak RSS (MB) | "
             "tokens/s | weights read (GB/s) |", "|---|---|---|---|---|---|---|"]
    table += [f"| {r['model']} | {r['file'] / 1e6:,.1f} | {r['weights'] / 1e6:,.1f} | {r['rss'] / 1e6:,.0f} | "
              f"{r['peak_rss'] / 1e6:,.0f} | {r['tok_s']:,.1f} | {r['weights'] * r['tok_s'] / 1e9:.1f} |" for r in rows]
    f32, tern = rows[0], rows[2]
    checks = [("file", f32["file"] / tern["file"], 8, "smaller"), ("weights", f32["weights"] / tern["weights"], 3, "smaller"),
              ("tok_s", tern["tok_s"] / f32["tok_s"], 1.5, "faster")]
    table += ["", "What bounds the speed: at batch 1 every weight is read once per token (weights read = weights in "
              "memory x tokens/s, an upper bound on the bytes moved), so float32 decoding is bound by memory bandwidth; "
              "the ternary model holds a quarter of the bytes (int8 in memory) and is bound by torch._int_mm's int8 "
              "kernel at one row, whose speed differs much between CPUs of the same kind (compare only ratios "
              "measured in one run), and by the small operations that quantise each layer's activations; the "
              "attention, norms and head cost the same in all three.", "", "Targets (ternary against float32):"]
    table += [f"- {what}: {ratio:.1f}x {word} (target {target}x): {'met' if ratio >= target else 'NOT met'}"
              for what, ratio, target, word in checks]
    return table
