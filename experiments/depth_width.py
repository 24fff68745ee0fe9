"""Bochkov's 32-layer comparison where the code is not starved: the scaling study's depth axis carried to
32 layers at its base width (n_embd 160, V = 1,024: the 10-bit code tiled 16 times), and the width a
fixed code needs at 32 layers: results/depth-width.md, .json, .png.

    python prepare.py --dataset cpu-mix --name cpu-mix-1k --vocab_size 1024
    python -m experiments.depth_width                 # dev/queue.sh's lanes: about 16 lane-hours
    python -m experiments.depth_width --quick --dataset tiny --seeds 1   # tiny shapes: the tests

experiments/depth.py ran the comparison at 32 x 40 (V = 2,560: a 12-bit code tiled 3.3 times) and found
binary far behind the table; results/scaling.md found the gap at 6 layers closing with width (+0.128 bits
per byte at n_embd 64, +0.044 at 160). This study asks the same question at 16 tiles. Every run is
scaling.py's base point (experiments/config/compare_cpu.py, scaling_cpu.py: 1,200 steps of 2,048
tokens = 2.46M, its schedule and batch, our choice) with one change, the depth or the width, made in
this order:

    32 x 160     learned, binary, affine   the paper's depth; seed 0 of learned and binary first with
                                           --nonfinite=stop (depth_runs.make_run: the stability measures)
    32 x 80      learned, binary           the width axis, beside 160 and depth.py's 32 x 40
    24 x 160     learned, binary           --seeds_24 2 where the budget needs it (the report says so)
    3, 6, 12     learned, binary           scaling.py's kept runs where every setting that makes a run,
                                           the dataset and the schedule match (why_not_kept); else here

The paper's numbers are depth_runs.PAPER. A gap is binary's (or affine's) val bits per byte or perplexity less
learned's of the same seed: per seed, and their mean with its standard error.
"""

from tablefree.common import interrupt_quietly
interrupt_quietly(__name__, "depth_width.py")  # is one line, not a traceback

import json
import math
import sys

from experiments import depth_runs
from experiments.outputs import results_files, save_figure, write_results
from experiments.runs import (ROOT, finished, made_free_first, other_settings, read_run, run_arguments, run_dir,
                              runs_root, train_settings)
from experiments.stats import lane_hours, lane_hours_line, paired, summarize
from tablefree.common import ArgumentParser, require, user_errors
from tablefree.reports import pyplot
from tablefree.data import read_meta
from tablefree.device import machine, measured_on

BASE = [str(ROOT / "experiments" / "config" / name) for name in ("compare_cpu.py", "scaling_cpu.py")]
QUICK = ["--n_head=2", "--n_embd=16", "--block_size=32", "--batch_size=4", "--max_iters=12", "--lr_decay_iters=12",
         "--warmup_iters=2", "--eval_interval=6", "--eval_iters=2", "--log_interval=3"]
FULL = {"depths": (3, 6, 12, 24, 32), "width": 160, "widths": (80,)}  # widths: the others, at the deepest
TINY = {"depths": (1, 2, 3), "width": 16, "widths": (12,)}  # V = 300: 9 bits
KEPT_POINTS = {3: "depth-3", 6: "base", 12: "depth-12"}  # depth -> scaling.py's point at n_embd 160
NARROW = ROOT / "results" / "depth.json"  # depth.py's 32 x 40 study: the width axis's narrowest point


def code_bits(vocab_size):
    return math.ceil(math.log2(vocab_size))


def plan(shape, seeds, seeds_24):
    """[(arm, layers, width, seed)] in the order they are made: the deepest at the base width (its strict
    seeds first), the other widths at that depth, then the shallower depths, deepest first."""
    deepest, rest = shape["depths"][-1], shape["depths"][-2::-1]
    items = [(arm, deepest, shape["width"], s) for s in range(seeds) for arm in depth_runs.ARMS]
    items += [(arm, deepest, w, s) for w in shape["widths"] for s in range(seeds) for arm in depth_runs.STRICT]
    n = {d: seeds_24 if d == 24 else seeds for d in rest}
    return items + [(arm, d, shape["width"], s) for d in rest for s in range(n[d]) for arm in depth_runs.STRICT]


