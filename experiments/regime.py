"""The frozen-code paper's central comparison in its own regime, where the tied table is most of the
model (Gemma 3 270M: 168M of 268M parameters): results/regime.md, .json, .png.

    python prepare.py --dataset cpu-mix --name cpu-mix-8k --vocab_size 8192
    python -m experiments.regime                      # 13 runs (one of them 4x long), dev/queue.sh's lanes
    python -m experiments.regime --quick --dataset tiny --new_tokens 16 --seeds 1   # tiny shapes: the tests

The paper trains Gemma 3 270M's body on 2.05B tokens with and without its table: "the learned table
buys 0.20 nats of validation loss for 2.6 times the trainable parameters", the frozen table "wins by
1.7 to 2.3 nats on rare words" and "accepts 10,000 new words after training with a 3% cost where the
learned table collapses by 43%". Here the shape is experiments/config/regime_cpu.py (V = 8,192, 6 x 64:
the table 64% of the learned model, 2.66x the frozen one's trainable parameters, 7.5 tokens each),
the float body, these arms over --seeds:

    learned+tied        the control: one table in and out, as Gemma's
    frozen+codes        codes from the control of its seed (as experiments.compare), read back as its head
    frozen+codes-long   codes from one control trained LONGER times as long (seed 0), the same codes for
                        every seed: the paper derives its codes once, from a table trained far longer than
                        its runs (our choice of a stand-in: the corpus holds no other text to train on)
    binary              Bochkov's fixed id codes with an untied head (its trainable count is the control's)

After each run: its held-out loss by train-count bucket (tools.evaluate's rare_tokens, the decade
edges of tools/probes.py, rarest first) and, for the pair, 2,048 new words (tools.extend: mean rows,
no adaptation). The paper's abstract gives no edge for "rare words"; our "rare" is the buckets a
token occurs under RARE times in the training split. Finished runs, scores and extensions are kept.
"""

from tablefree.common import interrupt_quietly
interrupt_quietly(__name__, "regime.py")  # is one line, not a traceback

import json
import statistics
import sys

from experiments.outputs import results_files, save_figure, write_results
from experiments.runs import (ROOT, cell_report, evaluated, extend, finished, made_free_first, run_arguments, run_dir,
                              runs_root, scored, train_run, train_settings, write_table)
from experiments.stats import bucket_rows, gap, mean_std, rare_gap as stats_rare_gap, summarize
from tablefree.common import ArgumentParser, require, user_errors
from tablefree.reports import pyplot
from tablefree.device import machine, measured_on
from tablefree.diagnostics import describe_quality

BASE = [str(ROOT / "experiments" / "config" / "regime_cpu.py")]
QUICK = ["--n_layer=1", "--n_head=2", "--n_embd=16", "--block_size=32", "--batch_size=4", "--max_iters=12",
         "--lr_decay_iters=12", "--warmup_iters=2", "--eval_interval=6", "--eval_iters=2", "--log_interval=6"]
PAIR, LONG, ARMS = ("learned+tied", "frozen+codes"), "frozen+codes-long", ("learned+tied", "frozen+codes",
                                                                          "frozen+codes-long", "binary")
LONGER, RARE = 4, 100  # the long source's steps over the study's; the train count below which a token is rare
PAPER = {"gap": 0.20, "ratio": 2.6, "rare": (1.7, 2.3), "extension": (0.03, 0.43)}  # the frozen-code paper's


def long_source(root):
    return root / f"learned+tied-{LONGER}x-seed0"


def long_table(root):
    """The long source's input table (V x n_embd float32, .npy): what frozen+codes-long derives its
    codes from, kept (experiments/keep.py) where the source's checkpoint is not, so a new machine
    never trains the longest run again for it."""
    return long_source(root) / "table.npy"


