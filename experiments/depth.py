"""Bochkov's comparison at the papers' own depth: learned, binary and affine inputs at 32 layers, and
the gap against depth (6, 12, 32 layers) at the same width and vocabulary: results/depth.md, .json, .png.

    python prepare.py --dataset cpu-mix --name cpu-mix-2560 --vocab_size 2560
    python -m experiments.depth                      # 21 runs, dev/queue.sh's lanes
    python -m experiments.depth --quick --dataset tiny --seeds 2   # tiny shapes: the tests

A. Bochkov, "Language Models Without a Trainable Input Embedding Table: Learning from Fixed Minimal
Binary Token Codes" (arXiv:2605.09751) trains 32 layers at d_model 1024, V = 65,536, ~17B tokens, three
seeds: validation perplexity 2.44 with the learned table, 2.36 with binary codes (-3.3%), 2.39 with
affine (-2.0%), inside the 4.8% seed-to-seed spread; the table is 67.1M of 537M parameters (12.5%).
Here the shape is experiments/config/depth_cpu.py (32 x 40, V = 2,560: the table 12.5% of the learned
model, 2.02 tokens a parameter); the arms, over --seeds:

    32 layers    learned, binary, affine
    6, 12 layers learned, binary (the depth axis at this shape)

Stability, per run: the updates skipped for a non-finite loss or gradient (train.py's log), the largest
gradient norm before clipping and the step it came at (the log's grad_norm_max), and the RMS of the
residual stream at the last block's output at the end (held-out windows through the final checkpoint).
Seed 0 of learned and binary at 32 layers first runs with --nonfinite=stop (no update skipped): if it
stops, an update would have been lost without the guard; it then resumes from its last checkpoint with
the guard, as every other run has it. Finished runs are kept (experiments/keep.py).
"""

from tablefree.common import interrupt_quietly
interrupt_quietly(__name__, "depth.py")  # is one line, not a traceback

import math
import sys

from experiments.depth_runs import (ARMS, PAPER, STRICT, arms_at, cell, depth_trend, kind, make_run, param_table,
                                    per_doubling_error, stability_cell)
from experiments.outputs import results_files, save_figure, write_results
from experiments.runs import ROOT, made_free_first, run_dir, runs_root, train_settings
from experiments.stats import lane_hours, lane_hours_line, paired, summarize
from tablefree.common import ArgumentParser, require, user_errors
from tablefree.data import Dataset
from tablefree.device import machine, measured_on
from tablefree.reports import pyplot

BASE = [str(ROOT / "experiments" / "config" / "depth_cpu.py")]
QUICK = ["--n_head=2", "--n_embd=16", "--block_size=32", "--batch_size=4", "--max_iters=12", "--lr_decay_iters=12",
         "--warmup_iters=2", "--eval_interval=6", "--eval_iters=2", "--log_interval=3"]
DEPTHS, QUICK_DEPTHS = (6, 12, 32), (1, 2, 3)  # the last is the papers' depth (or stands for it)
def summarize_depth(made, depths):
    """Every depth's statistics (stats.summarize: mean ± std, spread, gaps, steps to learned's final
    loss), the paired gaps to learned in perplexity (%) and bits per byte, and the depth trend."""
    out = {"depths": {}, "trend": None}
    bpb_gaps = {}
    for depth in depths:
        runs = {arm: [r for r, _ in made[depth][arm]] for arm in arms_at(depth, depths)}
        summary = summarize(runs)
        for arm in runs:
            if arm != "learned":
                summary[arm]["paired_ppl"] = paired([r["val_ppl"] / l["val_ppl"] - 1 for r, l in
                                                     zip(runs[arm], runs["learned"])], [0.0] * len(runs[arm]))
                summary[arm]["paired_bpb"] = paired([r["val_bpb"] for r in runs[arm]],
                                                    [r["val_bpb"] for r in runs["learned"]])
            summary[arm]["stability"] = [s for _, s in made[depth][arm]]
        bpb_gaps[depth] = [r["val_bpb"] - l["val_bpb"] for r, l in zip(runs["binary"], runs["learned"])]
        out["depths"][depth] = summary
    out["trend"] = depth_trend(depths, bpb_gaps)
    out["lane_hours"] = lane_hours(r for depth in depths for rows in made[depth].values() for r, _ in rows)
    return out


