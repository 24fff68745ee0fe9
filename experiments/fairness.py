"""Are the CPU comparison's rankings fair? frozen at equal compute, kronecker at equal input
parameters, the learned table at its own learning rate: results/fairness.md, .json.

    python -m experiments.fairness                               # 45 runs, ~5 hours on 2 cores, resumable
    python -m experiments.fairness --parts kronecker --seeds 1   # a part of it

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
- lr: the learned table at input_lr_scale 0.25, 0.5 and 2 (the rest at the preset's rate).

Compute is in units of one preset run (train.py's FLOPs per token are the same for every input).
"""

import json
import statistics
import sys
from pathlib import Path

from experiments.runs import ROOT, difference, results_files, run_dir, train_run, train_settings
from tablefree.common import ArgumentParser, require, user_errors, write_atomic
from tablefree.device import machine

PRESET = str(ROOT / "experiments" / "config" / "compare_cpu.py")


def steps(n):
    """A run of n steps with its schedule fitted to it (warmup a tenth of the preset's 50 below 500 steps)."""
    return [f"--max_iters={n}", f"--lr_decay_iters={n}", *(["--warmup_iters=10"] if n < 500 else [])]


RUNS = {  # name: (part, input, train.py arguments, compute in preset runs, the learned run frozen's codes come from)
    "learned": ("all", "learned", [], 1.0, None),
    "binary": ("all", "binary", [], 1.0, None),
    "learned-10pct": ("frozen", "learned", steps(120), 0.1, None),
    "learned-25pct": ("frozen", "learned", steps(300), 0.25, None),
    "frozen-10pct": ("frozen", "frozen", [], 1.1, "learned-10pct"),
    "frozen-25pct": ("frozen", "frozen", [], 1.25, "learned-25pct"),
    "frozen-full": ("frozen", "frozen", [], 2.0, "learned"),
    "learned-1.1x": ("frozen", "learned", steps(1320), 1.1, None),
    "learned-1.25x": ("frozen", "learned", steps(1500), 1.25, None),
    "learned-2x": ("frozen", "learned", steps(2400), 2.0, None),
    "kronecker-pos16": ("kronecker", "kronecker", [], 1.0, None),
    "kronecker-pos4": ("kronecker", "kronecker", ["--pos_dim=4"], 1.0, None),
    "learned-lr0.25": ("lr", "learned", ["--input_lr_scale=0.25"], 1.0, None),
    "learned-lr0.5": ("lr", "learned", ["--input_lr_scale=0.5"], 1.0, None),
    "learned-lr2": ("lr", "learned", ["--input_lr_scale=2.0"], 1.0, None),
}
PARTS = ("frozen", "kronecker", "lr")


def chosen(parts):
    """The runs a set of parts needs, in RUNS' order (the base pair, and every frozen run's source)."""
    names = [n for n, (part, *_) in RUNS.items() if part in ("all", *parts)]
    return [n for n in RUNS if n in names or any(RUNS[m][4] == n for m in names)]


def arguments(name, seed, root):
    """train.py's arguments for one run of RUNS."""
    _, kind, extra, _, source = RUNS[name]
    codes = [f"--codes_from={run_dir(root, source, seed)}"] if source else []
    return [PRESET, f"--input={kind}", f"--seed={seed}", f"--code_seed={seed}", *extra, *codes]


def summarize(runs):
    """Per run name: mean and std over seeds of val bits/byte, its compute and input parameters,
    and its gap to the base learned run."""
    summary = {}
    for name, rs in runs.items():
        values = [r["val_bpb"] for r in rs]
        summary[name] = {"part": RUNS[name][0], "input": RUNS[name][1], "compute": RUNS[name][3], "seeds": len(rs),
                         "input_params": rs[0]["input_params"], "val_bpb": statistics.mean(values),
                         "val_bpb_std": statistics.stdev(values) if len(values) > 1 else 0.0}
    for name, s in summary.items():
        if name != "learned" and "learned" in summary:
            s["vs_learned"] = difference(s, summary["learned"], "val_bpb")
    return summary


def report(command, info, summary):
    lines = ["# Fair comparisons at the CPU preset: equal compute, equal input parameters, the table's own rate", "",
             f"`{command}` on {info['cpu']} ({info['threads']} threads), torch {info['torch']}, finished {info['date']}. "
             "Mean ± std over seeds; compute in units of one preset run; gap: val bits/byte minus the base learned "
             "run's, with the standard error of the difference.", "",
             "| run | part | input | trainable input params | compute | seeds | val bits/byte | gap to learned |",
             "|---|---|---|---|---|---|---|---|"]
    for name, s in summary.items():
        g = s.get("vs_learned")
        gap = f"{g['gap']:+.4f} ± {g['stderr']:.4f}" if g else ""
        lines.append(f"| {name} | {s['part']} | {s['input']} | {s['input_params']:,} | {s['compute']:.2f} | {s['seeds']} | "
                     f"{s['val_bpb']:.4f} ± {s['val_bpb_std']:.4f} | {gap} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = ArgumentParser(prog="python -m experiments.fairness", description=__doc__.split("\n")[0])
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated: {', '.join(PARTS)}")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--runs_dir", default="out-fairness")
    p.add_argument("--results_dir", default="results")
    with user_errors("fairness.py"):
        args, rest = p.parse_known_args(argv)  # the rest: train.py settings for every run (--data_dir=...)
        parts = args.parts.split(",")
        require(set(parts) <= set(PARTS), "--parts", args.parts, f"a comma-separated list of {', '.join(PARTS)}")
        require(args.seeds >= 1, "--seeds", args.seeds, "at least 1")
        md, js, _ = results_files(args.results_dir, "fairness")
        root, names = Path(args.runs_dir), chosen(parts)
        print(f"{len(names) * args.seeds} runs, {args.seeds * sum(RUNS[n][3] for n in names):.1f} preset runs of compute "
              f"(the CPU preset's run: about 5 minutes on 2 cores)", flush=True)
        runs = {}
        for name in names:
            runs[name] = []
            for seed in range(args.seeds):
                run_args = [*arguments(name, seed, root), *rest]
                runs[name].append(train_run(run_args, run_dir(root, name, seed), train_settings(run_args)["max_iters"],
                                            f"{name}, seed {seed}"))
        summary, info = summarize(runs), machine()
        command = " ".join(["python -m experiments.fairness", *argv])
        table = report(command, info, summary)
        write_atomic(md, table)
        write_atomic(js, json.dumps({"command": command, "machine": info, "summary": summary, "runs": runs}, indent=2))
    print(table)


if __name__ == "__main__":
    main()
