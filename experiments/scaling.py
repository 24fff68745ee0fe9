"""Does the learned table's advantage shrink with scale? Learned vs fixed-code inputs over a grid
of widths, depths, token budgets, vocabularies and learning rates, on two CPU cores.

    python prepare.py --dataset cpu-mix --name cpu-mix-1k --vocab_size 1024
    python prepare.py --dataset cpu-mix --name cpu-mix-8k --vocab_size 8192
    python -m experiments.scaling            # the whole grid, resumable: results/scaling.md, .json, .png
    python -m experiments.scaling --points base,width-64 --seeds 1     # a part of it

Every run is train.py, started as compare.py starts it (experiments/runs.py: the same resume and
statistics, no probes), from experiments/config/compare_cpu.py and scaling_cpu.py with one
change per point (POINTS). An
interrupted grid continues where it stopped; before each input of each point it prints how many
runs are left and an estimate of the time they need, from the FLOP/s the finished runs measured.

The gap at a point is an input's mean val bits per byte minus learned's over the seeds, with the
standard error of the difference (bits per byte, not nats per token: the vocabulary changes the
token count). Two fits (our choice) through an axis's points, weighted by 1 / stderr^2, with C the
training compute (train.py's FLOPs per token x tokens): a straight line gap = a + b log10(C), and,
where every gap is positive, a power law gap = A C^d; both are read at the papers' compute. With
three points and an extrapolation over five and a half decades they say which way the trend
points, not what the papers' gap is.
"""

from tablefree.common import interrupt_quietly
interrupt_quietly(__name__, "scaling.py")  # is one line, not a traceback

import math
import sys
from pathlib import Path

import numpy as np

from experiments.outputs import results_files, write_figure, write_results
from experiments.runs import ROOT, finished, run_all, run_dir, run_size, runs_root, train_settings
from experiments.stats import gap, summarize
from tablefree.common import ArgumentParser, require, user_errors
from tablefree.reports import pyplot
from model import param_counts
from tablefree.data import read_meta
from tablefree.device import machine, measured_on

BASE = "experiments/config/compare_cpu.py,experiments/config/scaling_cpu.py"  # the CPU preset, then what the grid changes
POINTS = {  # name: (axis, change to the base, inputs); cheap points first, so early results are useful
    "base": ("base", {}, ("learned", "binary")),
    "width-64": ("width", {"n_embd": 64}, ("learned", "binary")),
    "vocab-8k": ("vocab", {"dataset": "cpu-mix-8k"}, ("learned", "binary")),
    "lr-1e-3": ("lr", {"learning_rate": 1e-3, "min_lr": 1e-4}, ("learned", "binary")),
    "lr-4e-3": ("lr", {"learning_rate": 4e-3, "min_lr": 4e-4}, ("learned", "binary")),
    "lr-8e-3": ("lr", {"learning_rate": 8e-3, "min_lr": 8e-4}, ("learned", "binary")),  # both were best at 4e-3
    "tokens-2x": ("tokens", {"max_iters": 2400, "lr_decay_iters": 2400}, ("learned", "binary")),
    "tokens-4x": ("tokens", {"max_iters": 4800, "lr_decay_iters": 4800}, ("learned", "binary")),
    "width-384": ("width", {"n_embd": 384}, ("learned", "binary")),  # the largest (affine, 4 lane-hours more, left out)
    "depth-3": ("depth", {"n_layer": 3}, ("learned", "binary")),  # the base has 6 layers
    "depth-12": ("depth", {"n_layer": 12}, ("learned", "binary")),
}
AXES = ("width", "tokens", "vocab", "lr", "depth")  # the base point sits on every axis
PAPERS = ROOT / "config/binary.py"  # the papers' 32-layer shape and 17B tokens, for the extrapolation


def point_settings(base, name):
    return {**base, **POINTS[name][1]}


def point_arguments(name):
    """A point's change as train.py arguments: {"n_embd": 64} -> ["--n_embd=64"]."""
    return [f"--{key}={value}" for key, value in POINTS[name][1].items()]


def compute_of(settings, data_dir):
    """(training FLOPs, vocabulary, table share of learned's parameters, epochs) of a point, from
    its config and its dataset's meta.json alone."""
    meta = read_meta(Path(data_dir) / settings["dataset"])
    flops, tokens, model = run_size(settings, meta["vocab_size"])
    table = meta["vocab_size"] * settings["n_embd"]  # learned's trainable parameters = binary's + the table
    return (flops, meta["vocab_size"], table / (param_counts(model)["trainable"] + table),
            tokens / meta["splits"]["train"]["tokens"])