def why_not_kept(directory, argv, meta, max_iters):
    """None when the kept run at directory is the run argv asks for: every setting that makes a run another
    run (runs.other_settings), the dataset's text, tokenizer and token counts (meta), finished; else why not."""
    try:
        config = json.loads((directory / "config.json").read_text())
    except (OSError, ValueError):
        return "not kept"
    differ = other_settings(directory, argv)
    if differ:
        key, (was, asked) = next(iter(differ.items()))
        return f"made with {key}={was!r}, not {asked!r}"
    differs = [key for key in ("text_sha256", "tokenizer", "vocab_size", "splits")
               if config.get("data", {}).get(key) != meta.get(key)]
    if differs:
        return f"its dataset's {differs[0]} differs"
    return None if finished(directory, max_iters) else "not finished"


def make(item, args, train_argv, settings, root, kept_dir, meta, shape):
    """One item's (read_run, stability or None, where it came from): a matching kept scaling run is read,
    anything else trained here (depth_runs.make_run: the strict first attempt and the stability measures)."""
    arm, layers, width, seed = item
    argv = [*train_argv, f"--n_embd={width}"]
    point = KEPT_POINTS.get(layers) if shape is FULL and width == shape["width"] else None
    if point:
        kept = kept_dir / point / f"{arm}-seed{seed}"
        asked = [*argv, *run_arguments(settings, arm, seed, kept_dir), f"--n_layer={layers}"]
        reason = why_not_kept(kept, asked, meta, settings["max_iters"])
        if reason is None:
            return read_run(kept), None, str(kept.relative_to(ROOT) if kept.is_relative_to(ROOT) else kept)
        print(f"== {arm} at {layers} layers, seed {seed}: scaling.py's run not used ({reason}); made here", flush=True)
    where = root if width == shape["width"] else root / f"n_embd{width}"
    strict = (seed, layers, width) == (0, shape["depths"][-1], shape["width"]) and arm in depth_runs.STRICT
    run, stability = depth_runs.make_run(argv, {**settings, "n_embd": width}, arm, layers, seed, where, args.data_dir,
                                    strict)
    return run, stability, "here"


def gap_rows(runs, arm):
    """binary's (or affine's) paired gaps to learned: per seed and summarized, in bits per byte and in
    perplexity (a ratio less 1)."""
    bpb = [r["val_bpb"] - l["val_bpb"] for r, l in zip(runs[arm], runs["learned"])]
    ppl = [r["val_ppl"] / l["val_ppl"] - 1 for r, l in zip(runs[arm], runs["learned"])]
    return {"bpb": bpb, "ppl": ppl, "paired_bpb": paired(bpb, [0.0] * len(bpb)),
            "paired_ppl": paired(ppl, [0.0] * len(ppl))}


def summarize_study(made, shape, vocab_size):
    """Per depth at the base width and per width at the deepest: statistics (stats.summarize), each arm's
    gaps (gap_rows); binary's depth trend (depth_runs.depth_trend) and width trend (per doubling of n_embd)."""
    deepest, base = shape["depths"][-1], shape["width"]
    out = {"depths": {}, "widths": {}}
    for layers in shape["depths"]:
        runs = {arm: [r for r, _, _ in made[(layers, base)][arm]] for arm in made[(layers, base)]}
        out["depths"][layers] = cells(runs, made[(layers, base)])
    for width in (*shape["widths"], base):
        runs = {arm: [r for r, _, _ in made[(deepest, width)][arm]] for arm in depth_runs.STRICT}
        out["widths"][width] = {**cells(runs, made[(deepest, width)]), "tiles": width / code_bits(vocab_size)}
    bpb = {d: out["depths"][d]["binary"]["gaps"]["bpb"] for d in shape["depths"]}
    out["trend"] = depth_runs.depth_trend(shape["depths"], bpb)
    widths = sorted(out["widths"])
    out["width_trend"] = depth_runs.depth_trend(widths, {w: out["widths"][w]["binary"]["gaps"]["bpb"] for w in widths})
    out["lane_hours"] = lane_hours(r for rows in made.values() for arm in rows.values() for r, _, _ in arm)
    return out