def run_list(seeds, root):
    """[(arm, seed, run directory)]: the long source first (the longest run: the first lane takes it),
    then every arm's seeds, a frozen arm after its source."""
    return [("learned+tied", f"0, {LONGER}x long", long_source(root)),
            *[(arm, s, run_dir(root, arm, s)) for arm in ("learned+tied", "binary", "frozen+codes", LONG)
              for s in range(seeds)]]


def make_runs(argv, settings, seeds, root, data_dir, cell):
    """({arm: [(read_run, bucket losses, the extension row or None) per seed]}, the long source's
    read_run): each run trained (or read), scored and extended while its checkpoint is at hand.
    Two processes share the list (runs.made_free_first): a frozen run makes its source first, which
    waits while the other process makes it."""
    steps = settings["max_iters"]
    items = run_list(seeds, root)
    source_of = {item: items[0] if item[0] == LONG else ("learned+tied", item[1], run_dir(root, "learned+tied", item[1]))
                 for item in items if item[0].startswith("frozen")}

    def done(arm, seed, directory):  # nothing left that needs the run's checkpoint
        return (finished(directory, steps) and "rare_tokens" in scored(directory, steps)
                and (arm not in PAIR or cell_report(root, cell, arm, seed).exists()))

    def make(item):
        arm, seed, directory = item
        if directory == long_source(root):  # its table, once written, is all the long arm reads
            long_steps = [f"--max_iters={LONGER * steps}", f"--lr_decay_iters={LONGER * steps}"]
            run = train_run([*argv, *run_arguments(settings, arm, 0, root), *long_steps], directory, LONGER * steps,
                            f"the {LONGER}x long source", checkpoint=not long_table(root).exists())
            if not long_table(root).exists():
                write_table(directory, long_table(root))
            return run
        if item in source_of:
            make(source_of[item])  # made (or waited for) before its codes are read
        codes_needed = any(not done(*run) for run, source in source_of.items() if source == item)  # extend reads it too
        source = long_table(root) if arm == LONG else None
        run = train_run([*argv, *run_arguments(settings, arm.removesuffix("-long"), seed, root, source)], directory,
                        steps, f"{arm}, seed {seed}", checkpoint=codes_needed or not done(arm, seed, directory))
        buckets = evaluated(directory, steps, ["rare_tokens"], data_dir)["rare_tokens"]["buckets"]
        return run, buckets, extend(directory, arm, seed, cell, root, data_dir) if arm in PAIR else None

    made = dict(zip(items, made_free_first(items, lambda item: item[2], make)))
    return {arm: [made[item] for item in items[1:] if item[0] == arm] for arm in ARMS}, made[items[0]]


def parts(directory):
    """A run's trainable parameters by part (config.json's params: input, body, head, trainable)."""
    return json.loads((directory / "config.json").read_text())["params"]


def bucket_table(made):
    """[(bucket label, targets, {arm: mean loss over seeds or None})], rarest first (stats.bucket_rows)."""
    return bucket_rows({arm: [runs[1] for runs in made[arm]] for arm in ARMS})


def rare_gap(rows, arm):
    """The arm's mean loss minus the control's over the rare buckets (weighted by their targets)."""
    return stats_rare_gap(rows, arm, "learned+tied", RARE)


def summarize_regime(made, source, new_tokens):
    """The statistics of every arm against the control (stats.summarize's, each frozen arm as
    'frozen+codes' in turn so that its control is the tied table), the buckets and the extension."""
    runs = {arm: [r[0] for r in rows] for arm, rows in made.items()}
    summary = {arm: summarize({"learned+tied": runs["learned+tied"], "frozen+codes": runs[arm]})["frozen+codes"]
               for arm in ("frozen+codes", LONG)}
    summary |= summarize({arm: runs[arm] for arm in ("learned+tied", "binary")})
    summary["binary"]["vs_learned"] = gap(summary["binary"], summary["learned+tied"])  # its control is untied
    for arm in PAIR:
        summary[arm]["extension"], summary[arm]["extension_std"] = mean_std(r[2]["bpb_change"] for r in made[arm])
    rows = bucket_table(made)
    return {"arms": summary, "buckets": rows, "new_tokens": new_tokens, "rare_gap": {arm: rare_gap(rows, arm) for arm in ARMS[1:]},
            "source": {"val_loss": source["val_loss"], "val_bpb": source["val_bpb"], "tokens": source["tokens"]}}


