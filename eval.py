"""Score a checkpoint on held-out text, on HellaSwag, PIQA, ARC and LAMBADA, and with the seeds' probes.

    python eval.py --ckpt out/ --tasks val,hellaswag,piqa,arc_easy,arc_challenge,lambada
    python eval.py --ckpt out/ --tasks hellaswag --data bundle --limit 200
    python eval.py --ckpt out/ --tasks val --text notes.txt      # any UTF-8 file as held-out text
    python eval.py --ckpt out/ --tasks rare_tokens,typos         # the seeds' probes
    python eval.py --ckpt out/ --tasks hellaswag,piqa --harness  # the same documents through the real lm-eval

Multiple choice and LAMBADA follow the LM Evaluation Harness (v0.4) exactly: a choice's score is
the summed log-likelihood of " " + choice given the context; `acc` takes the argmax of the sums,
`acc_norm` of each sum divided by the choice's length in characters (the harness's
completion_len); ties go to the first choice (np.argmax). LAMBADA's `acc` is 1 when greedy
decoding reproduces every token of the target word, its `ppl` is exp(-mean log-likelihood of
the word). Contexts longer than the window lose tokens from the left; a document with a choice
longer than the window is skipped and counted, as the harness cannot score it. Each accuracy
comes with its standard error, sample std / sqrt(n) (the harness's mean_stderr). Prompt
formats: tasks.py.

The table goes to stdout, progress to stderr, everything to a JSON file (--out).
"""

import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from checkpoint import build_model, find_checkpoint, load_checkpoint
from dataset import bits_per_byte, read_meta, split_ids, token_counts
from harness import run_harness
from probes import bucket_losses, typo_metrics, typo_pairs
from settings import ArgumentParser, UserError, pick_device, pick_dtype, require, user_errors, write_atomic
from tasks import TASKS, default_data, load_probe_set, load_rows, to_docs
from tokenizer import load_encoding

TEXT_TASKS = ("val", "rare_tokens", "typos")  # on held-out text
PROBE_SETS = ("spelling", "echo")  # on the committed prompts in probe_sets/


def parse_args(argv=None):
    p = ArgumentParser(prog="eval.py", description=__doc__.split("\n")[0])
    p.add_argument("--ckpt", default="out", help="a run directory (out/<run>) or a .pt file")
    p.add_argument("--tasks", default="val", help=f"comma-separated: {', '.join([*TEXT_TASKS, *PROBE_SETS, *TASKS])}")
    p.add_argument("--limit", type=int, default=None, help="score only the first N documents (windows, pairs) of each task")
    p.add_argument("--data", default=default_data(), help="benchmark data: auto, hub, bundle, or a folder/.whl "
                   "(default: $TABLEFREE_EVAL_DATA or auto); see tasks.py")
    p.add_argument("--data_dir", default="data", help="prepared datasets (held-out split, train counts) and the source cache")
    p.add_argument("--dataset", default=None, help="prepared dataset for val/probes (default: the one the run trained on)")
    p.add_argument("--text", default=None, help="a UTF-8 text file to use as held-out text instead of the prepared val split")
    p.add_argument("--typo_pairs", type=int, default=200, help="clean/typo prompt pairs for the typos probe")
    p.add_argument("--batch_size", type=int, default=32, help="sequences per forward pass")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, mps")
    p.add_argument("--harness", action="store_true", help="score the benchmarks with the real lm-eval instead (harness.py)")
    p.add_argument("--out", default=None, help="JSON results (default: eval.json, or eval-harness.json, beside the checkpoint)")
    args = p.parse_args(argv)
    unknown = [t for t in args.tasks.split(",") if t not in (*TEXT_TASKS, *PROBE_SETS, *TASKS)]
    if unknown:
        p.error(f"unknown task(s) {', '.join(unknown)}; choose from {', '.join([*TEXT_TASKS, *PROBE_SETS, *TASKS])}")
    require(args.batch_size >= 1, "--batch_size", args.batch_size, "at least 1")
    require(args.limit is None or args.limit >= 1, "--limit", args.limit, "at least 1")
    require(args.typo_pairs >= 1, "--typo_pairs", args.typo_pairs, "at least 1")
    args.command = " ".join(["python eval.py", *(sys.argv[1:] if argv is None else argv)])
    return args


# ---- the one model call: right-padded batches of token lists ----

