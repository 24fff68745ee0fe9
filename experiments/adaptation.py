"""Does a fixed input adapt as well as a learned table? Fine-tune the quick-start model of every
input on a new domain and on a supervised task, over several seeds: results/adaptation.md, .json, .png.

    apt-get install bible-kjv                      # the King James Bible (Debian's package)
    python -m experiments.adaptation               # ~2.5 h on 2 cores
    python -m experiments.adaptation --data_only   # only the three datasets below

Each run is train.py's own process (experiments/runs.py: finished runs are kept, an interrupted
one resumes), seed s for every step of one (input, seed):

1. pretrain: the quick start (config/shakespeare.py, tiny Shakespeare) with the input;
2. domain shift: that model fine-tuned on the King James Bible (config/finetune_kjv.py) against
   the same shape trained from scratch on the same KJV batches (the quick start's recipe for as
   many steps); bits per byte on held-out books before (the pretrained model: the fine-tuning
   run's step-0 evaluation), after, and from scratch;
3. supervised fine-tuning (config/sft_spelling.py): "spell: <word>\n" -> "w o r d", the loss on
   the response only, for the words of the pretraining text; exact match on held-out words
   (tools/evaluate.py's sft task on the dataset's val split).

'frozen' takes its codes from the learned pretraining run of the same seed, in step 2's scratch
runs too. The body is float throughout (a ternary body would double the runs; not measured).
"""

from tablefree.common import interrupt_quietly
interrupt_quietly(__name__, "adaptation.py")  # is one line, not a traceback

import json
import re
import subprocess
import sys
from pathlib import Path

from experiments.outputs import results_files, save_figure, write_results
from experiments.runs import ROOT, evaluated, run_arguments, run_dir, runs_root, train_run, train_settings
from experiments.stats import difference, mean_std
from model import INPUTS
from tablefree.common import ArgumentParser, require, user_errors, write_atomic
from tablefree.reports import pyplot
from tablefree.data import read_meta, split_ids
from tablefree.device import machine, measured_on
from tablefree.rundir import read_log
from tablefree.tokenizer import load_tokenizer

PRETRAIN, KJV, SPELL = (str(ROOT / "config" / f) for f in ("shakespeare.py", "finetune_kjv.py", "sft_spelling.py"))
WORD = re.compile(r"\b[a-z]{3,10}\b")  # lower-case words of 3 to 10 letters


def spelling_pairs(data_dir):
    """The SFT examples, one per distinct word of tiny Shakespeare's training split."""
    directory = Path(data_dir) / "shakespeare"
    meta = read_meta(directory)
    enc = load_tokenizer(directory, meta["tokenizer"])
    ids = split_ids(directory, meta, "train")
    words = sorted(set(WORD.findall(enc.decode(ids[ids != enc.eot_token].tolist()))))
    return [{"prompt": f"spell: {w}\n", "response": " ".join(w)} for w in words]


def prepare_data(data_dir, runs):
    """data/shakespeare, data/kjv (in its tokens) and data/spelling, each by prepare.py (which
    keeps a dataset that is up to date)."""
    def prepare(*args):
        if subprocess.run([sys.executable, str(ROOT / "prepare.py"), "--out_dir", data_dir, "--quiet", *args]).returncode:
            raise SystemExit(1)  # prepare.py said why

    shakespeare_tokens = ["--tokenizer_from", str(Path(data_dir) / "shakespeare")]
    prepare()
    prepare("--dataset", "kjv", *shakespeare_tokens)
    pairs = runs / "spelling.jsonl"  # the words of the prepared Shakespeare
    runs.mkdir(parents=True, exist_ok=True)
    write_atomic(pairs, "".join(json.dumps(p) + "\n" for p in spelling_pairs(data_dir)))
    prepare("--sft", "--input", str(pairs), "--name", "spelling", "--block_size", "128", *shakespeare_tokens)


def evals(directory):
    """[(step, val bits per byte)] of a run's evaluations."""
    return [(r["iter"], r["val_bpb"]) for r in read_log(directory / "log.jsonl") if "val_loss" in r]


def run_kind(kind, seed, root, data_dir):
    """One (input, seed): the four runs and what the study reads from them."""
    pre_settings = train_settings([PRETRAIN, f"--data_dir={data_dir}"])
    pre_dir = run_dir(root / "pretrain", kind, seed)
    inputs = run_arguments(pre_settings, kind, seed, root / "pretrain")  # input, seeds, frozen's source
    common = [f"--data_dir={data_dir}", f"--seed={seed}"]
    pretrain = train_run([PRETRAIN, *common, *inputs], pre_dir, pre_settings["max_iters"], f"pretrain {kind} {seed}")
    steps = train_settings([KJV])["max_iters"]
    tuned_dir, scratch_dir, spell_dir = (run_dir(root / task, kind, seed) for task in ("kjv", "kjv-scratch", "spelling"))
    train_run([KJV, *common], tuned_dir, steps, f"KJV fine-tuning {kind} {seed}", start=str(pre_dir))
    train_run([PRETRAIN, *common, *inputs, "--dataset=kjv", f"--max_iters={steps}", f"--lr_decay_iters={steps}"],
              scratch_dir, steps, f"KJV from scratch {kind} {seed}")
    spell_steps = train_settings([SPELL])["max_iters"]
    spell = train_run([SPELL, *common], spell_dir, spell_steps, f"spelling SFT {kind} {seed}", start=str(pre_dir))
    exact = evaluated(spell_dir, spell_steps, ["sft"])["sft"]
    tuned, scratch = evals(tuned_dir), evals(scratch_dir)
    return {"pretrain_bpb": pretrain["val_bpb"], "kjv_before": tuned[0][1], "kjv_after": tuned[-1][1],
            "kjv_scratch": scratch[-1][1], "spelling_exact": exact["exact_match"], "spelling_n": exact["n"],
            "spelling_examples": exact["examples"], "kjv_curve": tuned, "kjv_scratch_curve": scratch,
            "spelling_curve": spell["curve"]}


