"""Benchmarks, measured on this machine: results/BENCHMARKS.md and BENCHMARKS.json.

    python -m experiments.bench                          # every section, on cuda if there is one, else cpu
    python -m experiments.bench --device cpu             # force a device
    python -m experiments.bench --sections train,memory  # some of them: the report's other sections stay
    python -m experiments.bench --quick                  # small sizes, eager only: well under a minute

Steps run as train.py runs them: fp32 on a CPU, bf16 autocast on a GPU (weights and AdamW
state stay fp32 either way).

train:    ms/step (median of steps the inputs take in turns), tokens/s and MFU of a training step
          (forward, backward, fused AdamW) for every input at the quick-start shape and at the
          papers' width and vocabulary (n_embd 1024, V = 65,536, 2 layers), eager and compiled.
          MFU is against a large matmul measured here in the same dtype, and the vendor's peak.
memory:   peak memory of a training step per input (each in its own process), with 1 and 2
          micro-batches per step, and the saving against the theoretical 16 bytes (fp32
          parameter + gradient + AdamW state) per input parameter fewer than the learned table.
input:    forward + backward time of each input module alone, next to nn.Embedding.
generate, ternary: inference, in experiments/bench_infer.py (the KV cache; the packed ternary model).
llama:    llama.cpp on our GGUF files beside our own inference, in experiments/bench_llama.py.
(train, memory, input and prepare are in experiments/bench_train.py.)
prepare:  tokens/s of prepare.py end to end on a few-MB corpus, next to raw
          tiktoken.encode_ordinary_batch on the same documents.
paper:    the frozen-code paper's system at its shape and at 8 x 768 (experiments/bench_paper.py):
          the packed file's parts; our runtime (run.c), our torch path and (if installed) llama.cpp.
lengths:  run.c against llama-bench at the paper's shape at every length: a 512-token prompt, decoding
          after 16, 512 and 960 tokens, idle and beside a busy process (experiments/bench_lengths.py).
reference: tablefree/reference.c beside run.c, one of run.c's techniques added a row
          (experiments/bench_reference.py).
"""

from tablefree.common import interrupt_quietly
interrupt_quietly(__name__, "bench.py")  # is one line, not a traceback

import importlib.util
import json
import sys

from tqdm import tqdm

from experiments.bench_infer import bench_generate, bench_ternary
from experiments.bench_llama import bench_llama
from experiments.bench_lengths import bench_lengths
from experiments.bench_paper import bench_paper
from experiments.bench_reference import bench_reference
from experiments.bench_train import bench_input, bench_memory, bench_prepare, bench_train
from tablefree.common import ArgumentParser, UserError, pick_device, pick_dtype, require, user_errors
from tablefree.reports import check_report, json_report, markdown, markdown_body, write_together
from tablefree.device import machine, measured_on

COMMAND = "python -m experiments.bench"  # the mark its reports carry (common.mark)
SECTIONS = {"train": bench_train, "memory": bench_memory, "input": bench_input, "generate": bench_generate,
            "ternary": bench_ternary, "llama": bench_llama, "prepare": bench_prepare, "paper": bench_paper,
            "lengths": bench_lengths, "reference": bench_reference}


def parse_args(argv):
    p = ArgumentParser(prog="python -m experiments.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="auto", help="cpu or cuda (auto: cuda if there is one)")
    have_llama = importlib.util.find_spec("llama_cpp") is not None
    p.add_argument("--sections", default=",".join(s for s in SECTIONS if have_llama or s != "llama"),
                   help=f"comma-separated: {', '.join(SECTIONS)} (default: all; llama if llama-cpp-python is installed)")
    p.add_argument("--quick", action="store_true", help="small sizes, to check the script runs")
    p.add_argument("--out", default="results/BENCHMARKS.md", help="markdown report; the JSON goes beside it")
    p.add_argument("--force", action="store_true", help="replace --out (and its JSON) even where changed since this "
                   "command wrote them")
    p.add_argument("--data_dir", default="data", help="where prepare.py caches downloaded sources")
    args = p.parse_args(argv)
    require(set(args.sections.split(",")) <= set(SECTIONS), "--sections", args.sections,
            f"a comma-separated list of {', '.join(SECTIONS)}")
    if "llama" in args.sections.split(",") and not have_llama:
        raise UserError("the llama section needs llama-cpp-python: pip install -r requirements-extras.txt, or leave "
                        "llama out of --sections")
    args.device = pick_device(args.device)
    args.dtype_name, args.dtype, args.autocast = pick_dtype("auto", args.device)
    return args


def main(argv=None):
    with user_errors("bench.py"):
        args = parse_args(argv)
        md = check_report(args.out, "--out", COMMAND, args.force)  # before the sections, not after them
        js = check_report(md.with_suffix(".json"), "--out", COMMAND, args.force)
        sections, results = earlier_report(md, js)
    command = " ".join([COMMAND, *(sys.argv[1:] if argv is None else argv)])
    bar = tqdm(args.sections.split(","), desc="bench", unit="section", file=sys.stderr, disable=None)
    for name in bar:
        bar.set_postfix_str(name)
        results[name], table = SECTIONS[name](args)
        info = machine()  # its date: when this section finished
        measured = f"{measured_on(command, info)} Device {args.device}, Python {info['python']}."
        results["measured"][name] = {"command": command, "machine": {**info, "device": args.device}}
        sections[name] = ["", measured, "", *table, ""]
        bar.write("\n".join([f"## {name}", *table, ""]))
    order = [*SECTIONS, *(name for name in sections if name not in SECTIONS)]
    report = [*HEADER, *(line for name in order if name in sections for line in (f"## {name}", *sections[name]))]
    with user_errors("bench.py"):
        write_together({md: markdown(COMMAND, "\n".join(report)), js: json_report(COMMAND, results)})


HEADER = ["# Benchmarks", "", "Each section names the command, machine and date that measured it; `python -m experiments.bench "
          "--sections NAME` measures one again and keeps the others.", ""]


def earlier_report(md, js):
    """({section: its lines}, results) of an earlier report at md and js (check_report found them
    ours: the first line is the mark, the last the digest), which a run extends: the sections it does
    not measure stay."""
    earlier = markdown_body(md.read_text()) if md.exists() else HEADER
    sections, name = {}, None
    for line in earlier:
        if line.startswith("## "):
            name = line[3:]
            sections[name] = []
        elif name:
            sections[name].append(line)
    try:
        results = json.loads(js.read_text()) if js.exists() else {}
    except ValueError:
        raise UserError(f"{js} is not the JSON this benchmark writes; move it away, or give --out another file") from None
    results.pop("written_by", None)
    results.pop("digest", None)
    return sections, {**results, "measured": results.get("measured", {})}


if __name__ == "__main__":
    main()
