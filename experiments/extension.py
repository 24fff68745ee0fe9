"""Vocabulary extension at scale: add 64, 512 and 2,048 words to models of every input trained at
V = 8,192, with a learned table's new rows from their pieces or at random, with and without a
short adaptation of the new rows: results/extension.md, .json.

    python prepare.py --dataset cpu-mix --name cpu-mix-8k --vocab_size 8192
    python -m experiments.extension            # 21 runs, each followed by its grid cells (12, 6 or 2-4: model_cells)
    python -m experiments.extension --seeds 1 --new_tokens 64 --adapt_steps 0   # a part of it
    python -m experiments.extension --inputs frozen,kronecker --results_dir out-b   # beside the whole: shares its work

The frozen-code paper: its frozen table "accepts 10,000 new words after training with a 3% cost
where the learned table collapses by 43%"; its model reads its codes back as its head and its
learned control ties its table, so the grid has that pair too (learned+tied, frozen+codes:
experiments/runs.py's VARIANTS), at the largest M only. Our grid, our choice throughout: the scaling study's
V = 8,192 point (experiments/config/compare_cpu.py and scaling_cpu.py on cpu-mix-8k) for every
input and seed; binary and affine with --extra_bits=1 (V = 2^13 leaves them no free code, one
bit more leaves 8,192), so new ids get codes of their own; then tools/extend.py's protocol for
each M in NEW_TOKENS (2,048 is 25% of V), each way to start a learned table's rows (NEW_ROWS:
frozen, Kronecker and the codes ignore it) and each ADAPT_STEPS. Runs and extensions are kept:
an interrupted grid goes on where it stopped.
"""

from tablefree.common import interrupt_quietly
interrupt_quietly(__name__, "extension.py")  # is one line, not a traceback

import itertools
import statistics
import sys

from experiments.outputs import results_files, write_results
from experiments.runs import (ROOT, VARIANTS, cell_report, control, extend, finished, is_kind, run_arguments, run_dir,
                              runs_root, train_run, train_settings)
from experiments.stats import mean_std
from model import INPUTS
from tablefree.common import ArgumentParser, UserError, require, user_errors
from tablefree.device import machine, measured_on

BASE = [str(ROOT / "experiments" / "config" / f) for f in ("compare_cpu.py", "scaling_cpu.py")] + ["--dataset=cpu-mix-8k"]
NEW_TOKENS, NEW_ROWS, ADAPT_STEPS = (64, 512, 2048), ("mean", "random"), (0, 200)
HEADROOM = {"binary": ["--extra_bits=1"], "affine": ["--extra_bits=1"]}  # codes of their own for new ids
KINDS = (*INPUTS, "learned+tied", "frozen+codes")  # every input, and the frozen-code paper's pair


def grid(new_tokens, new_rows, adapt_steps):
    """The extensions to run: (M, rows, steps, the name of their tools/extend.py report)."""
    return [(m, rows, steps, f"extend-{m}-{rows}-{steps}") for m, rows, steps in
            itertools.product(new_tokens, new_rows, adapt_steps)]


def model_cells(kind, cells):
    """The grid cells a model of this kind runs: random rows are a learned table's alone (the other
    inputs have no table, so theirs would repeat their mean cells' numbers); the frozen-code
    paper's pair (learned+tied, frozen+codes) runs the largest M only, the paper's question."""
    name, _, variant = kind.partition("+")
    largest = max(cell[0] for cell in cells)
    return [cell for cell in cells if (name == "learned" or cell[1] == "mean") and (not variant or cell[0] == largest)]


