"""experiments/bench.py's training-side sections (step time and MFU, memory, the input layers
alone, data preparation; described in bench.py) and the clock and memory readings every section
uses. The memory probes and prepare.py run as their own processes, so no measurement holds
another's memory or start-up."""

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from model import GPT, INPUTS, GPTConfig, make_input, param_counts
from tablefree.corpus import fetch_source
from tablefree.cost import flops_per_token
from tablefree.common import pick_dtype
from tablefree.device import peak_flops_of
from tablefree.tokenizer import load_tokenizer

ROOT = Path(__file__).resolve().parents[1]  # the checkout: prepare.py, and the probes' working folder


def sync(device):
    """Wait for queued GPU work, so a clock read after it measures the work, not its launch."""
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def memory_status(key="VmHWM"):
    """This process's resident memory in bytes from /proc: VmHWM the peak, VmRSS now. (Linux's
    VmHWM belongs to the process image; getrusage's ru_maxrss would also count the parent's
    peak, which survives fork + exec.) Elsewhere, the peak from getrusage."""
    status = Path("/proc/self/status")
    if status.exists():
        line = next(l for l in status.read_text().splitlines() if l.startswith(f"{key}:"))
        return int(line.split()[1]) * 1024  # kB
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # macOS reports bytes


def bench_prepare(args):
    """prepare.py's throughput on tiny Shakespeare cut into documents and repeated to a few MB."""
    quick = args.quick
    with tempfile.TemporaryDirectory() as tmp:
        text = fetch_source("tinyshakespeare.txt", Path(args.data_dir) / "_sources")[0].read_text()
        paragraphs = text.split("\n\n")
        docs = ["\n\n".join(paragraphs[i:i + 40]) for i in range(0, len(paragraphs), 40)] * (1 if quick else 4)
        corpus = Path(tmp) / "corpus.jsonl"
        corpus.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
        prepare = [sys.executable, str(ROOT / "prepare.py"), "--input", str(corpus), "--tokenizer", "gpt2",
                   "--out_dir", tmp, "--quiet", "--force"]
        subprocess.run(prepare, check=True, stdout=subprocess.DEVNULL)  # warm: fetches and caches the GPT-2 ranks
        rows = []
        for workers in (1, 2):
            subprocess.run([*prepare, "--workers", str(workers)], check=True, stdout=subprocess.DEVNULL)
            meta = json.loads((Path(tmp) / "corpus" / "meta.json").read_text())
            seconds = meta["seconds"]  # timed inside prepare.py: its work, not the interpreter's start-up
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


SHAPES = {  # (GPTConfig fields, batch size); --quick shrinks the second
    "quick-start": (dict(vocab_size=1024, n_layer=4, n_head=4, n_embd=160, block_size=128), 16),
    "papers' width": (dict(vocab_size=65536, n_layer=2, n_head=16, n_embd=1024, block_size=256), 4),
}
QUICK_WIDTH = (dict(vocab_size=8192, n_layer=1, n_head=4, n_embd=256, block_size=64), 2)


def shapes(quick):
    return {**SHAPES, "papers' width": QUICK_WIDTH} if quick else SHAPES


