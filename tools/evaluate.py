"""Score a checkpoint on held-out text, on HellaSwag, PIQA, ARC and LAMBADA, and with the papers' probes.

    python -m tools.evaluate --ckpt out/ --tasks val,hellaswag,piqa,arc_easy,arc_challenge,lambada
    python -m tools.evaluate --ckpt out/ --tasks hellaswag --data bundle --limit 200
    python -m tools.evaluate --ckpt out/ --tasks val --text notes.txt      # any UTF-8 file as held-out text
    python -m tools.evaluate --ckpt out/ --tasks rare_tokens,typos         # the papers' probes
    python -m tools.evaluate --ckpt out-spell/ --tasks sft                 # exact match on SFT data's val pairs
    python -m tools.evaluate --ckpt out/ --tasks hellaswag,piqa --harness  # the same documents through the real lm-eval

Multiple choice and LAMBADA follow the LM Evaluation Harness (v0.4) exactly: a choice's score is
the summed log-likelihood of " " + choice given the context; `acc` takes the argmax of the sums,
`acc_norm` of each sum divided by the choice's length in characters (the harness's
completion_len); ties go to the first choice (np.argmax). LAMBADA's `acc` is 1 when greedy
decoding reproduces every token of the target word, its `ppl` is exp(-mean log-likelihood of
the word). Contexts longer than the window lose tokens from the left; a document with a choice
longer than the window is skipped and counted, as the harness cannot score it. Each accuracy
comes with its standard error, sample std / sqrt(n) (the harness's mean_stderr). Prompt
formats: tasks.py.

The table goes to stdout, progress to stderr, everything to a JSON file (--out), and every answer
(per document or probe item: its log-likelihoods or scores, the pick, right or wrong) one JSON
line each to <out>-answers.jsonl beside it, from which each figure can be recomputed.
"""

from tablefree.common import interrupt_quietly
interrupt_quietly(__name__, "evaluate.py")  # is one line, not a traceback

import json
import sys
import time
from pathlib import Path

import numpy as np

from tablefree.checkpoint import find_checkpoint, load_checkpoint
from tablefree.packed import inference_model
from tablefree.common import ArgumentParser, UserError, pick_device, pick_dtype, require, user_errors
from tablefree.reports import check_report, json_report, write_together
from tablefree.data import checkpoint_dataset, open_masks, open_split, split_ids, token_counts
from tablefree.tokenizer import load_encoding
from tools.harness import run_harness
from tools.probes import bucket_losses, typo_pairs
from tools.scoring import (benchmark_requests, next_token_shift, run_benchmark, run_echo, run_layers, run_sft, run_val,
                           token_losses)
from tools.tasks import TASKS, default_data, load_probe_set

COMMAND = "python -m tools.evaluate"  # the mark its reports carry (common.mark)
TEXT_TASKS = ("val", "rare_tokens", "typos")  # on held-out text
PROBE_SETS = ("spelling", "echo", "echo_override", "layers")  # the committed probe_sets/ (override: Kronecker)
OWN_TASKS = (*TEXT_TASKS, *PROBE_SETS, "sft")  # sft: the val examples of prompt/response data (prepare.py --sft)


def parse_args(argv=None):
    p = ArgumentParser(prog="python -m tools.evaluate", description=__doc__.split("\n\n")[0])
    p.add_argument("--ckpt", default="out", help="a run directory (out/<run>) or a .pt file")
    p.add_argument("--tasks", default="val", help=f"comma-separated: {', '.join([*OWN_TASKS, *TASKS])}")
    p.add_argument("--limit", type=int, default=None, help="score only the first N documents (windows, pairs) of each task")
    p.add_argument("--data", default=default_data(), help="benchmark data: auto, hub, bundle, or a folder/.whl "
                   "(default: $TABLEFREE_EVAL_DATA or auto); see tasks.py")
    p.add_argument("--data_dir", default="data", help="prepared datasets (held-out split, train counts) and the source cache")
    p.add_argument("--dataset", default=None, help="prepared dataset for val/probes (default: the one the run trained on)")
    p.add_argument("--counts_from", default=None, help="rare_tokens: bucket targets by this prepared dataset's train "
                   "counts (default: --dataset's, or the run's); e.g. held-out text of a domain the run never saw")
    p.add_argument("--text", default=None, help="a UTF-8 text file to use as held-out text instead of the prepared val split")
    p.add_argument("--typo_pairs", type=int, default=200, help="clean/typo prompt pairs for the typos probe")
    p.add_argument("--batch_size", type=int, default=32, help="sequences per forward pass")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, mps")
    p.add_argument("--harness", action="store_true", help="score the benchmarks with the real lm-eval instead (harness.py)")
    p.add_argument("--out", default=None, help="JSON results (default: eval.json, or eval-harness.json, beside the checkpoint)")
    p.add_argument("--force", action="store_true", help="replace --out (and its answers) even where changed since "
                   "this command wrote them")
    args = p.parse_args(argv)
    unknown = [t for t in args.tasks.split(",") if t not in (*OWN_TASKS, *TASKS)]
    if unknown:
        p.error(f"unknown task(s) {', '.join(unknown)}; choose from {', '.join([*OWN_TASKS, *TASKS])}")
    require(args.batch_size >= 1, "--batch_size", args.batch_size, "at least 1")
    require(args.limit is None or args.limit >= 1, "--limit", args.limit, "at least 1")
    require(args.typo_pairs >= 1, "--typo_pairs", args.typo_pairs, "at least 1")
    args.command = " ".join(["python -m tools.evaluate", *(sys.argv[1:] if argv is None else argv)])
    return args



