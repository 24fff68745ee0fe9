"""Are the CPU comparison's rankings fair? frozen at equal compute, kronecker at equal input
parameters, the learned table at its own learning rate: results/fairness.md, .json.

    python -m experiments.fairness                               # 54 runs, ~5 hours on 2 cores, resumable
    python -m experiments.fairness --parts kronecker --seeds 1   # a part of it
    python -m experiments.fairness --base_runs out-compare/cpu   # 42 runs: the comparison's 12 read, not redone

Every run is the CPU comparison's preset (experiments/config/compare_cpu.py, as experiments.compare
runs it) with one change, over 3 seeds (RUNS), our choices throughout:

- frozen: codes from learned runs stopped early, short learned runs of 10% and 25% of the steps
  (each with its own schedule, so a source is a finished run, not a mid-run snapshot), then frozen
  runs from each and from the full learned run, their compute counted with their source's; and
  learned trained for 1.1x, 1.25x and 2x the steps, the three pairs' totals.
- kronecker: pos_dim 4 gives its projection 256 x 4 x 160 = 163,840 parameters, the learned
  table's exactly (pos_dim 16: 655,360, 4x). The other control, a learned input with Kronecker's
  655,360 parameters, would be a factorised table V x r x n_embd with r = 553 > n_embd = 160: more
  parameters, no more capacity than the table itself, so it is not run.
- lr: the learned table at input_lr_scale 0.25, 0.5 and 2 (the rest at the preset's rate 2e-3),
  and at the rate where the scaling study saw the table fall behind the codes (8e-3) with and
  without its own lower rate (0.25x: the table at 2e-3), binary at 8e-3 too: the best learned run
  against the best binary one.

Compute is train.py's training FLOPs (the same per token for every input), a frozen run's with its
source's added, and in units of the base learned run.
"""

from tablefree.common import interrupt_quietly
interrupt_quietly(__name__, "fairness.py")  # is one line, not a traceback

import json
import math
import sys
from pathlib import Path

from experiments.outputs import results_files, write_results
from experiments.runs import (ROOT, finished, made_free_first, read_run, run_dir, run_size, runs_root, train_run,
                              train_settings)
from experiments.stats import difference, mean_std
from tablefree.common import ArgumentParser, UserError, require, user_errors
from tablefree.data import read_meta
from tablefree.device import machine, measured_on

PRESET = str(ROOT / "experiments" / "config" / "compare_cpu.py")


LR_8E3 = ["--learning_rate=8e-3", "--min_lr=8e-4"]  # the scaling study's lr-8e-3 point


def steps(n):
    """A run of n steps with its schedule fitted to it (warmup a tenth of the preset's 50 below 500 steps)."""
    return [f"--max_iters={n}", f"--lr_decay_iters={n}", *(["--warmup_iters=10"] if n < 500 else [])]


RUNS = {  # name: (part, input, train.py arguments, the learned run frozen's codes come from)
    "learned": ("all", "learned", [], None),
    "binary": ("all", "binary", [], None),
    "learned-10pct": ("frozen", "learned", steps(120), None),
    "learned-25pct": ("frozen", "learned", steps(300), None),
    "frozen-10pct": ("frozen", "frozen", [], "learned-10pct"),
    "frozen-25pct": ("frozen", "frozen", [], "learned-25pct"),
    "frozen-full": ("frozen", "frozen", [], "learned"),
    "learned-1.1x": ("frozen", "learned", steps(1320), None),  # each frozen run's total compute
    "learned-1.25x": ("frozen", "learned", steps(1500), None),
    "learned-2x": ("frozen", "learned", steps(2400), None),
    "kronecker-pos16": ("kronecker", "kronecker", [], None),
    "kronecker-pos4": ("kronecker", "kronecker", ["--pos_dim=4"], None),
    "learned-table0.25x": ("lr", "learned", ["--input_lr_scale=0.25"], None),
    "learned-table0.5x": ("lr", "learned", ["--input_lr_scale=0.5"], None),
    "learned-table2x": ("lr", "learned", ["--input_lr_scale=2.0"], None),
    "learned-lr8e-3": ("lr", "learned", LR_8E3, None),
    "learned-lr8e-3-table0.25x": ("lr", "learned", [*LR_8E3, "--input_lr_scale=0.25"], None),
    "binary-lr8e-3": ("lr", "binary", LR_8E3, None),
}
PARTS = ("frozen", "kronecker", "lr")
SHARED = {"learned": "learned", "binary": "binary", "kronecker-pos16": "kronecker", "frozen-full": "frozen"}  # the
# CPU comparison's own runs (experiments/compare.py --preset cpu: the same arguments), which --base_runs reads
IGNORED = ("out_dir", "init_from", "overwrite", "codes_from", "device", "dtype")  # where a run lives, what it ran on


