"""Does removing the trainable input table hurt? Train every input (learned, binary, affine,
kronecker, frozen) and a ternary body over several seeds, everything else equal, score each
run's spelling and echo probes (eval.py), and write the table: results/<name>.md, .json, .png.

    python prepare.py --dataset shakespeare-plays && python compare.py --preset cpu   # ~2 h, 2 cores
    torchrun --nproc_per_node=8 compare.py --preset gpu                              # the papers' table
    python compare.py config/my.py --name mine --seeds 5 --max_iters=2000            # any config

Every run is train.train() (the same code as train.py) with the preset's settings plus
`input`, `seed`, and for affine `code_seed = seed`, so each affine seed also draws its own A
and b: the table doubles as the papers' robustness check on the code assignment. A run whose
log already holds its final evaluation is not redone; an interrupted one resumes from its
checkpoint, so interrupting compare.py and starting it again loses at most one eval interval.
The Kronecker input replaces the table with a learned projection, so its trainable input
parameters are not zero: the table's "input params" column says how many. The frozen input's
codes come from the learned run of the same seed (trained first): it starts from what that run
learned, which a like-for-like comparison with learned must keep in mind. 'binary+ternary' is
the binary input with a ternary body (body='ternary'), compared with the float body too.
"""

import json
import math
import os
import statistics
import sys
from pathlib import Path

from tqdm import tqdm

import eval as evaluate
import train
from bench import machine
from checkpoint import read_log
from codes import describe_quality
from inputs import INPUTS
from model import BODIES
from settings import ArgumentParser, UserError, require, resolve, user_errors, write_atomic

PRESETS = {"cpu": "config/compare_cpu.py", "gpu": "config/binary.py"}
KINDS = (*INPUTS, "binary+ternary")  # every input with the float body, and the ternary body's cost
PROBES = ("spelling", "echo")  # eval.py's committed probe sets, scored on every finished run


def run_dir(root, kind, seed):
    return Path(root) / f"{kind}-seed{seed}"


def read_run(directory):
    """One finished run's numbers from its log.jsonl and config.json."""
    log = read_log(directory / "log.jsonl")
    config = json.loads((directory / "config.json").read_text())
    s = config["settings"]
    evals = [r for r in log if "val_loss" in r]
    final = evals[-1]
    return {"val_loss": final["val_loss"], "val_ppl": math.exp(final["val_loss"]), "val_bpb": final["val_bpb"],
            "tokens": s["max_iters"] * s["gradient_accumulation_steps"] * s["batch_size"] * s["block_size"],
            "trainable": config["params"]["trainable"], "input_params": config["params"]["input"],
            "wall_s": final["elapsed_s"], "curve": [[r["iter"], r["val_loss"]] for r in evals],
            "code_quality": config.get("code_quality")}


def probe_run(directory, max_iters):
    """eval.py's spelling and echo probes on a finished run, scored once and kept in its eval.json
    (scored again when that file is from another step of the run)."""
    path = directory / "eval.json"
    try:
        report = json.loads(path.read_text())
        results = report["results"] if report["iter_num"] == max_iters else {}
    except (OSError, ValueError, KeyError, TypeError):
        results = {}
    if set(PROBES) - set(results):
        results = evaluate.evaluate(evaluate.parse_args(["--ckpt", str(directory), "--tasks", ",".join(PROBES)]))["results"]
    spelling = results["spelling"]
    return {"spelling_top1": spelling["top1_agreement"], "spelling_kl": spelling["kl"],
            "echo_rate": results["echo"]["echo_rate"],
            "spelling_by_category": {c: g["top1_agreement"] for c, g in spelling["by_category"].items()}}


def finished(directory, max_iters):
    """True when the run's log holds its final evaluation."""
    log = directory / "log.jsonl"
    return log.exists() and any(r["iter"] == max_iters and "val_loss" in r for r in read_log(log))