def heldout_ids(ckpt, enc, args):
    """Held-out token ids (np.int64) and where they came from: --text, or the prepared val split."""
    if args.text:
        try:
            text = Path(args.text).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"cannot read --text {args.text} as UTF-8 ({e})") from None
        return np.array(enc.encode_ordinary(text), dtype=np.int64), args.text
    directory, meta = checkpoint_dataset(ckpt, args.data_dir, args.dataset)
    return split_ids(directory, meta, "val"), f"{directory} val"


def sft_examples(ckpt, enc, args):
    """(prompt ids, response ids) of each val example of the run's SFT dataset, read back from its
    bins and loss mask: an example ends at its end-of-text, its prompt is masked out."""
    directory, meta = checkpoint_dataset(ckpt, args.data_dir, args.dataset)
    shards = open_split(directory, meta, "val")
    masks = open_masks(directory, meta, "val", shards)
    if masks is None:
        raise UserError(f"{directory} has no loss mask, so no prompt/response pairs to score; the sft task "
                        f"needs data from prepare.py --sft (give it with --dataset)")
    ids, mask = np.concatenate(shards).astype(np.int64), np.concatenate(masks)
    examples, start = [], 0
    for end in np.flatnonzero(ids == enc.eot_token)[:args.limit]:
        piece, counted = ids[start:end], mask[start:end]
        examples.append((piece[counted == 0].tolist(), piece[counted == 1].tolist()))
        start = end + 1
    return examples


def run_rare_tokens(ckpt, targets, losses, args):
    directory, meta = checkpoint_dataset(ckpt, args.data_dir, args.counts_from or args.dataset)
    counts = token_counts(directory, meta, "train")
    return {"train_split": str(directory), "buckets": bucket_losses(targets, losses, counts)}


def run_typos(model, enc, ids, args, autocast):
    """The typo probe on pairs made from the held-out text (probes.typo_pairs)."""
    text = enc.decode(ids[:400_000].tolist())  # a bound: 200 pairs need ~100,000 characters
    pairs = typo_pairs(text, args.limit or args.typo_pairs)
    if not pairs:
        raise UserError("the held-out text has no word of 5+ letters to misspell")
    return next_token_shift(model, enc, pairs, args, autocast, "kind")



def table(results):
    """Markdown rows: task, split, n, metric, value, stderr."""
    lines = ["| task | split | n | metric | value | stderr |", "|---|---|---|---|---|---|"]
    for task, r in results.items():
        if task == "layers":  # the cosine at the input and after the last block, per category
            lines += [f"| layers, {c} | probe_sets | {g['n']} | cosine at the input / after block {len(g['cosine_by_layer']) - 1} "
                      f"| {g['cosine_by_layer'][0]:.4f} / {g['cosine_by_layer'][-1]:.4f} | |" for c, g in r["by_category"].items()]
            continue
        if task == "rare_tokens":
            for b in r["buckets"]:
                loss = "" if b["loss"] is None else f"{b['loss']:.4f}"
                lines.append(f"| rare_tokens, train count {b['train_count']} | val | {b['n']:,} | loss | {loss} | |")
            continue
        for metric in ("loss", "ppl", "bpb", "acc", "acc_norm", "top1_agreement", "kl", "echo_rate", "echo_rate_sampled",
                       "exact_match"):
            if metric in r:
                stderr = r.get(f"{metric}_stderr")
                value = f"{r[metric]:,.1f}" if r[metric] >= 1e4 else f"{r[metric]:.4f}"  # LAMBADA ppl of a tiny model
                n = f"{r['n']:,}" + (f" ({r['skipped']:,} skipped)" if r.get("skipped") else "")
                lines.append(f"| {task} | {r.get('split', 'val')} | {n} | {metric} | {value} | "
                             f"{'' if stderr is None else f'{stderr:.4f}'} |")
        for group, g in r.get("by_category", {}).items():  # the probe sets' categories
            lines += [f"| {task}, {group} | | {g['n']} | {metric} | {g[metric]:.4f} | |"
                      for metric in ("top1_agreement", "kl", "echo_rate", "echo_rate_sampled") if metric in g]
    return lines


