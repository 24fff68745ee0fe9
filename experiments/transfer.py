"""The frozen-code paper's transfer claims where they can appear: codes from a table that knows a domain
the body's data lacks: results/transfer.md, .json, .png.

    python prepare.py --dataset cpu-mix --name cpu-mix-8k --vocab_size 8192
    python prepare.py --dataset cpu-mix-nowiki --tokenizer_from data/cpu-mix-8k --name cpu-mix-8k-nowiki
    python prepare.py --dataset cpu-mix-wiki --tokenizer_from data/cpu-mix-8k --name cpu-mix-8k-wiki
    python -m experiments.transfer                   # 15 runs, dev/queue.sh's lanes
    python -m experiments.transfer --quick --dataset tiny --heldout tiny --source_table T.npy --seeds 1  # the tests

The paper's frozen codes come from Gemma 3's table, trained on far more text than its body sees, so a word
rare in the body's data can still have a well-placed code: it reports the frozen table "wins by 1.7 to
2.3 nats on rare words" and takes 10,000 new words at a 3% cost where a learned table loses 43%. The
regime study (experiments/regime.py) found neither, with codes from a table of the bodies' own corpus.
Here the source knows more than the bodies: its table (the regime study's 4x-long learned+tied control,
results/runs/out-regime/learned+tied-4x-seed0/table.npy, trained on all of cpu-mix's training split,
reused) has seen the Wikipedia articles; the bodies train on cpu-mix-nowiki, the same corpus without
them (the plays and the Bible, whose documents fall in the splits they have in cpu-mix: tablefree/
corpus.py), in the regime study's shape (experiments/config/regime_cpu.py: V = 8,192, 6 x 64). Held
out: the bodies' own validation text, and cpu-mix's validation articles (cpu-mix-wiki's val split),
which neither the source nor the bodies trained on. The arms, over --seeds:

    learned+tied            the tied table from a random start (the control)
    learned+tied@source     the tied table started from the source's rows, then trained (a practitioner's
                            baseline: does freezing beat simply starting from the same table?)
    frozen+codes@source     the paper's method: the source's sign-PCA codes in and out, the body trained
    frozen+codes@control    codes from the control of the same seed (no transfer: the regime study's arm)
    frozen-float@source     the source's float table frozen in and out (input_lr_scale 0), no sign bits:
                            which of the two ingredients (the source, the bits) carries any gain

After each run: the held-out loss and bits per byte on both sets, the loss by the target's count in the
bodies' training split (tools.evaluate's rare_tokens, --counts_from), and NEW words learned from the held-
out articles (tools.extend on cpu-mix-wiki's val: a new row the mean of its pieces' rows, a frozen code
from the mean of its pieces' source rows, projected as the old ones were; our choice of a source for new
words, stated: the source has rows for every piece, so the articles' words are coded from a table that
has read them). Finished runs, scores and extensions are kept (experiments/keep.py).
"""

from tablefree.common import interrupt_quietly
interrupt_quietly(__name__, "transfer.py")  # is one line, not a traceback

import json
import statistics
import sys

import numpy as np
import torch

from experiments.outputs import results_files, save_figure, write_results
from experiments.runs import (ROOT, claimed, evaluated, extend, made_free_first, run_arguments, run_dir, runs_root,
                              train_run, train_settings, write_table)
from experiments.stats import bucket_rows, lane_hours, lane_hours_line, mean_std, paired, rare_gap as stats_rare_gap
from model import GPT
from tablefree.common import ArgumentParser, UserError, model_state, require, save_checkpoint, user_errors
from tablefree.reports import pyplot
from tablefree.configurator import check_settings, model_config
from tablefree.data import Dataset
from tablefree.device import machine, measured_on

