"""experiments/bench.py's `paper` section: the frozen-code paper's system at its own shape.

The paper: "with a ternary BitNet b1.58 body the whole model is a 46 MB file", which "on a laptop
CPU generates 615 to 740 tokens per second in 62 MB of memory, five to six times the speed of the
float model's 8-bit GGUF in llama.cpp at a seventh of the memory". Ours at that shape
(config/frozen_270m_ternary.py: 18 layers x 640, MLP 3,072, 4 heads, V = 262,144, 512-bit codes in
and out), random weights (speed and size do not depend on them):

- the packed file's parts and its size on disk, as tools/export.py writes a trained run;
- decoding at batch 1, a 16-token prompt, 256 new tokens greedy, this machine's threads, each
  model in a fresh process: our runtime (tablefree/run.c) and our torch packed path on the frozen
  code-head ternary model; llama.cpp (llama-cpp-python) on the learned tied model of the same
  shape, float body in Q8_0 and F16 (the paper's comparison), and ternary body in TQ2_0 (its table
  in F16: llama.cpp's best with a ternary body at this V), with our runtime on that same ternary
  model beside it; then the same rows at the ternary section's 8 x 768, V = 1,024.
"""

import importlib.util
import re
import statistics
import subprocess
import tempfile
from dataclasses import asdict, replace
from pathlib import Path
from types import SimpleNamespace

import torch

from experiments.bench_infer import in_fresh_process
from experiments.bench_train import ROOT
from experiments.runs import train_settings
from model import GPT, frozen_dim
from tablefree import runtime
from tablefree.packed import packed_ternary
from tablefree.common import UserError
from tablefree.configurator import model_config
from tablefree.tokenizer import GPT2_PATTERN, save_ranks, tokenizer_state
from tools.gguf import write_gguf

PAPER_CONFIG = ROOT / "config" / "frozen_270m_ternary.py"
PAPER = "the paper's"
SHAPES = {PAPER: {}, "8 x 768": dict(n_layer=8, n_embd=768, n_head=12, vocab_size=1024, block_size=512)}
QUICK = {PAPER: dict(n_layer=2, vocab_size=8192), "8 x 768": dict(n_layer=2, n_embd=256, n_head=4, vocab_size=1024)}
PROMPT = 16  # tokens


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
    ids = ",".join(str(7 * i % 251) for i in range(PROMPT))
    runs = []
    for _ in range(3):
        done = subprocess.run([str(runtime.binary()), str(flat), "--ids", ids, "--max_new_tokens", str(new_tokens),
                               "--temperature", "0", "--print_ids"], capture_output=True, text=True,
                              env={"OMP_NUM_THREADS": str(threads), "PATH": "/usr/bin:/bin"})
        found = re.search(r"([\d.]+) tokens/s; peak RSS ([\d.]+) MB", done.stderr)
        if done.returncode or not found:
            raise RuntimeError(f"the runtime failed on {flat}: {done.stderr.strip()[-300:]}")
        runs.append((float(found[1]), float(found[2]) * 2 ** 20))
    return statistics.median(r[0] for r in runs), max(r[1] for r in runs)


def decode_rows(fields, new_tokens, threads, folder):
    """The decoding rows at one shape (see the module docstring)."""
    rows = []
    for name, model, ckpt in random_models(fields):
        path = Path(folder) / name.replace(", ", "-")
        if model.config.body == "ternary":
            contents = packed_ternary(model, ckpt)
            torch.save(contents, path.with_suffix(".ternary.pt"))
            runtime.write_flat(contents, path.with_suffix(".bin"))
            tok_s, peak = c_probe(path.with_suffix(".bin"), new_tokens, threads)
            rows.append({"engine": "ours, run.c", "model": name, "file": path.with_suffix(".bin").stat().st_size,
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
                gguf = write_gguf(model, ckpt, path.with_suffix(f".{kind}.gguf"), kind)
            except UserError as e:  # TQ2_0's rows are blocks of 256 weights: not n_embd 640
                rows.append({"engine": f"llama.cpp {kind}", "model": name, "refused": str(e).split(";")[0]})
                continue
            rows.append({"engine": f"llama.cpp {kind}", "model": name, "file": gguf.stat().st_size,
                         **in_fresh_process("tools.llamacpp", str(gguf), new_tokens, threads)})
        del model
    return rows


def bench_paper(args):
    """The frozen-code paper's system at its shape and at 8 x 768: the file's parts, then decoding."""
    shapes = QUICK if args.quick else SHAPES
    new_tokens, threads = (32 if args.quick else 256), torch.get_num_threads()
    results, table = {}, []
    with tempfile.TemporaryDirectory() as folder:
        for shape, fields in shapes.items():
            results[shape] = decode_rows(fields, new_tokens, threads, folder)
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
        table += ["", *targets(shape, rows), ""]
    return results, table


def targets(shape, rows):
    """The claims each shape's rows are measured against, each met or not."""
    by = {(r["engine"], r["model"].split(",")[0]): r for r in rows}
    if ("llama.cpp Q8_0", "learned+tied") not in by:
        return ["- llama-cpp-python is not installed: not compared with llama.cpp"]
    ours, q8 = by["ours, run.c", "frozen+codes"], by["llama.cpp Q8_0", "learned+tied"]
    same, tq2 = by["ours, run.c", "learned+tied"], by["llama.cpp TQ2_0", "learned+tied"]
    speed, memory = ours["tok_s"] / q8["tok_s"], ours["peak_rss"] / q8["peak_rss"]
    lines = [f"- the paper's claim, our runtime (frozen code head, ternary) against llama.cpp Q8_0 (learned tied, "
             f"float): {speed:.2f}x the speed (the paper: 5-6x; target at least 5x: {verdict(speed >= 5)}) at "
             f"{memory:.3f}x the peak memory (the paper: a seventh, 0.143x; target at most that: "
             f"{verdict(memory <= 1 / 7)})"]
    if shape == PAPER:
        lines += [f"- its peak RSS: {ours['peak_rss'] / 1e6:.1f} MB (the paper: 62 MB; target at most 80 MB: "
                  f"{verdict(ours['peak_rss'] <= 80e6)}); its file {ours['file'] / 1e6:.1f} MB (target at most 50 MB: "
                  f"{verdict(ours['file'] <= 50e6)})"]
    if "refused" not in tq2:
        speed, memory = same["tok_s"] / tq2["tok_s"], same["peak_rss"] / tq2["peak_rss"]
        lines += [f"- our runtime against llama.cpp TQ2_0 on the same ternary weights (learned tied): {speed:.2f}x the "
                  f"speed (target at least 1.0x: {verdict(speed >= 1)}) at {memory:.2f}x the peak memory (target at "
                  f"most 1.2x: {verdict(memory <= 1.2)})"]
    return lines


def verdict(met):
    return "met" if met else "NOT met"