def score_tasks(ckpt, model, enc, tasks, args, autocast):
    """({task: results}, {task: seconds}) of evaluate.py's own scoring."""
    results, seconds = {}, {}
    if any(t in TEXT_TASKS for t in tasks):
        ids, where = heldout_ids(ckpt, enc, args)
    if "val" in tasks or "rare_tokens" in tasks:
        start = time.perf_counter()
        targets, losses = token_losses(model, ids, args.limit, args.batch_size, autocast)
        scored = time.perf_counter() - start
    for task in tasks:
        print(f"{task}: scoring", file=sys.stderr)
        start = time.perf_counter()
        if task == "val":
            results[task] = run_val(targets, losses, enc, where)
        elif task == "rare_tokens":
            results[task] = run_rare_tokens(ckpt, targets, losses, args)
        elif task == "typos":
            results[task] = run_typos(model, enc, ids, args, autocast)
        elif task == "spelling":
            pairs = load_probe_set(task, args.limit)
            results[task] = {"split": "probe_sets", **next_token_shift(model, enc, pairs, args, autocast, "category")}
        elif task in ("echo", "echo_override"):
            results[task] = {"split": "probe_sets", **run_echo(model, enc, load_probe_set("echo", args.limit), autocast,
                                                               override=task == "echo_override")}
        elif task == "layers":
            results[task] = {"split": "probe_sets", **run_layers(model, enc, load_probe_set(task, args.limit), autocast)}
        elif task == "sft":
            results[task] = run_sft(model, enc, sft_examples(ckpt, enc, args), autocast)
        else:
            results[task] = run_benchmark(task, model, enc, args, autocast)
        seconds[task] = time.perf_counter() - start + (scored if task in ("val", "rare_tokens") else 0)
        print(f"{task}: {seconds[task]:.1f} s", file=sys.stderr)
    return results, seconds


def harness_tasks(ckpt, model, path, enc, tasks, args):
    """({task: results}, {"all": seconds}, the lm_eval command): the same documents, scored by lm-eval."""
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise UserError(f"--harness scores only {', '.join(TASKS)}, not {', '.join(unknown)}; "
                        f"score the others without --harness")
    start = time.perf_counter()
    chosen = {t: benchmark_requests(t, enc, model.config.block_size, args) for t in tasks}
    results, command = run_harness(ckpt, model, path, {t: (c[0], c[3]) for t, c in chosen.items()}, args)
    print(f"the same run with lm-eval's own command line:\n  {command}", file=sys.stderr)
    return results, {"all": time.perf_counter() - start}, command


def evaluate(args):
    device = pick_device(args.device)
    path = find_checkpoint(args.ckpt)
    out = check_report(args.out or path.parent / ("eval-harness.json" if args.harness else "eval.json"), "--out",
                       COMMAND, args.force)
    if out.suffix.lower() != ".json":
        raise UserError(f"--out {out} is not a .json path; tools.evaluate writes its results as JSON (and a table to "
                        f"stdout): give --out a name ending in .json")
    check_report(answers_path(out), "--out", COMMAND, args.force)
    ckpt = load_checkpoint(path, "cpu")
    model = inference_model(ckpt).to(device).eval()
    enc = load_encoding(ckpt["tokenizer"])
    tasks = args.tasks.split(",")
    report = {"checkpoint": str(path), "iter_num": ckpt["iter_num"], "model_config": ckpt["model_config"],
              "command": args.command, "device": device}
    if args.harness:
        results, seconds, report["lm_eval_command"] = harness_tasks(ckpt, model, path, enc, tasks, args)
    else:
        results, seconds = score_tasks(ckpt, model, enc, tasks, args, pick_dtype("auto", device)[2])
    report |= {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "seconds": seconds, "results": results}
    answers = {task: r.pop("answers") for task, r in results.items() if "answers" in r}
    lines = [json.dumps({"task": task, **a}) + "\n" for task, items in answers.items() for a in items]
    write_together({out: json_report(COMMAND, report),  # and its answers, or neither
                    **({answers_path(out): json_report(COMMAND, {}, indent=None, lines=lines)} if answers else {})})
    print("\n".join(table(results)))
    if "val" in results:  # why it is not the training log's last val loss
        print(f"val: every one of the {results['val']['n']:,} held-out tokens scored (windows of block_size); "
              f"train.py's val loss is the mean of eval_iters random batches, so the two differ a little",
              file=sys.stderr)
    print(f"wrote {out}", file=sys.stderr)
    return report


def answers_path(out):
    """Where the answers of the report at out go: eval.json -> eval-answers.jsonl."""
    return out.with_name(f"{out.stem}-answers.jsonl")


def main(argv=None):
    with user_errors("evaluate.py"):
        evaluate(parse_args(argv))


if __name__ == "__main__":
    main()