def run_grid(kinds, seeds, cells, root, data_dir):
    """Every model's cells, model after model: {cell name: [rows]}. A model is trained (or read)
    just before its cells, so its checkpoint is needed only until they are kept: a machine lost
    mid-grid trains again at most the models whose cells were not all done."""
    argv = [*BASE, f"--data_dir={data_dir}"]
    settings = train_settings(argv)

    def train(kind, seed, checkpoint):
        directory = run_dir(root, kind, seed)
        if kind.startswith("frozen") and not finished(directory, settings["max_iters"]):
            train(control(kind), seed, checkpoint=True)  # frozen's codes come from that run's table
        train_run([*argv, *run_arguments(settings, kind, seed, root), *HEADROOM.get(kind, [])], directory,
                  settings["max_iters"], f"{kind}, seed {seed} at V = 8,192", checkpoint=checkpoint)
        return directory

    rows = {cell[-1]: [] for cell in cells}
    for kind in kinds:
        mine = model_cells(kind, cells)
        for seed in range(seeds):
            directory = train(kind, seed, any(not cell_report(root, c, kind, seed).exists() for c in mine))
            for cell in mine:
                rows[cell[-1]].append(extend(directory, kind, seed, cell, root, data_dir))
    return rows


def bucket_means(runs, side):
    """Mean loss over runs of each train-count bucket of old tokens, before or after: [(label, loss or None)]."""
    labels = [b["train_count"] for b in runs[0][side]["buckets"]]
    losses = [[r[side]["buckets"][i]["loss"] for r in runs] for i in range(len(labels))]
    return [(label, statistics.mean(ls) if None not in ls else None) for label, ls in zip(labels, losses)]


def summarize(cells):
    """{(M, rows, steps): {input: relative change mean and std, bits/byte before and after, the
    new tokens' loss, the old tokens' loss by train-count bucket, runs}}."""
    summary = {}
    for (m, rows, steps, _), runs in cells:
        by_input = {}
        for r in runs:  # a report kept from before kinds is an untied model's: its input is its kind
            by_input.setdefault(r.get("kind", r["input"]), []).append(r)
        summary[(m, rows, steps)] = {}
        for kind, rs in by_input.items():
            change, change_std = mean_std(r["bpb_change"] for r in rs)
            summary[(m, rows, steps)][kind] = {
                "runs": len(rs), "vocab_size": rs[0]["vocab_size"], "change": change, "change_std": change_std,
                "new_loss": statistics.mean(r["after"]["new_tokens"]["loss"] for r in rs),
                "before": statistics.mean(r["before"]["bpb"] for r in rs),
                "after": statistics.mean(r["after"]["bpb"] for r in rs),
                "buckets_before": bucket_means(rs, "before"), "buckets_after": bucket_means(rs, "after")}
    return summary


def report(command, info, summary, kinds):
    def grid(title, cell):  # one row per grid cell, one column per input
        rows = [title, "", "| new tokens | table rows | adaptation steps | " + " | ".join(kinds) + " |",
                "|---|---|---|" + "---|" * len(kinds)]
        for (m, new_rows, steps), by_input in summary.items():
            rows.append(f"| {m:,} | {new_rows} | {steps} | " + " | ".join(
                cell(by_input[k]) if k in by_input else "" for k in kinds) + " |")
        return rows + [""]

    lines = ["# Adding words at V = 8,192: every input, 64 to 2,048 new tokens", "",
             measured_on(command, info) + " Held-out bits per byte before and after adding the words, mean "
             "(± std) over seeds; the protocol: tools/extend.py's docstring. Table rows: how a learned table's new "
             "rows start (random: learned alone; the other inputs have no table, so theirs would be the mean cells' "
             "numbers again). Binary and affine code with one extra bit (their new ids have codes of their own).", ""]
    lines += grid("Relative change of held-out bits per byte:",
                  lambda s: f"{100 * s['change']:+.2f}% ± {100 * s['change_std']:.2f}%")
    lines += paper_pair(summary)
    lines += grid("Held-out bits per byte, before -> after:", lambda s: f"{s['before']:.4f} -> {s['after']:.4f}")
    lines += grid("Loss (nats) on the new tokens, after:", lambda s: f"{s['new_loss']:.3f}")
    labels = [label for label, _ in next(iter(next(iter(summary.values())).values()))["buckets_before"]]
    lines += ["Loss (nats) of old tokens by their train count, before -> after (mean over seeds; empty: no such "
              "token in the held-out text):", "", "| new tokens | table rows | adaptation steps | input | " +
              " | ".join(labels) + " |", "|---|---|---|---|" + "---|" * len(labels)]
    for (m, new_rows, steps), by_input in summary.items():
        for kind, s in by_input.items():
            lines.append(f"| {m:,} | {new_rows} | {steps} | {kind} | " + " | ".join(
                f"{b:.2f} -> {a:.2f}" if b is not None else "" for (_, b), (_, a) in
                zip(s["buckets_before"], s["buckets_after"])) + " |")
    return "\n".join(lines) + "\n"


