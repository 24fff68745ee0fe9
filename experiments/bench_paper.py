"""experiments/bench.py's `paper` section: the frozen-code paper's system at its own shape.

The paper: "with a ternary BitNet b1.58 body the whole model is a 46 MB file". Ours at that shape
(config/frozen_270m_ternary.py: 18 layers x 640, V = 262,144, 512-bit codes in and out), with
random weights (a file's size does not depend on them), exported as tools/export.py writes a
trained run: the parts of the file, and its size on disk.
"""

import tempfile
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import torch

from experiments.runs import ROOT, train_settings
from model import GPT
from tablefree.checkpoint import packed_ternary
from tablefree.configurator import model_config

PAPER_CONFIG = ROOT / "config" / "frozen_270m_ternary.py"
QUICK = ["--n_layer=2", "--vocab_size=8192"]  # --quick: the paper's widths, 2 layers and V = 8,192


def random_model(argv):
    """The frozen code-head model of PAPER_CONFIG (+ argv) with random weights and random codes
    (placeholders filled, so no source table and no SVD are needed), and its checkpoint stub."""
    s = SimpleNamespace(**train_settings([str(PAPER_CONFIG), *argv]))
    config = model_config(s, s.vocab_size)
    torch.manual_seed(0)
    model = GPT(config)  # frozen with no source: placeholder codes, filled below
    model.wte.packed.random_(0, 256)
    return model.eval(), {"model_config": asdict(config), "tokenizer": {"info": {}, "ranks": ""}}


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


def bench_paper(args):
    """The packed file of the paper's frozen ternary system: its parts and its size."""
    model, ckpt = random_model(QUICK if args.quick else [])
    contents = packed_ternary(model, ckpt)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.ternary.pt"
        torch.save(contents, path)
        file_bytes = path.stat().st_size
    parts = file_parts(contents)
    c = model.config
    table = [f"Shape: {c.n_layer} layers x n_embd {c.n_embd}, MLP {c.mlp_hidden():,}, {c.n_head} heads, V = "
             f"{c.vocab_size:,}, input frozen with D = {model.lm_head.dim} bits and the code head, ternary body "
             f"(`{PAPER_CONFIG.relative_to(ROOT)}`{' with ' + ' '.join(QUICK) if args.quick else ''}); random weights, "
             f"exported as `python -m tools.export` writes a trained run (without a tokenizer: a run's file also "
             f"carries its rank file as text).", "", "| part | MB |", "|---|---|"]
    table += [f"| {part} | {size / 1e6:.2f} |" for part, size in parts]
    table += [f"| container (names, config, zip records) | {(file_bytes - sum(s for _, s in parts)) / 1e6:.2f} |",
              f"| **the file** | **{file_bytes / 1e6:.2f}** |", "",
              f"Target (the paper: 46 MB): at most 50 MB: {'met' if file_bytes <= 50e6 else 'NOT met'}. A trained "
              f"run's file adds its tokenizer's rank file, as text: GPT-2's is 835,554 bytes for 50,256 tokens, 16.6 "
              f"a token, so about {16.6 * c.vocab_size / 1e6:.1f} MB at V = {c.vocab_size:,} (an estimate: it depends "
              f"on the tokens' lengths), {(file_bytes + 16.6 * c.vocab_size) / 1e6:.1f} MB in all."]
    return {"parts": dict(parts), "file": file_bytes}, table