def report(command, info, summary, params):
    arms = summary["arms"]
    table_share = params["learned+tied"]["input"] / params["learned+tied"]["trainable"]
    lines = [f"# The frozen-code paper's regime: the tied table {100 * table_share:.0f}% of the model", "",
             measured_on(command, info) + " Mean ± std over seeds; gaps against learned+tied with their standard "
             "error. The arms and the protocol: experiments/regime.py's docstring.", "",
             "| arm | trainable | input | body | head | the control's over this |", "|---|---|---|---|---|---|"]
    for arm, p in params.items():
        lines.append(f"| {arm} | {p['trainable']:,} | {p['input']:,} | {p['body']:,} | {p['head']:,} | "
                     f"{params['learned+tied']['trainable'] / p['trainable']:.2f}x |")
    lines += ["", "| arm | seeds | val loss | val bits/byte | gap (nats) | steps to the control's final loss | "
                  "wall per run |", "|---|---|---|---|---|---|---|"]
    for arm in ARMS:
        s = arms[arm]
        v, t = s.get("vs_learned"), s.get("steps_to_learned")
        reach = (f"{t['ratio']:.2f}x ± {t['ratio_std']:.2f} fewer ({t['reached']} of {t['seeds']} seeds)"
                 if t and t["reached"] else "never" if t else "")
        gap_cell = f"{v['loss_gap']:+.4f} ± {v['stderr']:.4f}" if v else ""
        lines.append(f"| {arm} | {s['seeds']} | {s['val_loss']:.4f} ± {s['val_loss_std']:.4f} | {s['val_bpb']:.4f} ± "
                     f"{s['val_bpb_std']:.4f} | {gap_cell} | {reach} | {s['wall_s'] / 60:.1f} min |")
    lines.append("")
    for arm in ("frozen+codes", LONG):
        ratio = params["learned+tied"]["trainable"] / params[arm]["trainable"]
        lines.append(f"- The paper's gap, {arm}: the tied table buys {arms[arm]['vs_learned']['loss_gap']:+.4f} nats "
                     f"for {ratio:.2f}x the trainable parameters (the paper: {PAPER['gap']:.2f} nats for "
                     f"{PAPER['ratio']}x). Its codes: {describe_quality(arms[arm]['code_quality'])}.")
    s = summary["source"]
    lines.append(f"- The long source ({LONGER}x the steps, {s['tokens']:,} tokens): val loss {s['val_loss']:.4f}, "
                 f"{s['val_bpb']:.4f} bits/byte.")
    lines += ["", "Held-out loss (nats) by the target's count in the training split, rarest first (mean over seeds; "
                  "n: held-out targets):", "", "| train count | n | " + " | ".join(ARMS) + " | frozen+codes - control |",
              "|---|---|" + "---|" * (len(ARMS) + 1)]
    for label, n, losses in summary["buckets"]:
        cells = [f"{losses[a]:.3f}" if losses[a] is not None else "" for a in ARMS]
        diff = losses["frozen+codes"] - losses["learned+tied"] if losses["learned+tied"] is not None else None
        lines.append(f"| {label} | {n:,} | " + " | ".join(cells) + f" | {'' if diff is None else f'{diff:+.3f}'} |")
    rare = ", ".join(f"{arm} {g:+.3f}" for arm, g in summary["rare_gap"].items() if g is not None)
    lines += ["", f"- Rare tokens (train count under {RARE}), each arm's loss minus the control's: {rare or 'none held out'} "
                  f"nats (the paper: the frozen table {PAPER['rare'][0]}-{PAPER['rare'][1]} nats better, i.e. "
                  f"-{PAPER['rare'][0]} to -{PAPER['rare'][1]}).",
              f"- {summary['new_tokens']:,} new words (tools.extend, mean rows, no adaptation), held-out bits per byte: " + ", ".join(
                  f"{arm} {100 * arms[arm]['extension']:+.2f}% ± {100 * arms[arm]['extension_std']:.2f}%" for arm in PAIR) +
              f" (the paper, 10,000 words: frozen +{100 * PAPER['extension'][0]:.0f}%, the table "
              f"+{100 * PAPER['extension'][1]:.0f}%)."]
    return "\n".join(lines) + "\n"