@torch.no_grad()
def score_sequences(model, seqs, batch_size, autocast, score):
    """[score(i, logits (len(seqs[i]), V)) for each token list seqs[i]], run in right-padded batches.

    Sequences are sorted longest first so a batch holds similar lengths (little padding).
    Padding sits after each sequence, so causal attention never lets it touch real positions.
    `score` takes the log-softmax of only the positions it needs: a (B, T, V) float32 copy
    would be 8.6 GB at batch 32, T 1024, V 65,536."""
    device = next(model.parameters()).device
    order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))
    results = [None] * len(seqs)
    for start in tqdm(range(0, len(order), batch_size), desc="scoring", unit="batch", leave=False, file=sys.stderr,
                      disable=None):
        chunk = order[start:start + batch_size]
        T = len(seqs[chunk[0]])
        idx = torch.zeros(len(chunk), T, dtype=torch.long)
        for b, i in enumerate(chunk):
            idx[b, :len(seqs[i])] = torch.tensor(seqs[i])
        with autocast:
            logits, _ = model(idx.to(device), all_positions=True)  # (B, T, V)
        for b, i in enumerate(chunk):
            results[i] = score(i, logits[b, :len(seqs[i])])
    return results


def encode_pair(enc, context, continuation):
    """Token ids of context and continuation as the harness makes them (HFLM._encode_pair).

    Trailing spaces of the context move to the continuation; the pair is encoded whole and the
    continuation is what follows the context's own tokens, so a merge across the boundary
    counts toward the continuation. An empty context becomes the end-of-text token."""
    if not context:
        return [enc.eot_token], enc.encode_ordinary(continuation)
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole, n = enc.encode_ordinary(context + continuation), len(enc.encode_ordinary(context))
    return whole[:n], whole[n:]


def score_continuations(model, requests, batch_size, autocast):
    """For each (context ids, continuation ids): (summed log-likelihood, whether greedy decoding reproduces it).

    Left truncation as in the harness: the model sees the last block_size of the tokens, the
    continuation's positions are the last len(continuation) of its input. A continuation must
    fit the window (benchmark_requests skips documents where one does not, as the harness must)."""
    block = model.config.block_size
    inputs = [(ctx + cont)[-(block + 1):] for ctx, cont in requests]
    if any(len(cont) > block for _, cont in requests):
        raise ValueError(f"a continuation is longer than the {block}-token window")

    def score(i, logits):
        n = len(requests[i][1])
        rows = F.log_softmax(logits[-n:].float(), dim=-1)  # (n, V): predictions of the continuation's tokens
        target = torch.tensor(inputs[i][-n:], device=rows.device)
        return rows.gather(-1, target[:, None]).sum().item(), bool((rows.argmax(-1) == target).all())

    return score_sequences(model, [x[:-1] for x in inputs], batch_size, autocast, score)


def mean_stderr(values):
    """The harness's standard error of a mean: sample standard deviation / sqrt(n)."""
    values = np.asarray(values, dtype=np.float64)
    return float(values.std(ddof=1) / math.sqrt(len(values))) if len(values) > 1 else float("nan")


def first_argmax(values):
    """Index of the largest value, the first one on ties (as np.argmax, which the harness uses)."""
    return max(range(len(values)), key=lambda j: (values[j], -j))


def multiple_choice(docs, scores):
    """acc and acc_norm (with standard errors) from each document's per-choice log-likelihoods."""
    acc, acc_norm = [], []
    for doc, lls in zip(docs, scores):
        acc.append(float(first_argmax(lls) == doc["gold"]))
        acc_norm.append(float(first_argmax([ll / len(c) for ll, c in zip(lls, doc["choices"])]) == doc["gold"]))
    return {"acc": float(np.mean(acc)), "acc_stderr": mean_stderr(acc),
            "acc_norm": float(np.mean(acc_norm)), "acc_norm_stderr": mean_stderr(acc_norm)}


def benchmark_requests(name, enc, block, args):
    """A task's documents that fit the window: their rows, documents and (context, continuation) ids.

    The harness refuses a continuation longer than the model's window (HFLM asserts it), so a
    document with such a choice cannot be scored as the harness scores it: it is skipped and
    counted (`skipped`), in eval.py and harness.py alike. Returns rows, docs, requests, info."""
    rows, split, where = load_rows(name, args.data, Path(args.data_dir) / "_sources", args.limit)
    kept = [(row, doc, [encode_pair(enc, doc["context"], " " + c) for c in doc["choices"]])
            for row, doc in zip(rows, to_docs(name, rows, where))]
    kept = [k for k in kept if all(len(cont) <= block for _, cont in k[2])]
    info = {"split": split, "source": where, "skipped": len(rows) - len(kept)}
    print(f"{name}: {len(kept)} documents ({split} split) from {where}"
          + (f"; {info['skipped']} skipped: a choice longer than the {block}-token window" if info["skipped"] else ""),
          file=sys.stderr)
    if not kept:
        raise UserError(f"{name}: every document has a choice longer than the model's {block}-token window")
    rows, docs, requests = zip(*kept)
    return list(rows), list(docs), list(requests), info