def papers_compute():
    """Training FLOPs of the papers' runs: config/binary.py's shape, V = 65,536, ~17B tokens."""
    return run_size(train_settings([str(PAPERS)]), 65536)[0]


def estimate(todo, done):
    """Hours left: the remaining runs' FLOPs at the highest FLOP/s a finished run measured (None
    before any). The highest, not the mean: a run that shared the cores with other work, or was
    paused, measured the machine's load rather than its speed; so this is a lower bound."""
    if not done:
        return None
    return sum(todo) / max(f / w for f, w in done) / 3600


def fit(points):
    """Weighted least squares gap = a + b x, x = log10 C, weights 1 / stderr^2: (a, b, covariance)."""
    x = np.array([math.log10(p["compute"]) for p in points])
    y = np.array([p["gap"] for p in points])
    w = np.array([1 / max(p["stderr"], 1e-4) ** 2 for p in points])
    X = np.stack([np.ones_like(x), x], axis=1)
    cov = np.linalg.inv(X.T @ (w[:, None] * X))
    a, b = cov @ X.T @ (w * y)
    return float(a), float(b), cov


def analyse(rows, papers):
    """Per axis, two fits through its points (base included), each read at the papers' compute:
    a line, gap = a + b log10 C, which may cross zero (the papers found the codes slightly ahead);
    and a power law, gap = A C^d (log10 gap linear in log10 C), which assumes a positive gap that
    decays towards zero, fitted only when every gap on the axis is positive. Where they disagree,
    the extrapolation says nothing beyond the sign of the trend."""
    fits, x = {}, math.log10(papers)

    def read(a, b, cov):  # the fit at the papers' compute, with its standard error
        return a + b * x, math.sqrt(cov[0, 0] + 2 * x * cov[0, 1] + x * x * cov[1, 1])

    for axis in ("width", "tokens", "depth"):
        points = [r for r in rows if r["axis"] in (axis, "base") and r["input"] == "binary"]
        if len(points) < 2:
            continue
        a, b, cov = fit(points)
        at, spread = read(a, b, cov)
        fits[axis] = {"a": a, "b_per_decade": b, "b_stderr": math.sqrt(cov[1, 1]), "points": len(points),
                      "at_papers": at, "at_papers_stderr": spread,
                      "zero_at": 10 ** (-a / b) if b < 0 < a or a < 0 < b else None}
        if all(p["gap"] > 0 for p in points):  # log10 gap, its stderr by the delta method
            logs = [{"compute": p["compute"], "gap": math.log10(p["gap"]), "stderr": p["stderr"] / (p["gap"] * math.log(10))}
                    for p in points]
            c, d, cov = fit(logs)
            at, spread = read(c, d, cov)
            fits[axis]["power"] = {"exponent": d, "exponent_stderr": math.sqrt(cov[1, 1]), "at_papers": 10 ** at,
                                   "at_papers_factor": 10 ** spread}  # one standard error: x or / this factor
    swept = [r for r in rows if r["axis"] in ("lr", "base") and r["input"] == "binary"]
    if len(swept) > 1:  # each input at its own best learning rate: is the gap an artefact of one lr?
        best = {k: min(swept, key=lambda r: r["summaries"][k]["val_bpb"]) for k in ("learned", "binary")}
        g = gap(best["binary"]["summaries"]["binary"], best["learned"]["summaries"]["learned"])
        fits["lr"] = {"swept": sorted(r["lr"] for r in swept), "gap": g["bpb_gap"], "stderr": g["bpb_stderr"],
                      **{f"{k}_{key}": best[k][key] if key == "lr" else best[k]["summaries"][k]["val_bpb"]
                         for k in best for key in ("lr", "bpb")}}
    return fits