def cells(runs, rows):
    summary = summarize(runs)
    for arm in runs:
        summary[arm]["stability"] = [s for _, s, _ in rows[arm]]
        summary[arm]["from"] = [where for _, _, where in rows[arm]]
        if arm != "learned":
            summary[arm]["gaps"] = gap_rows(runs, arm)
    return summary


def narrow_point():
    """depth.py's 32 x 40 result, from its report: {tiles, table share, binary's gaps}; None without it."""
    try:
        kept = json.loads(NARROW.read_text())
        binary, params = kept["summary"]["depths"]["32"]["binary"], kept["params"]["32"]["learned"]
        return {"n_embd": 40, "vocab_size": 2560, "tiles": 40 / code_bits(2560), "seeds": binary["seeds"],
                "share": params["input"] / params["trainable"], "tokens": binary["tokens"],
                "paired_bpb": binary["paired_bpb"], "paired_ppl": binary["paired_ppl"]}
    except (OSError, ValueError, KeyError):
        return None


def seeds_cell(values, percent=False):
    return ", ".join(f"{100 * v:+.1f}%" if percent else f"{v:+.4f}" for v in values)


def paired_cell(p, percent=False):
    return f"{100 * p['mean']:+.2f}% ± {100 * p['stderr']:.2f}%" if percent else f"{p['mean']:+.4f} ± {p['stderr']:.4f}"


def trend_line(trend, axis):
    return (f"{trend['per_doubling']:+.4f}{depth_runs.per_doubling_error(trend)} bits per byte per doubling of {axis}; "
            "fitted " + ", ".join(f"{v:+.4f} at {k}" for k, v in trend["at"].items()))


def gap_table(summary, key, label):
    lines = [f"| {label} | input | seeds | val bits/byte | val ppl | bits/byte vs learned, per seed | paired | "
             "ppl vs learned, per seed | paired | steps to learned's final loss | runs |", "|" + "---|" * 11]
    for point, arms in summary.items():
        for arm, s in arms.items():
            if not isinstance(s, dict):
                continue
            g, t = s.get("gaps"), s.get("steps_to_learned")
            reach = (f"{t['steps']:.0f} ({t['reached']} of {t['seeds']})" if t and t["reached"] else "never" if t else "")
            made_here = sum(w == "here" for w in s["from"])
            source = "here" if made_here == len(s["from"]) else "scaling.py's" if not made_here else "both"
            lines.append(f"| {point} | {arm} | {s['seeds']} | {depth_runs.cell(s['val_bpb'], s['val_bpb_std'])} | "
                         f"{depth_runs.cell(s['val_ppl'], s['val_ppl_std'], 3)} | "
                         + (f"{seeds_cell(g['bpb'])} | {paired_cell(g['paired_bpb'])} | {seeds_cell(g['ppl'], True)} | "
                            f"{paired_cell(g['paired_ppl'], True)} | " if g else "| | | | ")
                         + f"{reach} | {source} |")
    return lines


def width_table(summary, narrow, vocab_size, params):
    lines = ["| n_embd | V | bits K | tiles a bit (n_embd / K) | the table's share | tokens | seeds | "
             "binary - learned, bits/byte | perplexity |", "|" + "---|" * 9]
    if narrow:
        lines.append(f"| 40 (depth.py) | 2,560 | 12 | {narrow['tiles']:.1f} | {100 * narrow['share']:.1f}% | "
                     f"{narrow['tokens'] / 1e6:.2f}M | {narrow['seeds']} | {paired_cell(narrow['paired_bpb'])} | "
                     f"{paired_cell(narrow['paired_ppl'], True)} |")
    for width in sorted(summary["widths"]):
        w = summary["widths"][width]
        b, share = w["binary"], params[width]["input"] / params[width]["trainable"]
        lines.append(f"| {width} | {vocab_size:,} | {code_bits(vocab_size)} | {w['tiles']:.1f} | {100 * share:.1f}% | "
                     f"{b['tokens'] / 1e6:.2f}M | {b['seeds']} | {paired_cell(b['gaps']['paired_bpb'])} | "
                     f"{paired_cell(b['gaps']['paired_ppl'], True)} |")
    return lines