def run_benchmark(name, model, enc, args, autocast):
    _, docs, requests, info = benchmark_requests(name, enc, model.config.block_size, args)
    results = iter(score_continuations(model, [r for doc in requests for r in doc], args.batch_size, autocast))
    scores = [[next(results) for _ in d["choices"]] for d in docs]  # per doc: (ll, greedy) per choice
    out = {**info, "n": len(docs)}
    if name == "lambada":
        greedy = [float(s[0][1]) for s in scores]
        lls = [s[0][0] for s in scores]
        return {**out, "acc": float(np.mean(greedy)), "acc_stderr": mean_stderr(greedy), "ppl": math.exp(-np.mean(lls))}
    return {**out, **multiple_choice(docs, [[ll for ll, _ in s] for s in scores])}


# ---- held-out text and the probes ----

def heldout_ids(ckpt, enc, args):
    """Held-out token ids (np.int64) and where they came from: --text, or the prepared val split."""
    if args.text:
        try:
            text = Path(args.text).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"cannot read --text {args.text} as UTF-8 ({e})") from None
        return np.array(enc.encode_ordinary(text), dtype=np.int64), args.text
    directory, meta = prepared(ckpt, args)
    return split_ids(directory, meta, "val"), f"{directory} val"


def prepared(ckpt, args):
    """The prepared dataset's folder and meta.json, checked to use the checkpoint's tokenizer."""
    directory = Path(args.data_dir) / (args.dataset or ckpt["settings"]["dataset"])
    meta = read_meta(directory)
    if meta["tokenizer"] != ckpt["tokenizer"]["info"]:
        raise UserError(f"{directory} was prepared with another tokenizer than the checkpoint's; evaluate on the "
                        f"dataset the run trained on (--dataset) or give --text")
    return directory, meta


def token_losses(model, ids, limit, batch_size, autocast):
    """Per-token losses (nats) and targets over windows of block_size + 1 tokens that overlap by one.

    Each window predicts its last block_size tokens, so every token after the first is scored
    once, with up to block_size - 1 tokens of context (contexts restart at window edges)."""
    block = model.config.block_size
    starts = list(range(0, max(len(ids) - 1, 0), block))[:limit]
    if not starts:
        raise UserError("the held-out text has fewer than 2 tokens")
    windows = [ids[s:s + block + 1].tolist() for s in starts]

    def score(i, logits):
        target = torch.tensor(windows[i][1:], device=logits.device)
        return F.cross_entropy(logits.float(), target, reduction="none").cpu().numpy()

    losses = score_sequences(model, [w[:-1] for w in windows], batch_size, autocast, score)
    return np.concatenate([np.asarray(w[1:]) for w in windows]), np.concatenate(losses)


def run_val(targets, losses, enc, where):
    """Loss, perplexity and bits per byte (dataset.bits_per_byte, as train.py logs it): the
    losses of all target tokens over the UTF-8 bytes they spell; end of text spells none."""
    token_bytes = np.array([0 if t == enc.eot_token else len(enc.decode_single_token_bytes(t))
                            for t in range(enc.n_vocab)])
    loss = float(losses.mean())
    return {"source": where, "n": len(targets), "loss": loss, "ppl": math.exp(loss),
            "bpb": bits_per_byte(loss, len(targets), int(token_bytes[targets].sum()))}


def run_rare_tokens(ckpt, targets, losses, args):
    directory, meta = prepared(ckpt, args)
    counts = token_counts(directory, meta, "train")
    return {"train_split": str(directory), "buckets": bucket_losses(targets, losses, counts)}


def next_token_shift(model, enc, pairs, args, autocast, group):
    """How a typo moves the next-token distribution: top-1 agreement and KL(P_clean || P_typo)
    after each pair's clean and typo prompts (probes.typo_metrics), overall and per pair[group]."""
    block = model.config.block_size
    prompts = [enc.encode_ordinary(p)[-block:] for pair in pairs for p in (pair["clean"], pair["typo"])]
    last = score_sequences(model, prompts, args.batch_size, autocast,  # (V,) each: the next token's distribution
                           lambda i, logits: F.log_softmax(logits[-1].float(), dim=-1))
    agree, kl = typo_metrics(torch.stack(last[0::2]), torch.stack(last[1::2]))
    groups = {}
    for i, pair in enumerate(pairs):
        groups.setdefault(pair[group], []).append(i)
    by_group = {k: {"n": len(i), "top1_agreement": float(agree[i].mean()), "kl": float(kl[i].mean())}
                for k, i in groups.items()}
    return {"n": len(pairs), "top1_agreement": float(agree.mean()), "top1_agreement_stderr": mean_stderr(agree.numpy()),
            "kl": float(kl.mean()), f"by_{group}": by_group, "examples": pairs[:3]}