BASE = [str(ROOT / "experiments" / "config" / "regime_cpu.py")]
QUICK = ["--n_layer=1", "--n_head=2", "--n_embd=16", "--block_size=32", "--batch_size=4", "--max_iters=12",
         "--lr_decay_iters=12", "--warmup_iters=2", "--eval_interval=6", "--eval_iters=2", "--log_interval=6"]
SOURCE = ROOT / "results" / "runs" / "out-regime" / "learned+tied-4x-seed0" / "table.npy"
CONTROL, ARMS = "learned+tied", ("learned+tied", "learned+tied@source", "frozen+codes@source", "frozen+codes@control",
                                 "frozen-float@source")
STARTED = ("learned+tied@source", "frozen-float@source")  # their weights start from a checkpoint holding the source
RARE, EDGES = 100, (1, 10, 100)  # a token is rare under RARE body-training occurrences; the shares reported
PAPER = {"gap": 0.20, "rare": (1.7, 2.3), "extension": (0.03, 0.43)}  # the frozen-code paper's


def count_shares(counts, edges=EDGES):
    """{edge: the share of the vocabulary's ids that occur fewer than edge times} in a split's counts."""
    counts = np.asarray(counts)
    return {edge: float((counts < edge).mean()) for edge in edges}


def arm_arguments(settings, arm, seed, root, source):
    """train.py's arguments an arm adds: its input and head, its codes' source, a frozen table's rate."""
    if arm.startswith("frozen+codes"):
        codes = source if arm.endswith("@source") else control_table(root, seed)
        return run_arguments(settings, "frozen+codes", seed, root, codes)
    lr = ["--input_lr_scale=0"] if arm == "frozen-float@source" else []  # AdamW moves nothing at rate 0
    return [*run_arguments(settings, CONTROL, seed, root), *lr]


def control_table(root, seed):
    """The control's tied table (.npy) after its run: frozen+codes@control's codes are derived from it."""
    return run_dir(root, CONTROL, seed) / "table.npy"


def write_start(path, argv, table, data):
    """A checkpoint a started arm fine-tunes from (train.py --init_from): the control's initial weights for
    the run's seed (the same seed, the same construction: train.py's new_model) with the source's rows as
    its tied table. argv: the run's train.py arguments. Written once; its weights follow from (argv, table)."""
    if (path / "ckpt.pt").exists():
        return
    s = check_settings(train_settings(argv))
    torch.manual_seed(s.seed)
    model = GPT(model_config(s, data.vocab_size))
    table = torch.from_numpy(np.load(table)).float()
    if tuple(table.shape) != tuple(model.wte.weight.shape):
        raise UserError(f"the source table is {tuple(table.shape)} but the model's is {tuple(model.wte.weight.shape)}; "
                        f"give --source_table a V x n_embd table of this tokenizer and width")
    with torch.no_grad():
        model.wte.weight.copy_(table)  # tied: the head is the same tensor
    path.mkdir(parents=True, exist_ok=True)
    save_checkpoint({**model_state(model), "tokenizer": data.tokenizer, "settings": vars(s), "iter_num": 0}, path)