def reached(summary):
    """Where binary is level with the table at the deepest: the widths whose paired gap is within two
    standard errors of 0 or below it."""
    level = [w for w, s in sorted(summary["widths"].items())
             if s["binary"]["gaps"]["paired_bpb"]["mean"] <= 2 * s["binary"]["gaps"]["paired_bpb"]["stderr"]]
    if level:
        return f"binary is level with the table (within two standard errors) or ahead at n_embd {level[0]}."
    return ("binary is behind the table at every width run; the trend above is what the points support (no "
            "extrapolation past them).")


def report(command, info, summary, shape, vocab_size, params, narrow, seeds_24):
    deepest, base, paper = shape["depths"][-1], shape["width"], depth_runs.PAPER
    k = code_bits(vocab_size)
    learned = params[base]
    lines = [f"# Bochkov's comparison at {deepest} layers, {base} wide: {base / k:.0f} tiles of a {k}-bit code", "",
             measured_on(command, info) + " The shape and the protocol: experiments/depth_width.py's docstring.", "",
             f"At n_embd {base} and V = {vocab_size:,} the {k}-bit code is tiled {base / k:.0f} times (the paper: "
             f"1,024 / 16 = 64); depth.py's 32 x 40 study tiled a 12-bit code 3.3 times. The table is "
             f"{100 * learned['input'] / learned['trainable']:.1f}% of the learned model at {deepest} x {base} (the "
             f"paper: {100 * paper['table_share']:.1f}%).", "",
             f"## Depth, at n_embd {base}", ""]
    lines += gap_table(summary["depths"], "layers", "layers")
    lines += ["", f"- binary's gap against depth: {trend_line(summary['trend'], 'depth')} layers.",
              f"- The paper ({paper['depth']} layers, d_model 1,024, V = 65,536): perplexity learned "
              f"{paper['ppl']['learned']}, binary {paper['ppl']['binary']} ({100 * paper['vs_learned']['binary']:+.1f}%), "
              f"affine {paper['ppl']['affine']} ({100 * paper['vs_learned']['affine']:+.1f}%), a seed spread of "
              f"{100 * paper['spread']:.1f}%."]
    if seeds_24 < len(summary["depths"][deepest]["learned"]["from"]):
        lines.append(f"- 24 layers ran {seeds_24} seed(s), not 3: the budget (experiments/depth_width.py's --seeds_24).")
    lines += ["", f"## Width, at {deepest} layers", ""] + width_table(summary, narrow, vocab_size, params)
    lines += ["", f"- binary's gap against width (n_embd {', '.join(map(str, sorted(summary['widths'])))}; same data "
                  f"and V): {trend_line(summary['width_trend'], 'n_embd')}.", f"- {reached(summary)}",
              "- The 40-wide row is another dataset (V = 2,560) and budget (1.66M tokens): beside, not on, the line.",
              "", "Stability of the runs made here (depth_runs.make_run: updates skipped; the largest gradient norm @ its "
              "step; the residual RMS at the last block):", "", "| layers x n_embd | input | per seed | seed 0 "
              "under --nonfinite=stop |", "|---|---|---|---|"]
    for (layers, width), arms in stability_rows(summary, shape):
        for arm, s in arms.items():
            strict = s["stability"][0]["strict"] if s["stability"][0] else None
            said = "" if strict is None else "stopped: an update would have been lost" if strict["stopped"] else \
                "ran to the end: no update lost"
            lines.append(f"| {layers} x {width} | {arm} | {depth_runs.stability_cell(s['stability'])} | {said} |")
    lines += ["", lane_hours_line(summary["lane_hours"])]
    return "\n".join(lines) + "\n"


def stability_rows(summary, shape):
    """((layers, width), {arm: statistics}) of every point whose runs were all made here."""
    points = [((d, shape["width"]), summary["depths"][d]) for d in shape["depths"]]
    points += [((shape["depths"][-1], w), summary["widths"][w]) for w in shape["widths"]]
    return [(p, {a: s for a, s in arms.items() if isinstance(s, dict) and all(s["stability"])}) for p, arms in points
            if all(all(s["stability"]) for s in arms.values() if isinstance(s, dict))]