def run_typos(model, enc, ids, args, autocast):
    """The typo probe on pairs made from the held-out text (probes.typo_pairs)."""
    text = enc.decode(ids[:400_000].tolist())  # a bound: 200 pairs need ~100,000 characters
    pairs = typo_pairs(text, args.limit or args.typo_pairs)
    if not pairs:
        raise UserError("the held-out text has no word of 5+ letters to misspell")
    return next_token_shift(model, enc, pairs, args, autocast, "kind")


def run_echo(model, enc, prompts, autocast, new_tokens=16):
    """Does greedy generation repeat a string it has only seen in the prompt (an invented name,
    a misspelt word)? echo_rate: the share of prompts whose next new_tokens contain it."""
    echoed, continuations = [], []
    device = next(model.parameters()).device
    for p in prompts:
        idx = torch.tensor([enc.encode_ordinary(p["prompt"])[-model.config.block_size:]], device=device)
        with autocast:
            new = torch.cat(list(model.generate(idx, new_tokens, temperature=0)), dim=1)  # (1, new_tokens)
        continuations.append(enc.decode(new[0].tolist()))
        echoed.append(float(p["string"] in continuations[-1]))
    by_category = {}
    for p, e in zip(prompts, echoed):
        by_category.setdefault(p["category"], []).append(e)
    return {"n": len(prompts), "echo_rate": float(np.mean(echoed)), "echo_rate_stderr": mean_stderr(echoed),
            "by_category": {k: {"n": len(v), "echo_rate": float(np.mean(v))} for k, v in by_category.items()},
            "examples": [{**p, "continuation": c} for p, c in zip(prompts[:3], continuations)]}


# ---- the report ----

def table(results):
    """Markdown rows: task, split, n, metric, value, stderr."""
    lines = ["| task | split | n | metric | value | stderr |", "|---|---|---|---|---|---|"]
    for task, r in results.items():
        if task == "rare_tokens":
            for b in r["buckets"]:
                loss = "" if b["loss"] is None else f"{b['loss']:.4f}"
                lines.append(f"| rare_tokens, train count {b['train_count']} | val | {b['n']:,} | loss | {loss} | |")
            continue
        for metric in ("loss", "ppl", "bpb", "acc", "acc_norm", "top1_agreement", "kl", "echo_rate"):
            if metric in r:
                stderr = r.get(f"{metric}_stderr")
                value = f"{r[metric]:,.1f}" if r[metric] >= 1e4 else f"{r[metric]:.4f}"  # LAMBADA ppl of a tiny model
                n = f"{r['n']:,}" + (f" ({r['skipped']:,} skipped)" if r.get("skipped") else "")
                lines.append(f"| {task} | {r.get('split', 'val')} | {n} | {metric} | {value} | "
                             f"{'' if stderr is None else f'{stderr:.4f}'} |")
        for group, g in r.get("by_category", {}).items():  # the probe sets' categories
            lines += [f"| {task}, {group} | | {g['n']} | {metric} | {g[metric]:.4f} | |"
                      for metric in ("top1_agreement", "kl", "echo_rate") if metric in g]
    return lines


def writable_output(out):
    """Refuse an output path that cannot be written before any scoring, not after it."""
    parent = out.parent if str(out.parent) else Path(".")
    if out.is_dir() or not parent.is_dir() or not os.access(parent, os.W_OK):
        raise UserError(f"cannot write the results to {out}; give --out a file in a writable folder")
    return out


def score_tasks(ckpt, model, enc, tasks, args, autocast):
    """({task: results}, {task: seconds}) of eval.py's own scoring."""
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
        elif task == "echo":
            results[task] = {"split": "probe_sets", **run_echo(model, enc, load_probe_set(task, args.limit), autocast)}
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
    out = writable_output(Path(args.out) if args.out else path.parent / ("eval-harness.json" if args.harness else "eval.json"))
    ckpt = load_checkpoint(path, "cpu")
    model = build_model(ckpt).to(device).eval()
    enc = load_encoding(ckpt["tokenizer"])
    tasks = args.tasks.split(",")
    report = {"checkpoint": str(path), "iter_num": ckpt["iter_num"], "model_config": ckpt["model_config"],
              "command": args.command, "device": device}
    if args.harness:
        results, seconds, report["lm_eval_command"] = harness_tasks(ckpt, model, path, enc, tasks, args)
    else:
        results, seconds = score_tasks(ckpt, model, enc, tasks, args, pick_dtype("auto", device)[2])
    report |= {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "seconds": seconds, "results": results}
    write_atomic(out, json.dumps(report, indent=2))
    print("\n".join(table(results)))
    print(f"wrote {out}", file=sys.stderr)
    return report


def main(argv=None):
    with user_errors("eval.py"):
        evaluate(parse_args(argv))


if __name__ == "__main__":
    main()
