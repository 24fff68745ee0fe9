"""experiments/bench.py's llama section: llama.cpp on our GGUF files beside our own inference.

llama: at the ternary section's shape (8 layers x n_embd 768, V = 1,024, binary input, random
       weights: speed and size do not depend on them), batch 1, a 16-token prompt, 256 new
       tokens greedy with the KV cache, this machine's threads: our float32, bfloat16 and packed
       ternary models (bench_infer.decode_probe) and llama.cpp's F32 and Q8_0 (the float body)
       and TQ2_0 and TQ1_0 (the ternary body), each loaded from its file in a fresh process:
       file size, process memory, tokens/s (median of 3), and the ratios the frozen-code paper's
       claim is about (TQ2_0 against the 8-bit GGUF) and ours against llama.cpp's.
"""

import tempfile
from dataclasses import asdict
from pathlib import Path

import torch

from experiments.bench_infer import DECODE_SHAPE, QUICK_DECODE_SHAPE, bench_ternary, in_fresh_process
from experiments.bench_train import ROOT
from model import GPT, GPTConfig
from tablefree.data import tokenizer_state
from tablefree.tokenizer import GPT2_PATTERN, save_ranks, train_bpe
from tools.gguf import write_gguf

TYPES = {"float": ("F32", "Q8_0"), "ternary": ("TQ2_0", "TQ1_0")}


def bench_tokenizer(vocab_size, folder):
    """A byte-level BPE of vocab_size tokens trained on this repository's docs: a GGUF file
    carries its tokenizer, and random weights need one of the right size."""
    text = "\n".join(p.read_text() for p in sorted((ROOT / "docs").glob("*.md")))
    ranks, eot = train_bpe([text], vocab_size, progress=False)
    save_ranks(ranks, Path(folder) / "bench.tiktoken")
    info = {"name": "bpe", "file": "bench.tiktoken", "pattern": GPT2_PATTERN, "eot_id": eot}
    return tokenizer_state(info, Path(folder) / "bench.tiktoken")


def write_ggufs(fields, folder):
    """The four GGUF files of one shape (weights at random, as bench_infer.write_models draws them)."""
    tokenizer, paths = bench_tokenizer(fields["vocab_size"], folder), {}
    for body, types in TYPES.items():
        torch.manual_seed(0)
        model = GPT(GPTConfig(**fields, body=body)).eval()
        for kind in types:
            paths[kind] = write_gguf(model, {"model_config": asdict(model.config), "tokenizer": tokenizer},
                                     Path(folder) / f"{kind}.gguf", kind)
    return paths


def bench_llama(args):
    """llama.cpp's F32, Q8_0, TQ2_0 and TQ1_0 beside our float32, bfloat16 and packed ternary."""
    fields = {**QUICK_DECODE_SHAPE, "n_embd": 256} if args.quick else DECODE_SHAPE  # TQ2_0's blocks are 256 wide
    new_tokens, threads = (32 if args.quick else 256), torch.get_num_threads()
    ours, _ = bench_ternary(args, fields)
    rows = [{"engine": "ours", **r} for r in ours]
    with tempfile.TemporaryDirectory() as folder:
        for kind, path in write_ggufs(fields, folder).items():
            rows.append({"engine": "llama.cpp", "model": kind, "file": path.stat().st_size,
                         **in_fresh_process("tools.llamacpp", str(path), new_tokens, threads)})
    return rows, llama_table(rows, fields, new_tokens, threads)


def llama_table(rows, fields, new_tokens, threads):
    """bench_llama's report from its measured rows."""
    by = {r["model"]: r for r in rows}
    table = [f"Shape: {fields['n_layer']} layers, n_embd {fields['n_embd']}, V = {fields['vocab_size']:,}, binary input, "
             f"random weights; batch 1, a 16-token prompt, {new_tokens} new tokens greedy with the KV cache, {threads} "
             f"threads, each model loaded from its file in a fresh process. llama.cpp: llama-cpp-python 0.3.36's "
             f"bundled build (GGML_NATIVE), through its Python API; our files: bench_infer's.", "",
             "| engine | model | file (MB) | process RSS after decoding (MB) | process peak RSS (MB) | tokens/s |",
             "|---|---|---|---|---|---|"]
    table += [f"| {r['engine']} | {r['model']} | {r['file'] / 1e6:,.1f} | {r['rss'] / 1e6:,.0f} | {r['peak_rss'] / 1e6:,.0f} | "
              f"{r['tok_s']:,.1f} |" for r in rows]
    ratios = [("llama.cpp TQ2_0 / llama.cpp Q8_0 (the frozen-code paper: 5-6x the speed at a seventh, 0.14x, of the "
               "memory)", by["TQ2_0"], by["Q8_0"], None),
              ("our packed ternary / llama.cpp TQ2_0", by["ternary"], by["TQ2_0"], 0.8),
              ("our float32 / llama.cpp F32", by["float32"], by["F32"], 0.8),
              ("our bfloat16 / llama.cpp F32", by["bfloat16"], by["F32"], 0.8)]
    table += ["", "Ratios (targets on the speed):"]
    for what, a, b, target in ratios:
        speed = a["tok_s"] / b["tok_s"]
        verdict = "" if target is None else f" (target {target}x: {'met' if speed >= target else 'NOT met'})"
        table.append(f"- {what}: {speed:.2f}x the speed{verdict}, {a['peak_rss'] / b['peak_rss']:.2f}x the peak memory")
    return table