def report(command, info, summary, params, depths, n_embd, vocab_size):
    deepest = depths[-1]
    learned = params[deepest]["learned"]
    bits = math.ceil(math.log2(vocab_size))  # K: binary's code, tiled n_embd / K times
    lines = [f"# Bochkov's comparison at {deepest} layers, {n_embd} wide: {n_embd / bits:.1f} tiles of a {bits}-bit "
             f"code", "",
             measured_on(command, info) + " Mean ± std over seeds; paired gaps (per seed, against learned of the "
             "same seed) with their standard error. The shape and the protocol: experiments/depth.py's docstring.", "",
             "| layers | input | trainable | input | body | head | table share |", "|---|---|---|---|---|---|---|"]
    for depth in depths:
        for arm, p in params[depth].items():
            lines.append(f"| {depth} | {arm} | {p['trainable']:,} | {p['input']:,} | {p['body']:,} | {p['head']:,} | "
                         f"{100 * params[depth]['learned']['input'] / params[depth]['learned']['trainable']:.1f}% |")
    lines += ["", f"The table is {100 * learned['input'] / learned['trainable']:.1f}% of the learned model at {deepest} "
                  f"layers (the paper: {100 * PAPER['table_share']:.1f}%).", "",
              "| layers | input | seeds | val loss | val ppl | val bits/byte | ppl spread | ppl vs learned (paired) | "
              "bits/byte vs learned (paired) | steps to learned's final loss | wall per run | at its median step |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for depth in depths:
        for arm, s in summary["depths"][depth].items():
            t, pp, pb = s.get("steps_to_learned"), s.get("paired_ppl"), s.get("paired_bpb")
            reach = (f"{t['steps']:.0f} ({t['reached']} of {t['seeds']} seeds)" if t and t["reached"]
                     else "never" if t else "")
            ppl_gap = f"{100 * pp['mean']:+.2f}% ± {100 * pp['stderr']:.2f}%" if pp else ""
            bpb_gap = f"{pb['mean']:+.4f} ± {pb['stderr']:.4f}" if pb else ""
            lines.append(f"| {depth} | {arm} | {s['seeds']} | {cell(s['val_loss'], s['val_loss_std'])} | "
                         f"{cell(s['val_ppl'], s['val_ppl_std'], 3)} | {cell(s['val_bpb'], s['val_bpb_std'])} | "
                         f"{100 * s['spread']:.1f}% | {ppl_gap} | {bpb_gap} | {reach} | {s['wall_s'] / 60:.1f} min | "
                         f"{s['steady_s'] / 60:.1f} min |")
    trend = summary["trend"]
    lines += ["", lane_hours_line(summary["lane_hours"]), "",
              f"Beside the paper ({PAPER['depth']} layers): perplexity learned {PAPER['ppl']['learned']}, binary "
                  f"{PAPER['ppl']['binary']} ({100 * PAPER['vs_learned']['binary']:+.1f}%), affine "
                  f"{PAPER['ppl']['affine']} ({100 * PAPER['vs_learned']['affine']:+.1f}%), a seed-to-seed spread of "
                  f"{100 * PAPER['spread']:.1f}%.", "",
              f"- Depth trend of binary's gap to learned (bits per byte, every seed's paired gap): "
              f"{trend['per_doubling']:+.4f}{per_doubling_error(trend)} per doubling of depth; fitted "
              + ", ".join(f"{v:+.4f} at {d}" for d, v in trend["at"].items()) + " layers.", "",
              "Stability per seed (updates skipped for a non-finite loss or gradient; the largest gradient norm "
              "before clipping @ its step; the residual stream's RMS at the last block):", "",
              "| layers | input | per seed | without the guard (seed 0, --nonfinite=stop) |", "|---|---|---|---|"]
    for depth in depths:
        for arm, s in summary["depths"][depth].items():
            strict = s["stability"][0]["strict"]
            said = "" if strict is None else "stopped: an update would have been lost" if strict["stopped"] else \
                "ran to the end: no update lost"
            lines.append(f"| {depth} | {arm} | {stability_cell(s['stability'])} | {said} |")
    return "\n".join(lines) + "\n"


def plot(summary, depths, path, command):
    """Bits per byte against depth for each input, and binary's paired gap with the fitted line."""
    plt = pyplot()
    if plt is None:
        return
    fig, (bpb, gaps) = plt.subplots(1, 2, figsize=(12, 4.5))
    for arm in ARMS:
        at = [d for d in depths if arm in summary["depths"][d]]
        bpb.errorbar(at, [summary["depths"][d][arm]["val_bpb"] for d in at],
                     yerr=[summary["depths"][d][arm]["val_bpb_std"] for d in at], marker="o", capsize=3, label=arm)
    bpb.set(xscale="log", xlabel="layers", ylabel="val bits/byte, mean ± std over seeds", title="Held-out loss")
    gaps.errorbar(depths, [summary["depths"][d]["binary"]["paired_bpb"]["mean"] for d in depths],
                  yerr=[summary["depths"][d]["binary"]["paired_bpb"]["stderr"] for d in depths], marker="o", capsize=3,
                  label="binary - learned (paired, ± s.e.)")
    trend = summary["trend"]
    gaps.plot(depths, [trend["at"][d] for d in depths], linestyle="--", label="fitted: a + b log2(layers)")
    gaps.axhline(0.0, color="gray", linewidth=0.8)
    gaps.set(xscale="log", xlabel="layers", ylabel="bits/byte gap", title="Binary's gap to the table against depth")
    for axis in (bpb, gaps):
        axis.set_xticks(depths, [str(d) for d in depths])
        axis.set_xticks([], minor=True)  # a log axis's own minor labels (2 x 10^1) would overlap 32
    save_figure(fig, (bpb, gaps), path, command)
    plt.close(fig)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = ArgumentParser(prog="python -m experiments.depth", description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="tiny shapes and steps (1, 2, 3 layers): the study's logic")
    p.add_argument("--dataset", default="cpu-mix-2560", help="a prepared dataset (its tokenizer sets V)")
    p.add_argument("--data_dir", default="data")
    p.add_argument("--runs_dir", default="out-depth")
    p.add_argument("--results_dir", default="results")
    p.add_argument("--overwrite", action="store_true", help="replace a report of another command line, or a committed one")
    with user_errors("depth.py"):
        args = p.parse_args(argv)
        require(args.seeds >= 1, "--seeds", args.seeds, "at least 1")
        depths = QUICK_DEPTHS if args.quick else DEPTHS
        train_argv = [*BASE, *(QUICK if args.quick else []), f"--dataset={args.dataset}", f"--data_dir={args.data_dir}"]
        settings = train_settings(train_argv)
        md, js, png = results_files(args.results_dir, "depth", "depth", argv, args.overwrite)
        root = runs_root(args.runs_dir)
        # the deepest first (the longest runs, and the paper's claim), its strict seeds before the rest; two
        # processes walking this list (the queue's lanes) make different runs side by side (runs.made_free_first)
        items = [(arm, d, s) for d in reversed(depths) for s in range(args.seeds) for arm in arms_at(d, depths)]
        done = made_free_first(items, lambda item: run_dir(root, kind(item[0], item[1]), item[2]), lambda item: make_run(
            train_argv, settings, *item, root, args.data_dir, strict=item[2] == 0 and item[1] == depths[-1]
            and item[0] in STRICT))
        made = {d: {arm: [done[items.index((arm, d, s))] for s in range(args.seeds)] for arm in arms_at(d, depths)}
                for d in depths}
        summary, info = summarize_depth(made, depths), machine()
        vocab_size = Dataset(args.data_dir, args.dataset, settings["block_size"]).vocab_size
        params = param_table(settings, depths, vocab_size)
        command = " ".join(["python -m experiments.depth", *argv])
        table = report(command, info, summary, params, depths, settings["n_embd"], vocab_size)
        write_results(md, js, command, table, {"machine": info, "params": params, "summary": summary, "paper": PAPER,
                                               "runs": {d: {arm: [{"run": r, "stability": st} for r, st in rows]
                                                            for arm, rows in made[d].items()} for d in depths}})
        plot(summary, depths, png, command)
    print(table)


if __name__ == "__main__":
    main()