def report(command, info, rows, fits, papers, base_files):
    lines = ["# Scaling: the learned table's advantage against model width, depth, tokens, vocabulary and learning rate", "",
             measured_on(command, info) + f" Base: `{base_files}`; one change per point. gap = input's val "
             "bits/byte - learned's (mean over seeds; positive: the learned table is better), ± the standard error "
             "of the difference.", "",
             "| point | axis | layers x n_embd | V | tokens (epochs) | lr | compute (FLOPs) | table share | "
             "trainable input params, learned / input | seeds | learned bits/byte | input | input bits/byte | "
             "gap (bits/byte) | gap (nats/token) |", "|" + "---|" * 15]
    for r in rows:
        params = " / ".join(f"{r['summaries'][k]['input_params']:,}" for k in ("learned", r["input"]))
        lines.append(f"| {r['point']} | {r['axis']} | {r.get('n_layer', 6)} x {r['n_embd']} | {r['V']:,} | {r['tokens'] / 1e6:.2f}M ({r['epochs']:.1f}) | "
                     f"{r['lr']:g} | {r['compute']:.2e} | {100 * r['share']:.1f}% | {params} | {r['seeds']} | "
                     f"{r['learned_bpb']:.4f} | {r['input']} | {r['bpb']:.4f} | {r['gap']:+.4f} ± {r['stderr']:.4f} | "
                     f"{r['loss_gap']:+.4f} ± {r['loss_stderr']:.4f} |")
    skips = [f"{r['point']} {kind} seed {seed}: step {', '.join(map(str, steps))}" for r in rows
             for kind in ("learned", r["input"]) for seed, steps in enumerate(r["summaries"][kind]["skipped"]) if steps]
    if skips:  # train.py --nonfinite=skip (experiments/config/scaling_cpu.py): each a step of max_iters not applied
        lines += ["", f"Updates skipped for a non-finite loss or gradient (`--nonfinite=skip`): {'; '.join(skips)}."]
    lines += ["", f"Fits (binary vs learned, gap = a + b log10 C, weighted by 1 / stderr^2, and where every gap is "
              f"positive a power law; see scaling.analyse); the papers' compute "
              f"C = {papers:.2e} FLOPs (config/binary.py: 32 layers, n_embd 1024, V = 65,536, 17B tokens):", ""]
    for axis, f in ((a, f) for a, f in fits.items() if a != "lr"):
        zero = f"{f['zero_at']:.1e} FLOPs" if f["zero_at"] else "never (the line does not cross 0)"
        lines.append(f"- {axis} axis ({f['points']} points): b = {f['b_per_decade']:+.4f} ± {f['b_stderr']:.4f} "
                     f"bits/byte per decade of compute; gap 0 at {zero}; read at the papers' compute "
                     f"{f['at_papers']:+.3f} ± {f['at_papers_stderr']:.3f} bits/byte (an extrapolation over "
                     f"{math.log10(papers) - max(math.log10(r['compute']) for r in rows):.1f} decades).")
        if "power" in f:
            p = f["power"]
            lines.append(f"  Power law gap = A C^d: d = {p['exponent']:+.3f} ± {p['exponent_stderr']:.3f}; read at the "
                         f"papers' compute {p['at_papers']:.2e} bits/byte (one standard error: x or / "
                         f"{p['at_papers_factor']:.1f}).")
    if "lr" in fits:
        f = fits["lr"]
        edge = [k for k in ("learned", "binary") if f[f"{k}_lr"] in (f["swept"][0], f["swept"][-1])]
        lines.append(f"- learning rate, each input at its best of {', '.join(f'{lr:g}' for lr in f['swept'])}: learned at "
                     f"{f['learned_lr']:g} ({f['learned_bpb']:.4f} bits/byte), binary at {f['binary_lr']:g} "
                     f"({f['binary_bpb']:.4f}): gap {f['gap']:+.4f} ± {f['stderr']:.4f} bits/byte."
                     + (f" The best lr of {' and '.join(edge)} is at the edge of the sweep: its optimum may lie beyond it."
                        if edge else ""))
    return "\n".join(lines) + "\n"