def matmul_peak(args):
    """FLOP/s of a large square matmul on this device in the training dtype: the practical ceiling for MFU.

    The best of five timings: on a shared machine a slow spell can only lower a timing, and a
    ceiling measured low would overstate MFU."""
    n = 512 if args.quick else 2048 if args.device == "cpu" else 8192
    a, b = (torch.randn(n, n, device=args.device, dtype=args.dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    reps, best = (2 if args.quick else 10), 0.0
    for _ in range(5):
        sync(args.device)
        start = time.perf_counter()
        for _ in range(reps):
            a @ b
        sync(args.device)
        best = max(best, 2 * n ** 3 * reps / (time.perf_counter() - start))
    return best, n


def training_step(model, optimizer, batches, autocast):
    """One optimizer step as train.py takes it: the loss of each micro-batch (x, y) scaled and backpropagated."""
    for x, y in batches:
        with autocast:
            _, loss = model(x, y)
        (loss / len(batches)).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def time_steps(runs, batches, steps, args):
    """{kind: (median seconds per step, their spread, warm-up seconds)} for runs = {kind: (model, optimizer)}.

    Two warm-up steps each (they include any compilation). Then the runs take turns, one step
    each, so a slow spell of the machine (another process, a clock change) lands on every input
    alike instead of on whichever was being timed; a profile of this CPU showed the same 27
    matmuls of a step varying by 10% from step to step. The median of each run's steps is its figure."""
    warmup = {}
    for name, (model, optimizer) in runs.items():
        start = time.perf_counter()
        for _ in range(2):
            training_step(model, optimizer, batches, args.autocast)
        sync(args.device)
        warmup[name] = time.perf_counter() - start
    times = {name: [] for name in runs}
    for _ in range(steps):
        for name, (model, optimizer) in runs.items():
            start = time.perf_counter()
            training_step(model, optimizer, batches, args.autocast)
            sync(args.device)
            times[name].append(time.perf_counter() - start)
    return {name: (statistics.median(t), spread(t), warmup[name]) for name, t in times.items()}


def spread(times):
    """Interquartile range over median: how much a step's time wanders on this machine."""
    q1, _, q3 = statistics.quantiles(times, n=4)
    return (q3 - q1) / statistics.median(times)


def synthetic_vocab(vocab_size):
    """V distinct byte strings of 3 to 11 bytes (7 on average): 'kronecker' needs a vocabulary's
    bytes, and its speed depends on their lengths, not on which bytes they are."""
    rng = random.Random(0)
    return [t.to_bytes(3, "little") + bytes(rng.randrange(256) for _ in range(rng.randrange(9)))
            for t in range(vocab_size)]


def config_of(kind, fields):
    """Each input's GPTConfig at a bench shape. 'frozen' is built with no source table: its codes
    stay zero-filled placeholders of their trained size (V x D / 8 bytes), as fast as derived
    ones, so no SVD of a V x n_embd table runs inside a timing or a memory peak."""
    return GPTConfig(input=kind, **fields, codes_from="(placeholder codes)" if kind == "frozen" else "")


def new_model(kind, fields, args):
    """A seeded model at a bench shape on the bench device, and its optimizer as train.py builds it."""
    torch.manual_seed(0)
    model = GPT(config_of(kind, fields), synthetic_vocab(fields["vocab_size"])).to(args.device)
    return model, model.configure_optimizers(0.1, 1e-4, (0.9, 0.95), args.device.split(":")[0])


def bench_train(args):
    """Training-step speed of every input at each shape, eager and compiled."""
    (peak, n), vendor, rows = matmul_peak(args), peak_flops_of(args.device.split(":")[0], 0.0), []
    for shape, (fields, batch) in shapes(args.quick).items():
        seeded = torch.Generator().manual_seed(0)
        x = torch.randint(0, fields["vocab_size"], (batch, fields["block_size"]), generator=seeded).to(args.device)
        for compiled in (False,) if args.quick else (False, True):  # compiling takes ~30 s a model on a CPU
            raws, runs = {}, {}
            torch._dynamo.reset()  # a fresh compile cache per round: dynamo keeps at most 8 graphs per function
            for kind in INPUTS:
                raws[kind], optimizer = new_model(kind, fields, args)
                runs[kind] = (torch.compile(raws[kind]) if compiled else raws[kind], optimizer)
            timed = time_steps(runs, [(x, x)], 2 if args.quick else 15, args)
            for kind, raw in raws.items():
                seconds, wander, warmup = timed[kind]
                flops = flops_per_token(raw) * x.numel() / seconds
                rows.append({"shape": shape, "input": kind, "compiled": compiled, "ms": 1000 * seconds, "spread": wander,
                             "tok_s": x.numel() / seconds, "flops": flops, "mfu_vendor": flops / vendor if vendor else None,
                             "warmup_s": warmup, "trainable": param_counts(raw)["trainable"]})
    peak = max(peak, matmul_peak(args)[0])  # measured again after the steps: the faster of the two is the ceiling
    for r in rows:
        r["mfu"] = r["flops"] / peak
    vendor_note = f" Vendor peak: {vendor / 1e12:.0f} TFLOP/s (bf16 dense)." if vendor else ""
    table = [f"Measured matmul peak: {peak / 1e9:,.0f} GFLOP/s ({args.dtype_name}, {n}^3, best of 10 timings before and after "
             f"the steps).{vendor_note} Steps are "
             f"forward + backward + fused AdamW, {args.dtype_name}, batch x block_size tokens; the inputs take turns, "
             f"one step each; ms/step is the median of its timed steps and spread their interquartile range over "
             f"that median (how much this machine wanders).", "",
             "| shape | input | compiled | trainable params | ms/step | spread | tokens/s | MFU | first 2 steps (s) |",
             "|---|---|---|---|---|---|---|---|---|"]
    table += [f"| {r['shape']} | {r['input']} | {'yes' if r['compiled'] else 'no'} | {r['trainable']:,} | {r['ms']:.1f} | "
              f"{100 * r['spread']:.0f}% | "
              f"{r['tok_s']:,.0f} | {100 * r['mfu']:.1f}%" + (f" ({100 * r['mfu_vendor']:.1f}% of vendor)" if vendor else "")
              + f" | {r['warmup_s']:.1f} |" for r in rows]
    table += ["", "Targets:"]
    for shape in shapes(args.quick):
        for compiled in sorted({r["compiled"] for r in rows}):
            same = {r["input"]: r for r in rows if r["shape"] == shape and r["compiled"] == compiled}
            learned = same["learned"]
            for kind in ("binary", "affine", "kronecker"):
                r = same[kind]
                limit = 1.01 if kind == "kronecker" else 1.0  # the Kronecker paper: 0.01-0.24% step-time overhead
                met = "met" if r["ms"] <= limit * learned["ms"] else "NOT met"
                target = ("no slower, " if kind != "kronecker" else "overhead at most 1%, ") + met
                table.append(f"- {shape}, {'compiled' if compiled else 'eager'}: {kind} {r['ms']:.1f} ms vs learned "
                             f"{learned['ms']:.1f} ms ({r['ms'] / learned['ms']:.2f}x; spreads {100 * r['spread']:.0f}% and "
                             f"{100 * learned['spread']:.0f}%): {target}")
    best = max(r["mfu"] for r in rows if r["shape"] == "papers' width")
    table.append(f"- papers' width: best MFU {100 * best:.1f}% of the measured matmul peak (target 40%): "
                 f"{'met' if best >= 0.4 else 'NOT met'}")
    quick_mfu = max(r["mfu"] for r in rows if r["shape"] == "quick-start")
    table.append(f"- quick-start shape: best MFU {100 * quick_mfu:.1f}% (stated, no target)")
    return rows, table


def memory_probe(kind, micro_batches, quick, device):
    """Run three training steps at the papers' width; print peak memory and exact state bytes as JSON."""
    args = argparse.Namespace(device=device, autocast=pick_dtype("auto", device)[2])
    fields, batch = shapes(quick)["papers' width"]
    model, optimizer = new_model(kind, fields, args)
    x = torch.randint(0, fields["vocab_size"], (batch, fields["block_size"]), device=device)
    for _ in range(3):
        training_step(model, optimizer, [(x, x)] * micro_batches, args.autocast)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    state = sum(s[k].numel() * s[k].element_size() for s in optimizer.state.values() for k in ("exp_avg", "exp_avg_sq"))
    peak = torch.cuda.max_memory_allocated(device) if device.startswith("cuda") else memory_status("VmHWM")
    print(json.dumps({"peak": peak, "params": params, "grads": params, "adam": state}))


def bench_memory(args):
    """Each input in a fresh process, so one's peak cannot hide another's (~4 GB each at the papers' width).

    With one micro-batch per step the table's gradient is created at the very end of backward,
    after the activations are freed, so it is not part of the peak (zero_grad(set_to_none=True)
    drops it before the next forward). With two or more (train.py's default: 32 micro-batches
    over 8 ranks) the gradient accumulated so far is held through the next forward and backward,
    so the table, its gradient and its AdamW state all sit at the peak."""
    fields, _ = shapes(args.quick)["papers' width"]
    rows = []
    for micro_batches in (1, 2):  # the inputs' probes run at once: each reads only its own peak
        probes = [subprocess.Popen([sys.executable, "-c", f"from experiments.bench_train import memory_probe; memory_probe("
                                    f"{kind!r}, {micro_batches}, {args.quick}, {args.device!r})"], cwd=ROOT,
                                   stdout=subprocess.PIPE, text=True) for kind in INPUTS]
        for kind, probe in zip(INPUTS, probes):
            out, _ = probe.communicate()
            if probe.returncode:
                raise RuntimeError(f"the memory probe for {kind} failed (exit code {probe.returncode})")
            rows.append({"input": kind, "micro_batches": micro_batches, **json.loads(out.strip().splitlines()[-1])})
    theory = fields["vocab_size"] * fields["n_embd"] * (4 + 4 + 8)  # the table, its gradient and AdamW state
    what = "peak allocated CUDA memory" if args.device.startswith("cuda") else "peak RSS"
    table = [f"Papers' width ({fields['n_layer']} layers, n_embd {fields['n_embd']}, V = {fields['vocab_size']:,}), "
             f"{args.dtype_name}, after 3 training steps; peak is the process's {what}.", "",
             "| micro-batches per step | input | peak (MB) | parameters (MB) | gradients (MB) | AdamW state (MB) |",
             "|---|---|---|---|---|---|"]
    table += [f"| {r['micro_batches']} | {r['input']} | {r['peak'] / 1e6:,.0f} | {r['params'] / 1e6:,.0f} | "
              f"{r['grads'] / 1e6:,.0f} | {r['adam'] / 1e6:,.0f} |" for r in rows]
    table += ["", f"Theoretical saving of a table: V x n_embd x (4 + 4 + 8) bytes = {theory / 1e6:,.0f} MB; of the "
              f"Kronecker input, which keeps a D x n_embd projection: (V - D) x n_embd x 16 bytes.", "", "Targets:"]
    for micro_batches in (1, 2):
        same = {r["input"]: r for r in rows if r["micro_batches"] == micro_batches}
        for kind, r in same.items():
            if kind == "learned":
                continue
            expected = 4 * (same["learned"]["params"] - r["params"])  # parameter bytes x (1 + 1 + 2)
            saving = same["learned"]["peak"] - r["peak"]
            table.append(f"- {micro_batches} micro-batch(es), {kind}: peak {saving / 1e6:,.0f} MB lower = "
                         f"{100 * saving / expected:.0f}% of the theoretical {expected / 1e6:,.0f} MB (target 90%): "
                         f"{'met' if saving >= 0.9 * expected else 'NOT met'}")
    return rows, table


def bench_input(args):
    """Forward (+ backward where there are parameters) of the input module alone, papers' width."""
    fields, _ = shapes(args.quick)["papers' width"]
    idx = torch.randint(0, fields["vocab_size"], (16, fields["block_size"]), device=args.device)
    reps, rows = (3 if args.quick else 20), []
    for kind in INPUTS:
        module = make_input(config_of(kind, fields), synthetic_vocab(fields["vocab_size"])).to(args.device)

        def call():
            out = module(idx)  # (16, T, n_embd)
            if out.requires_grad:  # the learned table and the Kronecker projection have a backward
                out.sum().backward()

        for _ in range(2):  # warm-up
            call()
        sync(args.device)
        start = time.perf_counter()
        for _ in range(reps):
            call()
        sync(args.device)
        rows.append({"input": kind, "ms": 1000 * (time.perf_counter() - start) / reps})
    table = [f"Batch 16 x {fields['block_size']} ids, V = {fields['vocab_size']:,}, n_embd {fields['n_embd']}, fp32.", "",
             "| input module | forward + backward (ms) |", "|---|---|"]
    table += [f"| {'nn.Embedding' if r['input'] == 'learned' else r['input']} | {r['ms']:.2f} |" for r in rows]
    return rows, table