def summarize(runs):
    """Per-interface statistics over seeds, and each fixed code against learned.

    runs: {kind: [read_run(...) per seed]}. Mean and sample standard deviation (n - 1) over
    seeds; `spread` is (max - min) / mean of the seeds' perplexities. A difference "exceeds seed
    variation" when the gap between mean val losses is more than twice its standard error,
    sqrt(s_a^2 / n_a + s_b^2 / n_b) (a rough 95% rule; with 3 seeds a t-test would need ~4.3x).
    """
    def mean_std(values):
        return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0

    summary = {}
    for kind, rs in runs.items():
        (loss, loss_std), (ppl, ppl_std) = mean_std([r["val_loss"] for r in rs]), mean_std([r["val_ppl"] for r in rs])
        bpb, bpb_std = mean_std([r["val_bpb"] for r in rs])
        summary[kind] = {
            "seeds": len(rs), "val_loss": loss, "val_loss_std": loss_std, "val_ppl": ppl, "val_ppl_std": ppl_std,
            "val_bpb": bpb, "val_bpb_std": bpb_std,
            "spread": (max(r["val_ppl"] for r in rs) - min(r["val_ppl"] for r in rs)) / ppl,
            "trainable": rs[0]["trainable"], "input_params": rs[0]["input_params"], "tokens": rs[0]["tokens"],
            "wall_s": statistics.mean(r["wall_s"] for r in rs),
        }
        if all(r.get("code_quality") for r in rs):  # a code derived from a source: its quality, mean over seeds
            qualities = [r["code_quality"] for r in rs]
            summary[kind]["code_quality"] = {
                **qualities[0], **{key: statistics.mean(q[key] for q in qualities)
                                   for key in ("distinct", "min_hamming", "mean_hamming", "spearman")},
                "bit_balance": {"min": min(q["bit_balance"]["min"] for q in qualities),
                                "max": max(q["bit_balance"]["max"] for q in qualities)}}
        if all("probes" in r for r in rs):  # mean and std over seeds of each probe score
            probes = [r["probes"] for r in rs]
            for key in ("spelling_top1", "spelling_kl", "echo_rate"):
                summary[kind][key], summary[kind][f"{key}_std"] = mean_std([p[key] for p in probes])
            summary[kind]["spelling_by_category"] = {c: statistics.mean(p["spelling_by_category"][c] for p in probes)
                                                     for c in probes[0]["spelling_by_category"]}
    for kind, s in summary.items():
        if kind != "learned" and "learned" in summary:
            s["vs_learned"] = gap(s, summary["learned"])
        if "+" in kind and kind.partition("+")[0] in summary:  # another body against the float one
            s["vs_float"] = gap(s, summary[kind.partition("+")[0]])
    return summary


def gap(s, base):
    """s's mean val loss (and bits per byte) minus base's, with the standard error of the
    difference of two means."""
    def stderr(key):
        return math.sqrt(s[f"{key}_std"] ** 2 / s["seeds"] + base[f"{key}_std"] ** 2 / base["seeds"])
    loss_gap = s["val_loss"] - base["val_loss"]
    return {"loss_gap": loss_gap, "ppl_ratio": s["val_ppl"] / base["val_ppl"] - 1, "stderr": stderr("val_loss"),
            "exceeds_seed_variation": abs(loss_gap) > 2 * stderr("val_loss"),
            "bpb_gap": s["val_bpb"] - base["val_bpb"], "bpb_stderr": stderr("val_bpb")}