def plot(made, summary, path, command):
    """Validation curves and the loss by frequency bucket, if matplotlib is installed."""
    plt = pyplot()
    if plt is None:
        return
    fig, (curves, buckets) = plt.subplots(1, 2, figsize=(12, 4.5))
    for arm in ARMS:
        runs = [r[0]["curve"] for r in made[arm]]
        curves.plot([s for s, _ in runs[0]], [statistics.mean(c[i][1] for c in runs) for i in range(len(runs[0]))],
                    label=arm)
    curves.set(xlabel="step", ylabel="val loss (nats), mean over seeds", title="Validation loss")
    rows = [(label, losses) for label, n, losses in summary["buckets"] if n]
    width = 0.8 / len(ARMS)
    for k, arm in enumerate(ARMS):
        buckets.bar([i + k * width for i in range(len(rows))], [losses[arm] or 0 for _, losses in rows], width, label=arm)
    buckets.set_xticks([i + 0.4 - width / 2 for i in range(len(rows))], [label for label, _ in rows], rotation=30,
                       ha="right")  # the wide edges would overlap level
    buckets.set(xlabel="train count of the target token", ylabel="held-out loss (nats)", title="Loss by frequency")
    save_figure(fig, (curves, buckets), path, command)
    plt.close(fig)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = ArgumentParser(prog="python -m experiments.regime", description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="tiny shapes and steps: the study's logic in a minute")
    p.add_argument("--dataset", default="cpu-mix-8k", help="a prepared dataset (its tokenizer sets V)")
    p.add_argument("--new_tokens", type=int, default=2048, help="words added to the pair after training")
    p.add_argument("--data_dir", default="data")
    p.add_argument("--runs_dir", default="out-regime")
    p.add_argument("--results_dir", default="results")
    p.add_argument("--overwrite", action="store_true", help="replace a report of another command line, or a committed one")
    with user_errors("regime.py"):
        args = p.parse_args(argv)
        require(args.seeds >= 1, "--seeds", args.seeds, "at least 1")
        require(args.new_tokens >= 1, "--new_tokens", args.new_tokens, "at least 1")
        train_argv = [*BASE, *(QUICK if args.quick else []), f"--dataset={args.dataset}", f"--data_dir={args.data_dir}"]
        settings = train_settings(train_argv)
        md, js, png = results_files(args.results_dir, "regime", "regime", argv, args.overwrite)
        root, cell = runs_root(args.runs_dir), (args.new_tokens, "mean", 0, f"extend-{args.new_tokens}-mean-0")
        made, source = make_runs(train_argv, settings, args.seeds, root, args.data_dir, cell)
        summary, info = summarize_regime(made, source, args.new_tokens), machine()
        params = {arm: parts(run_dir(root, arm, 0)) for arm in ARMS}
        command = " ".join(["python -m experiments.regime", *argv])
        table = report(command, info, summary, params)
        write_results(md, js, command, table, {"machine": info, "params": params, "summary": summary,
                                               "runs": {arm: [{"run": r, "buckets": b, "extension": e} for r, b, e in rows]
                                                        for arm, rows in made.items()}})
        plot(made, summary, png, command)
    print(table)


if __name__ == "__main__":
    main()
