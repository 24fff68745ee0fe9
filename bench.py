"""Benchmarks, measured on this machine in one run and written to BENCHMARKS.md and benchmarks.json.

    python bench.py                        # every section
    python bench.py --sections generate    # some of them: prepare, generate
    python bench.py --quick                # small sizes, well under a minute

prepare:  tokens/s of prepare.py end to end on a few-MB corpus, next to raw
          tiktoken.encode_ordinary_batch on the same documents.
generate: tokens/s and time to first token of sampling with the KV cache and with full
          recomputation, batch 1 and 8, for 256 and 1024 new tokens.
"""

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

import prepare
from corpus import fetch_source
from model import GPT, GPTConfig
from tokenizer import load_tokenizer


def machine():
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "python": platform.python_version(),
            "torch": torch.__version__, "cpu": platform.processor() or platform.machine(),
            "threads": torch.get_num_threads(),
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}


def bench_prepare(args):
    """prepare.py's throughput on tiny Shakespeare cut into documents and repeated to a few MB."""
    quick = args.quick
    with tempfile.TemporaryDirectory() as tmp:
        text = fetch_source("tinyshakespeare.txt", Path(args.data_dir) / "_sources")[0].read_text()
        paragraphs = text.split("\n\n")
        docs = ["\n\n".join(paragraphs[i:i + 40]) for i in range(0, len(paragraphs), 40)] * (1 if quick else 4)
        corpus = Path(tmp) / "corpus.jsonl"
        corpus.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
        argv = ["--input", str(corpus), "--tokenizer", "gpt2", "--out_dir", tmp, "--quiet", "--force"]
        prepare.prepare(prepare.parse_args(argv))  # warm: fetches and caches the GPT-2 ranks
        rows = []
        for workers in (1, 2):
            start = time.perf_counter()
            meta = prepare.prepare(prepare.parse_args([*argv, "--workers", str(workers)]))
            seconds = time.perf_counter() - start
            tokens = meta["splits"]["train"]["tokens"] + meta["splits"]["val"]["tokens"]
            rows.append({"what": f"prepare.py --workers {workers} (read, split, encode, write)", "tokens": tokens,
                         "seconds": seconds, "tok_s": tokens / seconds})
        enc = load_tokenizer(Path(tmp) / "corpus", meta["tokenizer"])
        start = time.perf_counter()
        raw = sum(len(ids) for ids in enc.encode_ordinary_batch(docs))
        seconds = time.perf_counter() - start
        rows.append({"what": "tiktoken.encode_ordinary_batch alone", "tokens": raw, "seconds": seconds, "tok_s": raw / seconds})
    size = sum(len(d.encode()) for d in docs)
    table = [f"Corpus: tiny Shakespeare in {len(docs)} documents, {size / 1e6:.1f} MB, GPT-2 tokenizer.", "",
             "| what | tokens | seconds | tokens/s |", "|---|---|---|---|"]
    table += [f"| {r['what']} | {r['tokens']:,} | {r['seconds']:.2f} | {r['tok_s']:,.0f} |" for r in rows]
    best = max(r["tok_s"] for r in rows[:-1])
    table += ["", f"prepare.py reaches {best / rows[-1]['tok_s']:.2f}x the raw encoder's rate (target: at least 0.5x)."]
    return rows, table


@torch.no_grad()
def bench_generate(args):
    """Sampling speed of the quick-start model shape (untrained weights: speed does not depend on them)."""
    lengths = (32, 64) if args.quick else (256, 1024)
    config = GPTConfig(vocab_size=1024, n_layer=4, n_head=4, n_embd=160, block_size=max(lengths) + 16, input="binary")
    torch.manual_seed(0)
    model = GPT(config).eval()
    rows = []
    for batch in (1, 8):
        prompt = torch.randint(0, 1024, (batch, 16))
        for new_tokens in lengths:
            for use_cache in (True, False):
                start = time.perf_counter()
                steps = model.generate(prompt, new_tokens, temperature=1.0, use_cache=use_cache)
                next(steps)
                first = time.perf_counter() - start
                for _ in steps:
                    pass
                seconds = time.perf_counter() - start
                rows.append({"batch": batch, "new_tokens": new_tokens, "kv_cache": use_cache, "seconds": seconds,
                             "tok_s": batch * new_tokens / seconds, "first_token_ms": 1000 * first})
    table = [f"Model: the quick-start shape (4 layers, n_embd 160, V = 1,024, binary input), block_size "
             f"{config.block_size}, prompt 16 tokens, fp32.", "",
             "| batch | new tokens | KV cache | tokens/s | first token (ms) | speed-up |", "|---|---|---|---|---|---|"]
    for cached, full in zip(rows[::2], rows[1::2]):
        for r in (cached, full):
            speedup = f"{cached['tok_s'] / full['tok_s']:.1f}x" if r is cached else ""
            table.append(f"| {r['batch']} | {r['new_tokens']} | {'yes' if r['kv_cache'] else 'no'} | "
                         f"{r['tok_s']:,.0f} | {r['first_token_ms']:.1f} | {speedup} |")
    return rows, table


SECTIONS = {"prepare": bench_prepare, "generate": bench_generate}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated: {', '.join(SECTIONS)}")
    p.add_argument("--quick", action="store_true", help="small sizes, to check the script runs")
    p.add_argument("--out", default="BENCHMARKS.md", help="markdown report; the JSON goes beside it")
    p.add_argument("--data_dir", default="data", help="where prepare.py caches downloaded sources")
    args = p.parse_args(argv)
    info = machine()
    command = " ".join(["python bench.py", *(sys.argv[1:] if argv is None else argv)])
    report = ["# Benchmarks", "", f"`{command}` on {info['cpu']} ({info['threads']} threads), GPU: {info['gpu']}, "
              f"torch {info['torch']}, Python {info['python']}, {info['date']}.", ""]
    results = {"machine": info, "command": command}
    for name in args.sections.split(","):
        rows, table = SECTIONS[name](args)
        results[name] = rows
        report += [f"## {name}", "", *table, ""]
        print("\n".join([f"## {name}", *table, ""]), flush=True)
    Path(args.out).write_text("\n".join(report))
    Path(args.out).with_suffix(".json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