def report(name, command, machine, summary):
    """The results table in Markdown."""
    lines = [f"# {name}: {' vs '.join(summary)} inputs", "",
             f"`{command}` on {machine['cpu']} ({machine['threads']} threads), GPU: {machine['gpu']}, torch "
             f"{machine['torch']}, finished {machine['date']}.", "",
             "| input | seeds | val loss (mean ± std) | val bits/byte (mean ± std) | val ppl (mean ± std) | "
             "seed spread | trainable params | input params | tokens per run | wall time per run |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for kind, s in summary.items():
        lines.append(f"| {kind} | {s['seeds']} | {s['val_loss']:.4f} ± {s['val_loss_std']:.4f} | "
                     f"{s['val_bpb']:.4f} ± {s['val_bpb_std']:.4f} | {s['val_ppl']:.2f} ± {s['val_ppl_std']:.2f} | "
                     f"{100 * s['spread']:.1f}% | {s['trainable']:,} | {s['input_params']:,} | {s['tokens']:,} | "
                     f"{s['wall_s'] / 60:.1f} min |")
    lines.append("")
    for kind, s in summary.items():
        for key, against in (("vs_learned", "learned"), ("vs_float", f"{kind.partition('+')[0]} (float body)")):
            if key in s:
                v = s[key]
                verdict = "exceeds" if v["exceeds_seed_variation"] else "is within"
                lines.append(f"- {kind} vs {against}: val loss {v['loss_gap']:+.4f} nats (perplexity "
                             f"{100 * v['ppl_ratio']:+.1f}%), standard error {v['stderr']:.4f}; the gap {verdict} "
                             f"seed variation (|gap| > 2 standard errors).")
    lines += [f"- {kind} codes, mean over seeds (each derived from the learned run of its seed): "
              f"{describe_quality(s['code_quality'])}." for kind, s in summary.items() if "code_quality" in s]
    lines += probe_tables(summary)
    lines += ["", "seed spread = (max - min) / mean of the seeds' perplexities; std is the sample standard deviation.",
              "", "Context only, not comparable: the papers' 32-layer runs (17B tokens, 3 seeds) report per-token "
              "perplexity 2.44 learned, 2.36 binary, 2.39 affine, seed-to-seed variation 4.8%, on the authors' own "
              "65,536-token vocabulary; a per-token perplexity depends on the tokenizer."]
    return "\n".join(lines) + "\n"


def probe_tables(summary):
    """The spelling and echo probes per input (mean ± std over seeds), then spelling per category."""
    if not all("spelling_top1" in s for s in summary.values()):
        return []
    lines = ["", "Probes (`eval.py --tasks spelling,echo`, the committed `probe_sets/`): top-1 next-token agreement "
             "and KL(clean || typo) over 110 clean/typo pairs; echo rate: the share of 30 prompts whose greedy "
             "16-token continuation repeats an invented name or misspelt word shown in the prompt.", "",
             "| input | spelling top-1 agreement | spelling KL (nats) | echo rate |", "|---|---|---|---|"]
    lines += [f"| {kind} | {s['spelling_top1']:.3f} ± {s['spelling_top1_std']:.3f} | {s['spelling_kl']:.3f} ± "
              f"{s['spelling_kl_std']:.3f} | {s['echo_rate']:.3f} ± {s['echo_rate_std']:.3f} |" for kind, s in summary.items()]
    categories = list(next(iter(summary.values()))["spelling_by_category"])
    lines += ["", "Spelling top-1 agreement per typo category (mean over seeds):", "",
              "| category | " + " | ".join(summary) + " |", "|---|" + "---|" * len(summary)]
    lines += [f"| {c} | " + " | ".join(f"{s['spelling_by_category'][c]:.2f}" for s in summary.values()) + " |"
              for c in categories]
    return lines


def pyplot():
    """matplotlib.pyplot drawing to files, or None (and a note) when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install matplotlib)")
        return None
    return plt


def plot(runs, path):
    """Validation-loss curves of every run, if matplotlib is installed."""
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for color, (kind, rs) in zip((f"C{i}" for i in range(10)), runs.items()):
        for k, r in enumerate(rs):
            steps, losses = zip(*r["curve"][1:])  # step 0 is the untrained model
            ax.plot(steps, losses, color=color, alpha=0.8, label=kind if k == 0 else None)
    ax.set(xlabel="step", ylabel="validation loss (nats/token)", title=path.stem)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def run_settings(base, kind, seed, root):
    """One run's settings: the preset's, with its input and seed (affine also draws its A and b
    from it); 'frozen' derives its codes from the preset's own learned run of the same seed.
    A kind 'input+body' also sets the body: 'binary+ternary' is binary input, ternary body."""
    kind, _, body = kind.partition("+")
    settings = {**base, "input": kind, "seed": seed, "code_seed": seed, **({"body": body} if body else {})}
    if kind == "frozen":
        source = run_dir(root, "learned", seed)
        if not finished(source, base["max_iters"]):
            raise UserError(f"frozen derives its codes from {source}, which is not finished; "
                            f"run learned first (--inputs learned,frozen)")
        settings["codes_from"] = str(source)
    return settings


def run_all(base, kinds, seeds, root, master):
    """{kind: [read_run(...) per seed]}, training (or resuming) every run not yet finished."""
    runs = {}
    bar = tqdm(total=len(kinds) * seeds, desc="runs", unit="run", file=sys.stderr, disable=not master or None)
    for kind in kinds:
        runs[kind] = []
        for seed in range(seeds):
            directory = run_dir(root, kind, seed)
            if not finished(directory, base["max_iters"]):
                resume = (directory / "ckpt.pt").exists()
                if master:
                    bar.write(f"== {kind}, seed {seed}: {'resuming' if resume else 'training'} in {directory}")
                # compare.py owns its run directories: a run killed before its first checkpoint restarts
                train.train({**run_settings(base, kind, seed, root), "out_dir": str(directory),
                             "init_from": "resume" if resume else "scratch", "overwrite": not resume})
            runs[kind].append(read_run(directory))
            bar.update()
    bar.close()
    return runs


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = ArgumentParser(prog="compare.py", description=__doc__.split("\n")[0],
                       epilog="Any other argument is a config file or --key=value setting of train.py "
                              "(python train.py --help lists them), applied to every run.")
    p.add_argument("--preset", choices=PRESETS, help="cpu (config/compare_cpu.py) or gpu (the papers' 32-layer config)")
    p.add_argument("--name", help="names results/<name>.* and out-compare/<name>/ (default: the preset)")
    p.add_argument("--seeds", type=int, default=3, help="seeds per input (the papers used 3)")
    p.add_argument("--inputs", default=",".join(KINDS),
                   help="comma-separated inputs, each optionally +body (binary+ternary: a ternary body)")
    p.add_argument("--results_dir", default="results")
    p.add_argument("--runs_dir", help="where the runs go (default: out-compare/<name>)")
    master = int(os.environ.get("RANK", 0)) == 0
    with user_errors("compare.py"):
        args, rest = p.parse_known_args(argv)
        require(args.seeds >= 1, "--seeds", args.seeds, "at least 1")
        kinds = args.inputs.split(",")
        require(all(k.partition("+")[0] in INPUTS and k.partition("+")[2] in ("", *BODIES) for k in kinds), "--inputs",
                args.inputs, f"a comma-separated list of {', '.join(INPUTS)}, each optionally +{'/+'.join(BODIES)}")
        name = args.name or args.preset or "compare"
        base = resolve(train.DEFAULTS, ([PRESETS[args.preset]] if args.preset else []) + rest)
        train.check_settings(base)  # a bad setting is refused before the first run, not after some
        results = Path(args.results_dir)
        try:  # and an unwritable results folder too
            results.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"cannot write to --results_dir {results}: {e.strerror}") from None
        root = Path(args.runs_dir or f"out-compare/{name}")
        runs = run_all(base, kinds, args.seeds, root, master)
        if not master:
            return
        for kind, rs in runs.items():
            for seed, r in enumerate(rs):
                r["probes"] = probe_run(run_dir(root, kind, seed), base["max_iters"])
        summary, info = summarize(runs), machine()
        command = " ".join(["python compare.py", *argv])
        table = report(name, command, info, summary)
        write_atomic(results / f"{name}.md", table)
        write_atomic(results / f"{name}.json", json.dumps({"command": command, "machine": info, "settings": base,
                                                           "summary": summary, "runs": runs}, indent=2))
    plot(runs, results / f"{name}.png")
    print(table)

if __name__ == "__main__":
    main()