def make_runs(argv, settings, args, root, cell):
    """{arm: [(read_run, body scores, held-out scores, the extension row) per seed]}: each run trained (or
    read), scored on both held-out sets and extended while its checkpoint is at hand. A frozen+codes@control
    run makes its control first (which waits while another process makes it) and reads the control's table,
    kept where its checkpoint is not (control_table)."""
    steps, data = settings["max_iters"], Dataset(args.data_dir, args.dataset, settings["block_size"])
    items = [(arm, s) for arm in ARMS for s in range(args.seeds)]
    heldout = ["--dataset", args.heldout, "--counts_from", args.dataset]

    def done(arm, seed):
        return all((run_dir(root, arm, seed) / name).exists() for name in ("eval.json", "eval-heldout.json")) and \
            (root / "extensions" / cell[-1] / f"{arm}-seed{seed}.json").exists()

    def make(item):
        arm, seed = item
        if arm == "frozen+codes@control":
            make((CONTROL, seed))  # its codes' source, made (or waited for) first
        directory, start = run_dir(root, arm, seed), "scratch"
        arm_argv = [*argv, *arm_arguments(settings, arm, seed, root, args.source_table)]
        if arm in STARTED:
            start = root / "starts" / f"{arm}-seed{seed}"
            with claimed(start):  # the other lane, reaching the run first, may be writing it
                write_start(start, arm_argv, args.source_table, data)
        table = arm == CONTROL and not control_table(root, seed).exists()
        run = train_run(arm_argv, directory, steps, f"{arm}, seed {seed}", start=str(start),
                        checkpoint=table or not done(arm, seed))
        if table:
            write_table(directory, control_table(root, seed))
        body = evaluated(directory, steps, ["val", "rare_tokens"], args.data_dir)
        held = evaluated(directory, steps, ["val", "rare_tokens"], args.data_dir, heldout, name="eval-heldout")
        return run, body, held, extend(directory, arm, seed, cell, root, args.data_dir, ["--dataset", args.heldout])

    made = dict(zip(items, made_free_first(items, lambda item: run_dir(root, *item), make)))
    return {arm: [made[arm, s] for s in range(args.seeds)] for arm in ARMS}


def bucket_table(made, which):
    """[(train-count label, held-out targets, {arm: mean loss over seeds or None})], rarest first; which:
    1 the bodies' own held-out text, 2 the held-out domain."""
    return bucket_rows({arm: [runs[which]["rare_tokens"]["buckets"] for runs in made[arm]] for arm in ARMS})


def rare_gap(rows, arm, base=CONTROL):
    """The arm's mean loss minus base's over the buckets under RARE body-training occurrences, weighted by
    their held-out targets (the never-seen ids included): stats.rare_gap."""
    return stats_rare_gap(rows, arm, base, RARE)


def summarize_transfer(made):
    """Per arm: loss and bits per byte on both held-out sets (mean ± std), their paired gaps to the control
    and to learned+tied@source, the extension's cost; the bucket tables and the rare gaps."""
    sets = {"body": 1, "heldout": 2}
    arms = {}
    for arm in ARMS:
        a = arms[arm] = {"seeds": len(made[arm]), "wall_s": statistics.mean(r[0]["wall_s"] for r in made[arm]),
                         "steady_s": statistics.mean(r[0]["steady_s"] for r in made[arm])}
        for name, i in sets.items():
            for key in ("loss", "bpb"):
                values = [r[i]["val"][key] for r in made[arm]]
                a[f"{name}_{key}"], a[f"{name}_{key}_std"] = mean_std(values)
                for base in (CONTROL, "learned+tied@source"):
                    if arm != base:
                        a.setdefault("vs", {}).setdefault(base, {})[f"{name}_{key}"] = paired(
                            values, [r[i]["val"][key] for r in made[base]])
        a["extension"], a["extension_std"] = mean_std(r[3]["bpb_change"] for r in made[arm])
    buckets = {name: bucket_table(made, i) for name, i in sets.items()}
    rare = {name: {arm: {base: rare_gap(rows, arm, base) for base in (CONTROL, "learned+tied@source")}
                   for arm in ARMS} for name, rows in buckets.items()}
    return {"arms": arms, "buckets": buckets, "rare_gap": rare,
            "lane_hours": lane_hours(r[0] for rows in made.values() for r in rows)}


def gap_cell(arm, base, key, arms):
    g = arms[arm].get("vs", {}).get(base, {}).get(key)
    return f"{g['mean']:+.4f} ± {g['stderr']:.4f}" if g else ""