def paper_pair(summary):
    """The frozen-code paper's claim beside our largest M without adaptation, where the pair ran."""
    m = max(key[0] for key in summary)
    cell = summary.get((m, "mean", 0), {})
    if not {"learned+tied", "frozen+codes"} <= set(cell):
        return []
    changes = ", ".join(f"{kind} {100 * cell[kind]['change']:+.2f}%" for kind in ("learned+tied", "frozen+codes",
                                                                                  "learned", "frozen") if kind in cell)
    return [f"The frozen-code paper: its frozen table accepts 10,000 new words (about 4% of its V) \"at a 3% cost where "
            f"the learned table collapses by 43%\". Here, {m:,} new words ({100 * m / cell['frozen+codes']['vocab_size']:.0f}% "
            f"of V), mean rows, no adaptation: {changes}.", ""]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = ArgumentParser(prog="python -m experiments.extension", description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--inputs", default=",".join(KINDS), help="comma-separated kinds (experiments/runs.py's VARIANTS)")
    p.add_argument("--new_tokens", default=",".join(map(str, NEW_TOKENS)), help="comma-separated M")
    p.add_argument("--new_rows", default=",".join(NEW_ROWS), help="comma-separated: mean, random")
    p.add_argument("--adapt_steps", default=",".join(map(str, ADAPT_STEPS)), help="comma-separated")
    p.add_argument("--data_dir", default="data")
    p.add_argument("--runs_dir", default="out-extension")
    p.add_argument("--results_dir", default="results")
    p.add_argument("--overwrite", action="store_true", help="replace a report of another command line, or a committed one")
    with user_errors("extension.py"):
        args = p.parse_args(argv)
        kinds = args.inputs.split(",")
        require(args.seeds >= 1, "--seeds", args.seeds, "at least 1")
        require(all(is_kind(k) for k in kinds), "--inputs", args.inputs,
                f"a comma-separated list of {', '.join(INPUTS)}, each optionally +{'/+'.join(VARIANTS)}")
        require(set(args.new_rows.split(",")) <= set(NEW_ROWS), "--new_rows", args.new_rows, "mean and/or random")
        try:
            cells = grid([int(m) for m in args.new_tokens.split(",")], args.new_rows.split(","),
                         [int(s) for s in args.adapt_steps.split(",")])
        except ValueError:
            raise UserError("--new_tokens and --adapt_steps take comma-separated whole numbers") from None
        md, js, _ = results_files(args.results_dir, "extension", "extension", argv, args.overwrite)
        made = run_grid(kinds, args.seeds, cells, runs_root(args.runs_dir), args.data_dir)
        done = [(cell, made[cell[-1]]) for cell in cells if made[cell[-1]]]
        summary, info = summarize(done), machine()
        command = " ".join(["python -m experiments.extension", *argv])
        table = report(command, info, summary, kinds)
        write_results(md, js, command, table, {"machine": info, "runs": {name: runs for (*_, name), runs in done},
                                               "summary": {f"{m}-{rows}-{steps}": s for (m, rows, steps), s in summary.items()}})
    print(table)


if __name__ == "__main__":
    main()