def plot(rows, path, command):
    """The gap against compute, against the table's share of parameters (each axis a line through
    the base point) and against the learning rate (a sweep at one compute, so a panel of its own),
    if matplotlib is installed."""
    plt = pyplot()
    if plt is None:
        return
    sweep = any(r["axis"] == "lr" for r in rows)  # a grid without the lr sweep has no third panel
    fig, axes = plt.subplots(1, 2 + sweep, figsize=(5 * (2 + sweep), 4.2))
    trends = tuple(a for a in AXES if a != "lr")  # the lr sweep sits at one compute and one share
    panels = [(axes[0], "compute", "training compute (FLOPs)", trends, "log"),
              (axes[1], "share", "table share of learned's parameters", trends, "linear")]
    if sweep:
        panels.append((axes[2], "lr", "learning rate (base point)", ("lr",), "log"))
    for ax, key, label, lines, scale in panels:
        for axis in lines:
            for kind, marker in (("binary", "o-"), ("affine", "s")):
                pts = sorted((r for r in rows if r["axis"] in (axis, "base") and r["input"] == kind), key=lambda r: r[key])
                if pts and any(r["axis"] == axis for r in pts):
                    ax.errorbar([p[key] for p in pts], [p["gap"] for p in pts], yerr=[2 * p["stderr"] for p in pts],
                                fmt=marker, color=f"C{AXES.index(axis)}", label=f"{axis} ({kind})", capsize=3)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set(xlabel=label, ylabel="gap, bits/byte (input - learned)", xscale=scale)
        if key == "lr":  # the swept values themselves, not a log axis's crowded minor ticks
            swept = sorted({r["lr"] for r in rows if r["axis"] in ("lr", "base")})
            ax.set_xticks(swept, [f"{lr:g}" for lr in swept], minor=False)
            ax.minorticks_off()
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("fixed code minus learned table, ± 2 standard errors (each axis through the base point)")
    fig.tight_layout()
    write_figure(fig, path, command)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = ArgumentParser(prog="python -m experiments.scaling", description=__doc__.split("\n\n")[0],
                       epilog="Any other argument is a config file or --key=value setting of train.py, applied to every run.")
    p.add_argument("--points", default=",".join(POINTS), help=f"comma-separated: {', '.join(POINTS)}")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--name", default="scaling", help="names results/<name>.* and out-compare/<name>/")
    p.add_argument("--results_dir", default="results")
    p.add_argument("--overwrite", action="store_true", help="replace a report of another command line, or a committed one")
    p.add_argument("--runs_dir", help="where the runs go (default: out-compare/<name>)")
    p.add_argument("--base", default=BASE, help="the base point's config files, comma-separated, applied in order")
    with user_errors("scaling.py"):
        args, rest = p.parse_known_args(argv)
        names = args.points.split(",")
        require(set(names) <= set(POINTS), "--points", args.points, f"a comma-separated list of {', '.join(POINTS)}")
        require(args.seeds >= 1, "--seeds", args.seeds, "at least 1")
        # a config file named relative to here, or else to the checkout (the defaults)
        train_argv = [f if Path(f).exists() else str(ROOT / f) for f in args.base.split(",")] + rest
        base = train_settings(train_argv)
        md, js, png = results_files(args.results_dir, args.name, "scaling", argv, args.overwrite)
        root = runs_root(args.runs_dir or f"out-compare/{args.name}")
        plan = {name: compute_of(point_settings(base, name), base["data_dir"]) for name in names}  # checks every point first
        done, rows = [], []
        for name in names:
            axis, _, kinds = POINTS[name]
            settings = point_settings(base, name)
            todo = [plan[n][0] for n in names for k in POINTS[n][2] for seed in range(args.seeds)
                    if not finished(run_dir(root / n, k, seed), point_settings(base, n)["max_iters"])]
            hours = estimate(todo, done)
            print(f"== {name}: {', '.join(kinds)}; {len(todo)} run(s) left" +
                  (f", at least {hours:.1f} h at the fastest speed measured so far" if hours else ""), flush=True)
            runs = run_all([*train_argv, *point_arguments(name)], settings, kinds, args.seeds, root / name)
            done += [(plan[name][0], r["wall_s"]) for rs in runs.values() for r in rs]
            summary = summarize(runs)
            compute, V, share, epochs = plan[name]
            for kind in kinds[1:]:
                g, s = summary[kind]["vs_learned"], summary[kind]
                rows.append({"point": name, "axis": axis, "input": kind, "n_embd": settings["n_embd"],
                             "n_layer": settings["n_layer"], "V": V,
                             "tokens": s["tokens"], "epochs": epochs, "lr": settings["learning_rate"], "compute": compute,
                             "share": share,
                             "seeds": s["seeds"], "learned_bpb": summary["learned"]["val_bpb"], "bpb": s["val_bpb"],
                             "gap": g["bpb_gap"], "stderr": g["bpb_stderr"], "loss_gap": g["loss_gap"],
                             "loss_stderr": g["stderr"], "summaries": {"learned": summary["learned"], kind: s}})
        papers = papers_compute()
        fits = analyse(rows, papers)
        command, info = " ".join(["python -m experiments.scaling", *argv]), machine()
        table = report(command, info, rows, fits, papers, args.base)
        write_results(md, js, command, table, {"machine": info, "base": base, "points": {n: POINTS[n][:2] for n in names},
                                               "rows": rows, "fits": fits, "papers_compute": papers}, default=str)
    plot(rows, png, command)
    print(table)


if __name__ == "__main__":
    main()