def report(command, info, summary, params, shares, args):
    arms = summary["arms"]
    lines = ["# The frozen-code paper's transfer claims: codes from a table that knows more than the body", "",
             measured_on(command, info) + " Mean ± std over seeds; gaps paired by seed with their standard error. "
             "The arms and the protocol: experiments/transfer.py's docstring.", "",
             f"The bodies train on {args.dataset}; of the tokenizer's ids, "
             + ", ".join(f"{100 * share:.1f}% " + ("never occur" if edge == 1 else f"fewer than {edge} times")
                         for edge, share in shares.items())
             + f" in its training split. Held out: {args.dataset}'s validation text (body) and {args.heldout}'s "
             "(the domain the bodies never saw; the source read its training articles, not these).", "",
             "| arm | trainable | trained | input | body | head |", "|---|---|---|---|---|---|"]
    for arm, p in params.items():
        trained = p["trainable"] - (p["input"] if arm == "frozen-float@source" else 0)  # a rate of 0 moves nothing
        lines.append(f"| {arm} | {p['trainable']:,} | {trained:,} | {p['input']:,} | {p['body']:,} | {p['head']:,} |")
    lines += ["", "| arm | body loss | body bits/byte | held-out loss | held-out bits/byte | held-out loss vs "
                  "control | held-out loss vs learned+tied@source | body loss vs control | wall per run | at its "
                  "median step |", "|---|---|---|---|---|---|---|---|---|---|"]
    for arm in ARMS:
        a = arms[arm]
        lines.append(f"| {arm} | {a['body_loss']:.4f} ± {a['body_loss_std']:.4f} | {a['body_bpb']:.4f} ± "
                     f"{a['body_bpb_std']:.4f} | {a['heldout_loss']:.4f} ± {a['heldout_loss_std']:.4f} | "
                     f"{a['heldout_bpb']:.4f} ± {a['heldout_bpb_std']:.4f} | {gap_cell(arm, CONTROL, 'heldout_loss', arms)} | "
                     f"{gap_cell(arm, 'learned+tied@source', 'heldout_loss', arms)} | "
                     f"{gap_cell(arm, CONTROL, 'body_loss', arms)} | {a['wall_s'] / 60:.1f} min | "
                     f"{a['steady_s'] / 60:.1f} min |")
    lines += ["", lane_hours_line(summary["lane_hours"])]
    for name, title in (("heldout", "the held-out domain"), ("body", "the bodies' own held-out text")):
        lines += ["", f"Loss (nats) on {title} by the target's count in the bodies' training split, rarest first "
                      "(mean over seeds; n: held-out targets):", "",
                  "| body train count | n | " + " | ".join(ARMS) + " |", "|---|---|" + "---|" * len(ARMS)]
        for label, n, losses in summary["buckets"][name]:
            lines.append(f"| {label} | {n:,} | " + " | ".join(f"{losses[a]:.3f}" if losses[a] is not None else ""
                                                             for a in ARMS) + " |")
        gaps = summary["rare_gap"][name]
        lines.append("")
        lines.append(f"- Rare tokens (under {RARE} in the bodies' training split) on {title}, each arm's loss minus "
                     "the control's / minus learned+tied@source's: " + "; ".join(
                         f"{arm} {gaps[arm][CONTROL]:+.3f} / {gaps[arm]['learned+tied@source']:+.3f}"
                         for arm in ARMS[1:] if gaps[arm][CONTROL] is not None)
                     + f" nats (the paper: the frozen table {PAPER['rare'][0]}-{PAPER['rare'][1]} nats better).")
    lines += [f"- {args.new_tokens:,} new words from the held-out articles (tools.extend, no adaptation), held-out "
              "bits per byte: " + ", ".join(f"{arm} {100 * arms[arm]['extension']:+.2f}% ± "
                                            f"{100 * arms[arm]['extension_std']:.2f}%" for arm in ARMS)
              + f" (the paper, 10,000 words: frozen +{100 * PAPER['extension'][0]:.0f}%, the table "
                f"+{100 * PAPER['extension'][1]:.0f}%)."]
    return "\n".join(lines) + "\n"