def chosen(parts):
    """The runs a set of parts needs, in RUNS' order (the base pair, and every frozen run's source)."""
    names = [n for n, (part, *_) in RUNS.items() if part in ("all", *parts)]
    return [n for n in RUNS if n in names or any(RUNS[m][3] == n for m in names)]


def location(name, seed, root, base_runs):
    """A run's directory: this study's, or for a SHARED run, the comparison's under base_runs."""
    return run_dir(base_runs, SHARED[name], seed) if base_runs and name in SHARED else run_dir(root, name, seed)


def arguments(name, seed, root, base_runs=None):
    """train.py's arguments for one run of RUNS."""
    _, kind, extra, source = RUNS[name]
    codes = [f"--codes_from={location(source, seed, root, base_runs)}"] if source else []
    return [PRESET, f"--input={kind}", f"--seed={seed}", f"--code_seed={seed}", *extra, *codes]


def source_needed(name, seed, root, base_runs, max_iters):
    """True when a frozen run still to be trained takes its codes from this run (max_iters: {run name:
    its steps}, for the runs of the plan)."""
    return any(RUNS[m][3] == name and not finished(location(m, seed, root, base_runs), max_iters[m]) for m in max_iters)


def base_run(directory, run_args):
    """A finished run of the CPU comparison that is this study's run (the same settings but where it
    lives and what it ran on): read, never trained or resumed here."""
    settings = train_settings(run_args)
    if not finished(directory, settings["max_iters"]):
        raise UserError(f"--base_runs: {directory} is not a finished run; run python -m experiments.compare --preset "
                        f"cpu first, or leave --base_runs out to train this study's own")
    recorded = json.loads((directory / "config.json").read_text())["settings"]
    differ = sorted(k for k in settings if k not in IGNORED and recorded.get(k) != settings[k])
    if differ:
        raise UserError(f"--base_runs: {directory} was trained with other settings ({', '.join(differ)}); leave "
                        f"--base_runs out to train this study's own")
    return read_run(directory)


def flops(settings):
    """Training FLOPs of one run of these settings (train.py's count: the same per token for every input)."""
    return run_size(settings, read_meta(Path(settings["data_dir"]) / settings["dataset"])["vocab_size"])[0]


def summarize(runs, run_flops):
    """Per run name: mean and std over seeds of val bits/byte, its compute (a frozen run's with its
    codes' source's) and input parameters, and its gap to the base learned run."""
    summary = {}
    total = {name: f + (run_flops[RUNS[name][3]] if RUNS[name][3] else 0.0) for name, f in run_flops.items()}
    for name, rs in runs.items():
        bpb, bpb_std = mean_std(r["val_bpb"] for r in rs)
        summary[name] = {"part": RUNS[name][0], "input": RUNS[name][1], "flops": total[name],
                         "compute": total[name] / total["learned"], "seeds": len(rs),
                         "input_params": rs[0]["input_params"], "val_bpb": bpb, "val_bpb_std": bpb_std}
    for name, s in summary.items():
        if name != "learned":
            s["vs_learned"] = difference(s, summary["learned"], "val_bpb")
    return summary


def answers(summary):
    """The three questions as (question, run, its control, the gap run - control with its standard
    error): each frozen run against the learned run of the same total compute, kronecker at the
    table's parameter count against learned, the best learned run of the lr part against the best
    binary one."""
    out = []
    for name, s in summary.items():
        if s["input"] == "frozen":
            equal = [n for n, c in summary.items() if c["input"] == "learned" and n != RUNS[name][3]
                     and math.isclose(c["compute"], s["compute"], rel_tol=0.01)]
            out += [("frozen at equal compute", name, n, difference(s, summary[n], "val_bpb")) for n in equal]
    if "kronecker-pos4" in summary:
        out.append(("kronecker at equal input parameters", "kronecker-pos4", "learned",
                    summary["kronecker-pos4"]["vs_learned"]))
    lr = [n for n, s in summary.items() if s["part"] in ("all", "lr")]
    if any(summary[n]["part"] == "lr" for n in lr):
        best = {kind: min((n for n in lr if summary[n]["input"] == kind), key=lambda n: summary[n]["val_bpb"])
                for kind in ("learned", "binary")}
        out.append(("the table at its own learning rate: best learned vs best binary", best["learned"], best["binary"],
                    difference(summary[best["learned"]], summary[best["binary"]], "val_bpb")))
    return out