def plot(summary, shape, path, command):
    """binary's paired gap with its fitted line against depth (left) and against width (right)."""
    plt = pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for axis, points, trend, label in ((axes[0], summary["depths"], summary["trend"], "layers"),
                                       (axes[1], summary["widths"], summary["width_trend"], "n_embd")):
        at = sorted(points)
        gaps = [points[p]["binary"]["gaps"]["paired_bpb"] for p in at]
        axis.errorbar(at, [g["mean"] for g in gaps], yerr=[g["stderr"] for g in gaps], marker="o", capsize=3,
                      label="binary - learned (paired, ± s.e.)")
        axis.plot(at, [trend["at"][p] for p in at], linestyle="--", label=f"fitted: a + b log2({label})")
        axis.axhline(0.0, color="gray", linewidth=0.8)
        axis.set(xscale="log", xlabel=label, ylabel="val bits/byte gap")
        axis.set_xticks(at, [str(p) for p in at])
        axis.set_xticks([], minor=True)
    axes[0].set_title(f"Against depth, n_embd {shape['width']}")
    axes[1].set_title(f"Against width, {shape['depths'][-1]} layers")
    save_figure(fig, axes, path, command)
    plt.close(fig)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = ArgumentParser(prog="python -m experiments.depth_width", description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--seeds_24", type=int, help="seeds at 24 layers (default: --seeds; 2 saves 2 runs)")
    p.add_argument("--quick", action="store_true", help="tiny shapes and steps (1, 2, 3 layers): the study's logic")
    p.add_argument("--dataset", default="cpu-mix-1k", help="a prepared dataset (its tokenizer sets V)")
    p.add_argument("--data_dir", default="data")
    p.add_argument("--runs_dir", default="out-depth-width")
    p.add_argument("--kept_dir", default=str(ROOT / "out-compare" / "scaling"), help="scaling.py's runs")
    p.add_argument("--results_dir", default="results")
    p.add_argument("--overwrite", action="store_true", help="replace a report of another command line, or a committed one")
    with user_errors("depth_width.py"):
        args = p.parse_args(argv)
        require(1 <= args.seeds <= 10, "--seeds", args.seeds, "from 1 to 10")
        args.seeds_24 = args.seeds if args.seeds_24 is None else args.seeds_24
        require(1 <= args.seeds_24 <= args.seeds, "--seeds_24", args.seeds_24, "from 1 to --seeds")
        shape = TINY if args.quick else FULL
        train_argv = [*BASE, *(QUICK if args.quick else []), f"--dataset={args.dataset}", f"--data_dir={args.data_dir}"]
        settings = train_settings(train_argv)
        meta = read_meta(f"{args.data_dir}/{args.dataset}")
        md, js, png = results_files(args.results_dir, "depth-width", "depth_width", argv, args.overwrite)
        root, kept_dir = runs_root(args.runs_dir), runs_root(args.kept_dir)
        items = plan(shape, args.seeds, args.seeds_24)
        where = {item: run_dir(root if item[2] == shape["width"] else root / f"n_embd{item[2]}",
                               depth_runs.kind(item[0], item[1]), item[3]) for item in items}
        done = dict(zip(items, made_free_first(items, where.get, lambda item: make(
            item, args, train_argv, settings, root, kept_dir, meta, shape))))
        made = {}
        for (arm, layers, width, seed), row in done.items():
            made.setdefault((layers, width), {}).setdefault(arm, []).append(row)
        params = {w: depth_runs.param_table({**settings, "n_embd": w}, shape["depths"][-1:], meta["vocab_size"])
                  [shape["depths"][-1]]["learned"] for w in (*shape["widths"], shape["width"])}
        summary, info = summarize_study(made, shape, meta["vocab_size"]), machine()
        narrow = None if args.quick else narrow_point()
        command = " ".join(["python -m experiments.depth_width", *argv])
        table = report(command, info, summary, shape, meta["vocab_size"], params, narrow, args.seeds_24)
        write_results(md, js, command, table, {"machine": info, "params": params, "summary": summary,
                                               "paper": depth_runs.PAPER, "narrow": narrow})
        plot(summary, shape, png, command)
    print(table)


if __name__ == "__main__":
    main()
