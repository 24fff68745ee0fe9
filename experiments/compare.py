"""Does removing the trainable input table hurt? Train every input (learned, binary, affine,
kronecker, frozen), a ternary body and the frozen-code paper's pair over several seeds,
everything else equal, score each run's spelling and echo probes, and write the table:
results/<name>.md, .json, .png.

    python prepare.py --dataset shakespeare-plays && python -m experiments.compare --preset cpu   # ~2 h, 2 cores
    python -m experiments.compare --preset gpu --nproc_per_node 8                                # the papers' table
    python -m experiments.compare config/my.py --name mine --seeds 5 --max_iters=2000            # any config

Every run is train.py itself (experiments/runs.py starts it) with the preset's settings plus
`input`, `seed`, and for affine `code_seed = seed`, so each affine seed also draws its own A
and b: the table doubles as the papers' robustness check on the code assignment. Finished runs
are never redone. The Kronecker input replaces the table with a learned projection, so its
trainable input parameters are not zero: the table's "input params" column says how many. The
frozen input's codes come from the learned run of the same seed (trained first): it starts from
what that run learned, which a like-for-like comparison with learned must keep in mind.
A kind 'input+variant' (experiments/runs.py's VARIANTS) changes one setting: 'binary+ternary'
is the binary input with a ternary body; 'learned+tied' ties the head to the table, as Gemma
does; 'frozen+codes' reads its codes back as its head (head='codes'), with its codes from the
tied run: the frozen-code paper's model against its control. Each kind is compared with its
control (learned, or learned+tied for frozen+codes) and a variant with its input without it.
"""

from tablefree.common import interrupt_quietly
interrupt_quietly(__name__, "compare.py")  # is one line, not a traceback

import sys

from experiments.outputs import results_files, save_figure, write_results
from experiments.runs import (ROOT, VARIANTS, control, is_kind, probe_run, probed, run_all, run_dir, runs_root,
                              train_settings)
from experiments.stats import summarize
from model import INPUTS
from tablefree.common import ArgumentParser, require, user_errors
from tablefree.reports import pyplot
from tablefree.device import machine, measured_on
from tablefree.diagnostics import describe_quality

PRESETS = {"cpu": "experiments/config/compare_cpu.py", "gpu": "config/binary.py"}  # in the checkout
# every input, the ternary body's cost, and the frozen-code paper's pair: its code head against a tied table
KINDS = (*INPUTS, "binary+ternary", "learned+tied", "frozen+codes")