def report(command, info, summary):
    lines = ["# Fair comparisons at the CPU preset: equal compute, equal input parameters, the table's own rate", "",
             measured_on(command, info) + " Mean ± std over seeds; compute: training FLOPs (a frozen run's with its "
             "codes' source's), and in units of the base learned run; gap: val bits/byte minus the base learned "
             "run's, with the standard error of the difference.", "",
             "| run | part | input | trainable input params | FLOPs | compute | seeds | val bits/byte | gap to learned |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, s in summary.items():
        g = s.get("vs_learned")
        gap = f"{g['gap']:+.4f} ± {g['stderr']:.4f}" if g else ""
        lines.append(f"| {name} | {s['part']} | {s['input']} | {s['input_params']:,} | {s['flops']:.3g} | "
                     f"{s['compute']:.2f} | {s['seeds']} | {s['val_bpb']:.4f} ± {s['val_bpb_std']:.4f} | {gap} |")
    lines += ["", "The questions (gap: the run's val bits/byte minus its control's; negative: the run is better; it "
              "exceeds seed variation when |gap| > 2 standard errors):", ""]
    for question, name, control, g in answers(summary):
        verdict = "exceeds" if g["exceeds_seed_variation"] else "is within"
        lines.append(f"- {question}: {name} - {control} = {g['gap']:+.4f} bits/byte (standard error "
                     f"{g['stderr']:.4f}); {verdict} seed variation")
    return "\n".join(lines) + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = ArgumentParser(prog="python -m experiments.fairness", description=__doc__.split("\n\n")[0])
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated: {', '.join(PARTS)}")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--runs_dir", default="out-fairness")
    p.add_argument("--results_dir", default="results")
    p.add_argument("--overwrite", action="store_true", help="replace a report of another command line, or a committed one")
    p.add_argument("--base_runs", help="a finished CPU comparison's runs (out-compare/cpu): its learned, binary, "
                   "kronecker and frozen runs are this study's base ones, read instead of trained again")
    with user_errors("fairness.py"):
        args, rest = p.parse_known_args(argv)  # the rest: train.py settings for every run (--data_dir=...)
        parts = args.parts.split(",")
        require(set(parts) <= set(PARTS), "--parts", args.parts, f"a comma-separated list of {', '.join(PARTS)}")
        require(args.seeds >= 1, "--seeds", args.seeds, "at least 1")
        md, js, _ = results_files(args.results_dir, "fairness", "fairness", argv, args.overwrite)
        root, names, base = runs_root(args.runs_dir), chosen(parts), args.base_runs and Path(args.base_runs)
        plan = {name: [[*arguments(name, seed, root, base), *rest] for seed in range(args.seeds)] for name in names}
        settings = {name: train_settings(plan[name][0]) for name in names}  # every run's checked before the first
        run_flops = {name: flops(s) for name, s in settings.items()}  # compute and steps: the same for every seed
        max_iters = {name: s["max_iters"] for name, s in settings.items()}
        todo = [name for name in names for seed in range(args.seeds) if not (base and name in SHARED)
                and not finished(location(name, seed, root, base), max_iters[name])]
        print(f"{len(names) * args.seeds} runs, {len(todo)} to train: {sum(map(run_flops.get, todo)) / run_flops['learned']:.1f} "
              f"base learned runs of compute (the CPU preset's run: 5-9 minutes on 2 cores)", flush=True)
        runs = {}
        for name in names:  # name after name (a frozen run needs its source), seeds in any order
            where = {seed: location(name, seed, root, base) for seed in range(args.seeds)}

            def make(seed):
                if base and name in SHARED:
                    return base_run(where[seed], plan[name][seed])
                return train_run(plan[name][seed], where[seed], max_iters[name], f"{name}, seed {seed}",
                                 checkpoint=source_needed(name, seed, root, base, max_iters))
            runs[name] = made_free_first(range(args.seeds), where.get, make)
        summary, info = summarize(runs, run_flops), machine()
        command = " ".join(["python -m experiments.fairness", *argv])
        table = report(command, info, summary)
        write_results(md, js, command, table, {"machine": info, "summary": summary, "runs": runs})
    print(table)


if __name__ == "__main__":
    main()