METRICS = {"pretrain_bpb": "Shakespeare val bits/byte (pretrained)", "kjv_before": "KJV bits/byte before",
           "kjv_after": "KJV bits/byte after fine-tuning", "kjv_scratch": "KJV bits/byte from scratch",
           "kjv_gain": "fine-tuning's gain over scratch (bits/byte)", "spelling_exact": "spelling exact match"}


def summarize(runs):
    """Per input: mean and sample std over seeds of each metric, and its gap to learned's."""
    summary = {}
    for kind, rs in runs.items():
        for r in rs:
            r["kjv_gain"] = r["kjv_scratch"] - r["kjv_after"]
        summary[kind] = {"seeds": len(rs)}
        for key in METRICS:
            summary[kind][key], summary[kind][f"{key}_std"] = mean_std(r[key] for r in rs)
    for kind, s in summary.items():
        if kind != "learned" and "learned" in summary:
            s["vs_learned"] = {key: difference(s, summary["learned"], key) for key in ("kjv_after", "kjv_gain", "spelling_exact")}
    return summary


def report(command, info, summary, n_words):
    lines = ["# Adaptation: fine-tuning every input on a new domain and a supervised task", "",
             measured_on(command, info) + " Mean ± std over seeds; lower bits/byte is better.", "",
             "| input | seeds | " + " | ".join(METRICS.values()) + " |", "|---|---|" + "---|" * len(METRICS)]
    for kind, s in summary.items():
        lines.append(f"| {kind} | {s['seeds']} | " + " | ".join(f"{s[k]:.4f} ± {s[f'{k}_std']:.4f}" for k in METRICS) + " |")
    lines += ["", f"Spelling: exact match of the greedy answer on {n_words} held-out words (never trained on). "
              "Gain over scratch: KJV bits/byte from scratch minus after fine-tuning, on the same KJV batches.", "",
              "Against learned (gap = input's mean - learned's, with its standard error; it exceeds seed variation "
              "when |gap| > 2 standard errors):", ""]
    for kind, s in summary.items():
        for key, g in s.get("vs_learned", {}).items():
            verdict = "exceeds" if g["exceeds_seed_variation"] else "is within"
            lines.append(f"- {kind}, {METRICS[key]}: {g['gap']:+.4f} (standard error {g['stderr']:.4f}); {verdict} "
                         f"seed variation")
    return "\n".join(lines) + "\n"


def plot(runs, path, command):
    """KJV val bits/byte through fine-tuning (solid) and from scratch (dashed); spelling val loss."""
    plt = pyplot()
    if plt is None:
        return
    fig, (kjv, spell) = plt.subplots(1, 2, figsize=(11, 4.5))
    for color, (kind, rs) in zip((f"C{i}" for i in range(10)), runs.items()):
        for k, r in enumerate(rs):
            kjv.plot(*zip(*r["kjv_curve"]), color=color, alpha=0.8, label=kind if k == 0 else None)
            kjv.plot(*zip(*r["kjv_scratch_curve"][1:]), color=color, alpha=0.8, linestyle="--")
            spell.plot(*zip(*r["spelling_curve"]), color=color, alpha=0.8, label=kind if k == 0 else None)
    kjv.set(xlabel="step", ylabel="KJV val bits/byte", title="fine-tuned (solid) vs from scratch (dashed)")
    spell.set(xlabel="step", ylabel="val loss on held-out words' answers (nats/token)", title="spelling SFT")
    save_figure(fig, (kjv, spell), path, command)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = ArgumentParser(prog="python -m experiments.adaptation", description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--inputs", default=",".join(INPUTS), help="comma-separated inputs")
    p.add_argument("--data_dir", default="data")
    p.add_argument("--runs_dir", default="out-adaptation")
    p.add_argument("--results_dir", default="results")
    p.add_argument("--overwrite", action="store_true", help="replace a report of another command line, or a committed one")
    p.add_argument("--data_only", action="store_true", help="prepare the three datasets and stop")
    with user_errors("adaptation.py"):
        args = p.parse_args(argv)
        kinds = args.inputs.split(",")
        require(args.seeds >= 1, "--seeds", args.seeds, "at least 1")
        require(all(k in INPUTS for k in kinds), "--inputs", args.inputs, f"a comma-separated list of {', '.join(INPUTS)}")
        if "frozen" in kinds and "learned" not in kinds:
            kinds.insert(0, "learned")  # frozen's codes come from it
        md, js, png = results_files(args.results_dir, "adaptation", "adaptation", argv, args.overwrite)
        root = runs_root(args.runs_dir)
        prepare_data(args.data_dir, root)
        if args.data_only:
            return
        runs = {kind: [run_kind(kind, seed, root, args.data_dir) for seed in range(args.seeds)] for kind in kinds}
        summary, info = summarize(runs), machine()
        command = " ".join(["python -m experiments.adaptation", *argv])
        n_words = runs[kinds[0]][0]["spelling_n"]
        table = report(command, info, summary, n_words)
        write_results(md, js, command, table, {"machine": info, "summary": summary, "runs": runs})
    plot(runs, png, command)
    print(table)


if __name__ == "__main__":
    main()