def plot(summary, path, command):
    """The held-out domain's loss by body-training count, and each arm's bits per byte on both sets."""
    plt = pyplot()
    if plt is None:
        return
    fig, (buckets, bpb) = plt.subplots(1, 2, figsize=(13, 4.5))
    rows = [(label, losses) for label, n, losses in summary["buckets"]["heldout"] if n]
    width = 0.8 / len(ARMS)
    for k, arm in enumerate(ARMS):
        buckets.bar([i + k * width for i in range(len(rows))], [losses[arm] or 0 for _, losses in rows], width, label=arm)
        a = summary["arms"][arm]
        bpb.bar([k, len(ARMS) + 1 + k], [a["body_bpb"], a["heldout_bpb"]], yerr=[a["body_bpb_std"], a["heldout_bpb_std"]],
                label=arm, capsize=3)
    buckets.set_xticks([i + 0.4 - width / 2 for i in range(len(rows))], [label for label, _ in rows], rotation=30,
                       ha="right")
    buckets.set(xlabel="count of the target in the bodies' training split", ylabel="held-out loss (nats)",
                title="The held-out domain, by body frequency")
    bpb.set_xticks([(len(ARMS) - 1) / 2, len(ARMS) + 1 + (len(ARMS) - 1) / 2], ["body held-out", "held-out domain"])
    bpb.set(ylabel="bits/byte, mean ± std over seeds", title="Held-out bits per byte")
    save_figure(fig, (buckets, bpb), path, command)
    plt.close(fig)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = ArgumentParser(prog="python -m experiments.transfer", description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="tiny shapes and steps: the study's logic in a minute")
    p.add_argument("--dataset", default="cpu-mix-8k-nowiki", help="the bodies' prepared dataset (cpu-mix-8k's tokenizer)")
    p.add_argument("--heldout", default="cpu-mix-8k-wiki", help="the held-out domain's prepared dataset (its val split)")
    p.add_argument("--source_table", default=str(SOURCE), help="the source's V x n_embd table (.npy)")
    p.add_argument("--new_tokens", type=int, default=2048, help="words added after training")
    p.add_argument("--data_dir", default="data")
    p.add_argument("--runs_dir", default="out-transfer")
    p.add_argument("--results_dir", default="results")
    p.add_argument("--overwrite", action="store_true", help="replace a report of another command line, or a committed one")
    with user_errors("transfer.py"):
        args = p.parse_args(argv)
        require(args.seeds >= 1, "--seeds", args.seeds, "at least 1")
        require(args.new_tokens >= 1, "--new_tokens", args.new_tokens, "at least 1")
        train_argv = [*BASE, *(QUICK if args.quick else []), f"--dataset={args.dataset}", f"--data_dir={args.data_dir}"]
        settings = train_settings(train_argv)
        md, js, png = results_files(args.results_dir, "transfer", "transfer", argv, args.overwrite)
        root = runs_root(args.runs_dir)
        cell = (args.new_tokens, "mean", 0, f"extend-{args.new_tokens}-mean-0-{args.heldout}")
        made = make_runs(train_argv, settings, args, root, cell)
        summary, info = summarize_transfer(made), machine()
        params = {arm: json.loads((run_dir(root, arm, 0) / "config.json").read_text())["params"] for arm in ARMS}
        body = Dataset(args.data_dir, args.dataset, settings["block_size"])
        shares = count_shares(np.load(body.path / body.meta["counts"])[0])
        command = " ".join(["python -m experiments.transfer", *argv])
        table = report(command, info, summary, params, shares, args)
        write_results(md, js, command, table, {"machine": info, "params": params, "shares": shares, "summary": summary,
                                               "paper": PAPER, "runs": {arm: [{"run": r, "body": b, "heldout": h,
                                                                               "extension": e} for r, b, h, e in rows]
                                                                        for arm, rows in made.items()}})
        plot(summary, png, command)
    print(table)


if __name__ == "__main__":
    main()
