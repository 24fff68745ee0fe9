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
from tablefree.checkpoint import load_checkpoint
from tablefree.packed import inference_model, packed_ternary
from tablefree.ternary import PackedTernaryLinear

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


def linears_alone(model, prompt):
    """Seconds a decoded token spends in the model's Linears (body and head), and their weight
    count: one cached decode step records each Linear's input, then the Linears alone are run
    on those inputs, in order (the median of 5 repeats of 20 passes)."""
    calls = []
    hooks = [m.register_forward_hook(lambda m, args, out: calls.append((m, args[0]))) for m in model.modules()
             if isinstance(m, (torch.nn.Linear, PackedTernaryLinear))]
    cache = model.new_cache()
    with torch.inference_mode():
        model(prompt, cache=cache)
        calls.clear()
        model(prompt[:, -1:], cache=cache)  # one decoded token
        for hook in hooks:
            hook.remove()

        def passes():
            start = time.perf_counter()
            for _ in range(20):
                for module, x in calls:
                    module(x)
            return (time.perf_counter() - start) / 20
        seconds = statistics.median(passes() for _ in range(5))
    weights = sum(m.in_features * m.out_features for m, _ in calls)
    return seconds, weights


def decode_probe(path, dtype, new_tokens):
    """In a fresh process: load a model file as sample.py --kernels does, decode greedily at batch 1 with
    the KV cache (the median of 3 timings), and print JSON: tokens/s, the milliseconds a token
    spends in its Linears and elsewhere, weight bytes, resident memory now and at peak."""
    model = inference_model(load_checkpoint(path), kernels=True).eval()  # as sample.py --kernels
    if dtype == "bfloat16":
        model = model.to(torch.bfloat16)  # computed in bfloat16 throughout
    def size(module):
        return sum(t.numel() * t.element_size() for t in [*module.parameters(), *module.buffers()])
    prompt = torch.randint(0, model.config.vocab_size, (1, 16), generator=torch.Generator().manual_seed(0))
    timed_generation(model, prompt, 8, "cpu", temperature=0)  # warm-up
    seconds = statistics.median(timed_generation(model, prompt, new_tokens, "cpu", temperature=0)[0] for _ in range(3))
    matmul, linear_weights = linears_alone(model, prompt)
    print(json.dumps({"tok_s": new_tokens / seconds, "matmul_ms": 1000 * matmul,
                      "other_ms": 1000 * (seconds / new_tokens - matmul), "weights_per_s": linear_weights / matmul,
                      "weights": size(model), "body_weights": size(model.h), "rss": memory_status("VmRSS"),
                      "peak_rss": memory_status("VmHWM")}))


def in_fresh_process(module, *args):
    """The JSON a module's decode_probe(*args) prints, run in a process of its own (so one model's
    memory cannot hide another's): this one's for our files, tools/llamacpp's for llama.cpp's."""
    done = subprocess.run([sys.executable, "-c", f"from {module} import decode_probe; decode_probe{args!r}"], cwd=ROOT,
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"the {module} probe failed on {args[0]}: {done.stderr.strip()[-300:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_ternary(args, fields=None):
    """Packed ternary vs float32 vs bfloat16 at batch 1 on the CPU (at fields, or the section's shape)."""
    fields = fields or (QUICK_DECODE_SHAPE if args.quick else DECODE_SHAPE)
    new_tokens = 32 if args.quick else 256
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name, path in write_models(fields, folder).items():
            rows.append({"model": name, "file": path.stat().st_size,
                         **in_fresh_process("experiments.bench_infer", str(path), name, new_tokens)})
    return rows, ternary_table(rows, fields, new_tokens, torch.get_num_threads())


def ternary_table(rows, fields, new_tokens, threads):
    """bench_ternary's report from its measured rows (float32, bfloat16, ternary)."""
    body = fields["n_layer"] * 12 * fields["n_embd"] ** 2
    table = [f"Shape: {fields['n_layer']} layers, n_embd {fields['n_embd']}, V = {fields['vocab_size']:,}, binary input: "
             f"{body / 1e6:.1f}M body weights; random weights (speed and size do not depend on them); batch 1, prompt "
             f"16 tokens, {new_tokens} new tokens greedy with the KV cache, {threads} threads. Each model is "
             f"loaded from its file in a fresh process, as sample.py --kernels does. A token's time is split into its "
             f"Linears (body and head, run alone on the inputs one decoded token gave them) and the rest.", "",
             "| model | file (MB) | weights in memory (MB) | of them the body's (MB) | process peak RSS (MB) | tokens/s | "
             "Linears (ms/token) | the rest (ms/token) | Linears' rate (G weights/s) |", "|---|---|---|---|---|---|---|---|---|"]
    table += [f"| {r['model']} | {r['file'] / 1e6:,.1f} | {r['weights'] / 1e6:,.1f} | {r['body_weights'] / 1e6:,.1f} | "
              f"{r['peak_rss'] / 1e6:,.0f} | {r['tok_s']:,.1f} | {r['matmul_ms']:.2f} | {r['other_ms']:.2f} | "
              f"{r['weights_per_s'] / 1e9:.0f} |" for r in rows]
    f32, tern = rows[0], rows[2]
    checks = [("file", f32["file"] / tern["file"], 8, "smaller"), ("tokens/s", tern["tok_s"] / f32["tok_s"], 3, "faster")]
    table += ["", "What bounds the speed: at batch 1 every weight is used once per token. The float bodies (4 and 2 "
              "bytes a weight) do not fit in the CPU's caches, so their Linears stream the weights from memory; the "
              "ternary body, 2 bits a weight in the C kernel's layout, fits in a 32 MB last-level cache, so its Linears "
              "are bound by the kernel's arithmetic. The rest (attention over the cache, norms, GELU, the input code, "
              "and Python's few microseconds for each of about 25 small operations a layer) is the same for all three.",
              "", "Targets (ternary against float32):"]
    table += [f"- {what}: {ratio:.1f}x {word} (target {target}x): {'met' if ratio >= target else 'NOT met'}"
              for what, ratio, target, word in checks]
    table.append(f"- the ternary body in memory: {tern['body_weights'] / 1e6:.1f} MB (target at most 16 MB): "
                 f"{'met' if tern['body_weights'] <= 16e6 else 'NOT met'}")
    return table