def report(name, command, machine, summary):
    """The results table in Markdown."""
    lines = [f"# {name}: {' vs '.join(summary)} inputs", "",
             measured_on(command, machine), "",
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
        name, _, variant = kind.partition("+")
        for key, against in (("vs_learned", control(kind)), ("vs_base", variant and f"{name} ({VARIANTS[variant][2]})")):
            if key in s:
                v = s[key]
                verdict = "exceeds seed variation (|gap| >" if v["exceeds_seed_variation"] else \
                    "is within seed variation (|gap| <="
                lines.append(f"- {kind} vs {against}: val loss {v['loss_gap']:+.4f} nats (perplexity "
                             f"{100 * v['ppl_ratio']:+.1f}%), standard error {v['stderr']:.4f}; the gap {verdict} "
                             f"2 standard errors).")
    for kind, s in summary.items():
        t = s.get("steps_to_learned")
        if t and t["reached"]:
            lines.append(f"- {kind} reaches {control(kind)}'s final val loss (its run of the same seed) at step {t['steps']:,.0f} "
                         f"± {t['steps_std']:,.0f} (interpolated between evaluations) in {t['reached']} of {t['seeds']} "
                         f"seeds: {t['ratio']:.2f}x ± {t['ratio_std']:.2f} fewer steps than {control(kind)}.")
        elif t:
            lines.append(f"- {kind} never reaches {control(kind)}'s final val loss in {t['seeds']} seeds.")
    lines += [f"- {kind} codes, mean over seeds (each derived from the learned run of its seed): "
              f"{describe_quality(s['code_quality'])}." for kind, s in summary.items() if "code_quality" in s]
    lines += norm_table(summary)
    lines += probe_tables(summary)
    if "frozen+codes" in summary and "learned+tied" in summary:  # the frozen-code paper's own pair
        f, l = summary["frozen+codes"], summary["learned+tied"]
        lines.append(f"- The frozen-code paper's pair: the tied learned table buys {f['val_loss'] - l['val_loss']:+.4f} "
                     f"nats for {l['trainable'] / f['trainable']:.2f}x the trainable parameters of frozen with its code "
                     f"head (the paper, at 270M and 2.05B tokens: 0.20 nats for 2.6x).")
    lines += ["", "seed spread = (max - min) / mean of the seeds' perplexities; std is the sample standard deviation.",
              "", "Context only, not comparable: the papers' 32-layer runs (17B tokens, 3 seeds) report per-token "
              "perplexity 2.44 learned, 2.36 binary, 2.39 affine, seed-to-seed variation 4.8%, on the authors' own "
              "65,536-token vocabulary; a per-token perplexity depends on the tokenizer."]
    return "\n".join(lines) + "\n"


def norm_table(summary):
    """The logged norms per input: the mean L2 norm at the first evaluation -> the last, mean over seeds."""
    if not all("norms" in s for s in summary.values()):
        return []
    lines = ["", "Norms (train.py's log, tablefree/diagnostics.py): the mean L2 norm of the vectors the V tokens enter the "
             "Transformer by, of the head's rows, and of the Kronecker projection's rows (one per byte x position "
             "cell), at step 0 -> at the end, mean over seeds.", "",
             "| input | token inputs | head rows | Kronecker projection rows |", "|---|---|---|---|"]
    for kind, s in summary.items():
        cells = [f"{n[0]:.3f} -> {n[1]:.3f} ({n[1] / n[0]:.2f}x)" if n else "" for n in
                 (s["norms"].get(part) for part in ("input", "head", "projection"))]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return lines


def probe_tables(summary):
    """The spelling and echo probes per input (mean ± std over seeds), then spelling per category."""
    if not all("spelling_top1" in s for s in summary.values()):
        return []
    lines = ["", "Probes (`python -m tools.evaluate --tasks spelling,echo`, the committed `tools/probe_sets/`): top-1 next-token agreement "
             "and KL(clean || typo) over 110 clean/typo pairs; echo rate: the share of 30 prompts whose greedy "
             "16-token continuation repeats an invented name or misspelt word shown in the prompt (sampled: of 5 "
             "draws a prompt at temperature 0.7, top-p 0.9, the Kronecker paper's setting; override, Kronecker only: the "
             "string enters as one token of its own bytes at a spare id, as the package's forward_with_byte_override).",
             "", "| input | spelling top-1 agreement | spelling KL (nats) | echo rate, greedy | echo rate, sampled | "
             "override, greedy | override, sampled |", "|---|---|---|---|---|---|---|"]

    def rate(s, key):
        return f"{s[key]:.3f} ± {s[f'{key}_std']:.3f}" if key in s else ""
    lines += [f"| {kind} | {rate(s, 'spelling_top1')} | {rate(s, 'spelling_kl')} | {rate(s, 'echo_rate')} | "
              f"{rate(s, 'echo_rate_sampled')} | {rate(s, 'echo_rate_override')} | {rate(s, 'echo_rate_override_sampled')} |"
              for kind, s in summary.items()]
    depth = len(next(iter(next(iter(summary.values()))["layers"].values())))
    lines += ["", "Layered probe (`--tasks layers`, 24 pairs close in bytes and far in meaning, 24 the reverse; ours): "
              "the mean cosine similarity of the two words' hidden states at the input (0) and after each block, mean "
              "over seeds. Where a column falls, the model has told the pair apart.", "",
              "| input | pairs | " + " | ".join(map(str, range(depth))) + " |", "|---|---|" + "---|" * depth]
    lines += [f"| {kind} | {c.replace('_', ' ')} | " + " | ".join(f"{v:.3f}" for v in curve) + " |"
              for kind, s in summary.items() for c, curve in s["layers"].items()]
    categories = list(next(iter(summary.values()))["spelling_by_category"])
    lines += ["", "Spelling top-1 agreement per typo category (mean over seeds):", "",
              "| category | " + " | ".join(summary) + " |", "|---|" + "---|" * len(summary)]
    lines += [f"| {c} | " + " | ".join(f"{s['spelling_by_category'][c]:.2f}" for s in summary.values()) + " |"
              for c in categories]
    return lines


def plot(runs, summary, path, command):
    """Validation-loss curves of every run; where logged, the mean norm of the vectors tokens enter
    by (solid) and of the head's rows (dashed); and the layered probe's curves (summarize's means
    over seeds); if matplotlib is installed."""
    plt = pyplot()
    if plt is None:
        return
    fig, (ax, norms, layers) = plt.subplots(1, 3, figsize=(17, 4.5))
    for color, (kind, rs) in zip((f"C{i}" for i in range(10)), runs.items()):
        for category, curve in summary[kind].get("layers", {}).items():
            layers.plot(range(len(curve)), curve, color=color, linestyle="-" if category == "byte_similar" else ":",
                        label=kind if category == "byte_similar" else None)
        for k, r in enumerate(rs):
            steps, losses = zip(*r["curve"][1:])  # step 0 is the untrained model
            ax.plot(steps, losses, color=color, alpha=0.8, label=kind if k == 0 else None)
            if r.get("norms"):
                steps = [step for step, _ in r["norms"]]
                norms.plot(steps, [n["input"]["mean"] for _, n in r["norms"]], color=color, alpha=0.8,
                           label=kind if k == 0 else None)
                norms.plot(steps, [n["head"]["mean"] for _, n in r["norms"]], color=color, alpha=0.5, linestyle="--")
    ax.set(xlabel="step", ylabel="validation loss (nats/token)", title=path.stem)
    norms.set(xlabel="step", ylabel="mean L2 norm", title="token inputs (solid) and head rows (dashed)")
    layers.set(xlabel="layer (0: the input)", ylabel="cosine similarity",
               title="pairs close in bytes (solid) and in meaning (dotted)")
    save_figure(fig, [ax, norms, layers], path, command)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = ArgumentParser(prog="python -m experiments.compare", description=__doc__.split("\n\n")[0],
                       epilog="Any other argument is a config file or --key=value setting of train.py "
                              "(python train.py --help lists them), applied to every run.")
    p.add_argument("--preset", choices=PRESETS, help="cpu (experiments/config/compare_cpu.py) or gpu (config/binary.py)")
    p.add_argument("--name", help="names results/<name>.* and out-compare/<name>/ (default: the preset)")
    p.add_argument("--seeds", type=int, default=3, help="seeds per input (the papers used 3)")
    p.add_argument("--inputs", default=",".join(KINDS),
                   help="comma-separated inputs, each optionally +body (binary+ternary: a ternary body)")
    p.add_argument("--nproc_per_node", type=int, default=1, help="processes (GPUs) per run; above 1 through torchrun")
    p.add_argument("--results_dir", default="results")
    p.add_argument("--overwrite", action="store_true", help="replace a report of another command line, or a committed one")
    p.add_argument("--runs_dir", help="where the runs go (default: out-compare/<name>)")
    with user_errors("compare.py"):
        args, rest = p.parse_known_args(argv)
        require(args.seeds >= 1, "--seeds", args.seeds, "at least 1")
        require(args.nproc_per_node >= 1, "--nproc_per_node", args.nproc_per_node, "at least 1")
        kinds = args.inputs.split(",")
        require(all(is_kind(k) for k in kinds), "--inputs", args.inputs,
                f"a comma-separated list of {', '.join(INPUTS)}, each optionally +{'/+'.join(VARIANTS)}")
        name = args.name or args.preset or "compare"
        train_argv = ([str(ROOT / PRESETS[args.preset])] if args.preset else []) + rest
        base = train_settings(train_argv)  # a bad setting is refused before the first run, not after some
        md, js, png = results_files(args.results_dir, name, "compare", argv, args.overwrite)  # and an unwritable results file too
        root = runs_root(args.runs_dir or f"out-compare/{name}")
        def override(directory):  # the Kronecker input's echo probe also places strings at spare ids
            return directory.name.startswith("kronecker")
        runs = run_all(train_argv, base, kinds, args.seeds, root, args.nproc_per_node,  # probes need checkpoints
                       needed=lambda d: not probed(d, base["max_iters"], override(d)))
        for kind, rs in runs.items():
            for seed, r in enumerate(rs):
                directory = run_dir(root, kind, seed)
                r["probes"] = probe_run(directory, base["max_iters"], override(directory))
        summary, info = summarize(runs), machine()
        command = " ".join(["python -m experiments.compare", *argv])
        table = report(name, command, info, summary)
        write_results(md, js, command, table, {"machine": info, "settings": base, "summary": summary, "runs": runs})
    plot(runs, summary, png, command)
    print(table)


if __name__ == "__main__":
    main()
