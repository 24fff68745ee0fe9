"""Add words after training: how much does each input interface lose when the vocabulary grows?

    python -m tools.extend --ckpt out-compare/cpu/*-seed? --new_tokens 64 --name extension

The frozen-code paper reports that its frozen table accepts 10,000 new words after training at
a 3% cost where a learned table collapses by 43%, without publishing the protocol. Ours, the
same for every input interface (our choice throughout):

1. Held-out text: the run's prepared val split (whole documents it never trained on), decoded
   and cut in two halves at a line break; the first half makes the new words (and adapts),
   the second is measured.
2. New words: M more BPE merges, learned on the first half from the tokenizer's own vocabulary
   (the most frequent adjacent pair inside a pre-tokenized chunk, ties by bytes), so each new
   token is the concatenation of two tokens, its pieces (a piece that is itself new stands for
   its own pieces, so every new token is made of old ones). They take ids V .. V + M - 1; the
   end-of-text token keeps its id.
3. The extended model (tablefree/extension.py): a new head row is the mean of its pieces' head
   rows (the code head's is the new code, its bias the pieces' mean); a learned table's new row
   the mean of its pieces' rows (or, --new_rows random, drawn from N(0, 0.02^2), the table's own
   initialisation: the common default); binary and affine codes come from the ids (aliasing
   past 2^K); Kronecker codes from the bytes; frozen codes from the mean of the pieces' source
   rows, projected as the old ones were.
4. Optionally --adapt_steps of AdamW on the first half in the new tokenization, moving only
   the new rows (every parameter with a row per token: a learned table, the head or the code
   head's bias).
5. Bits per byte of the second half (the bytes are the same, the token count is not) with the
   old tokenizer and model, then the new ones; and the loss by train-count bucket of the old
   tokens, with the new tokens as their own bucket.

Results: <name>.md and .json in the first run's folder (or --results_dir), one row per run, means
over seeds per input.
"""

from tablefree.common import interrupt_quietly
interrupt_quietly(__name__, "extend.py")  # is one line, not a traceback

import heapq
import math
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import regex
import torch

from tablefree.checkpoint import find_checkpoint, load_checkpoint, read_code_source
from tablefree.packed import inference_model
from tablefree.common import ArgumentParser, UserError, plain_name, reader_may_leave, require, user_errors
from tablefree.reports import check_report, json_report, markdown, write_together
from tablefree.data import checkpoint_dataset, split_ids, token_counts
from tablefree.extension import add_tokens
from tablefree.tokenizer import load_encoding, make_encoding, parse_ranks
from tools.probes import bucket_losses
from tools.scoring import run_val, token_losses


def halves(docs):
    """The documents cut in two at the line break nearest after half their characters."""
    text = "\x00".join(docs)  # a document boundary that no document holds
    cut = text.find("\n", len(text) // 2) + 1 or len(text) // 2
    return text[:cut].split("\x00"), text[cut:].split("\x00")


def merge_pair(parts, left, right):
    """parts with every (left, right) from the start, not overlapping, joined into left + right."""
    merged, j = [], 0
    while j < len(parts):
        if j + 1 < len(parts) and (parts[j], parts[j + 1]) == (left, right):
            merged.append(left + right)
            j += 2
        else:
            merged.append(parts[j])
            j += 1
    return merged


def learn_merges(enc, ranks, pattern, texts, count):
    """count new BPE merges on texts, continuing enc's vocabulary (ranks): [(left, right) bytes].

    Each pre-tokenized chunk is split into enc's tokens; each round merges the most frequent
    adjacent pair whose concatenation is not a token yet (ties: the smaller bytes), everywhere.
    The pair counts are kept up to date rather than recounted each round: a merge recounts only
    the chunks holding its pair (where), and a heap holds every count a pair has had, the stale
    ones skipped when they surface (2,048 merges on cpu-mix-8k's held-out half: 0.3 s, not 200)."""
    chunks = Counter(c for t in texts for c in regex.findall(pattern, t))
    freq = list(chunks.values())
    words = [[enc.decode_single_token_bytes(t) for t in enc.encode_ordinary(c)] for c in chunks]
    pairs, where = Counter(), defaultdict(set)  # pair: its count in all chunks; pair: the chunks that held it
    for i, parts in enumerate(words):
        for pair in zip(parts, parts[1:]):
            pairs[pair] += freq[i]
            where[pair].add(i)
    heap = [(-n, pair) for pair, n in pairs.items()]
    heapq.heapify(heap)
    known, merges = set(ranks), []
    while len(merges) < count and heap:
        n, (left, right) = heapq.heappop(heap)
        if -n != pairs[left, right] or left + right in known:  # a count since changed, or a token already
            continue
        merges.append((left, right))
        known.add(left + right)
        touched = set()
        for i in where.pop((left, right)):
            parts, merged = words[i], merge_pair(words[i], left, right)
            for pair in zip(parts, parts[1:]):
                pairs[pair] -= freq[i]
            for pair in zip(merged, merged[1:]):
                pairs[pair] += freq[i]
                where[pair].add(i)
            touched.update(zip(parts, parts[1:]), zip(merged, merged[1:]))
            words[i] = merged
        for pair in touched:
            if pairs[pair] > 0:
                heapq.heappush(heap, (-pairs[pair], pair))
    return merges


def old_pieces(ranks, merges):
    """Each new token as the old ids it is made of: a piece that is itself new (merged earlier
    in the list) stands for its own pieces, so every new row is a mean of old rows."""
    made_of = {}
    for left, right in merges:
        made_of[left + right] = [t for piece in (left, right) for t in made_of.get(piece, [ranks.get(piece)])]
    return [made_of[left + right] for left, right in merges]


def extended_encoding(info, ranks, merges):
    """The tokenizer with the merges appended as ids V, V + 1, ...; end-of-text keeps V - 1."""
    V = info["vocab_size"]
    return make_encoding(info, {**ranks, **{left + right: V + i for i, (left, right) in enumerate(merges)}})


def encode_docs(enc, docs):
    """Each document's tokens followed by end-of-text, as prepare.py lays them out: int64 (N,)."""
    return np.array([t for d in docs for t in (*enc.encode_ordinary(d), enc.eot_token)], dtype=np.int64)


PER_TOKEN = ("wte.weight", "lm_head.weight", "lm_head.bias")  # the parameters with a row for each token


def adapt(model, ids, old_vocab, steps, lr, batch_size, seed=0):
    """steps of AdamW on windows of ids, moving only the rows of new tokens (ids >= old_vocab)."""
    rows = [p for name, p in model.named_parameters() if name in PER_TOKEN]
    for p in model.parameters():
        p.requires_grad_(any(p is r for r in rows))
    for p in rows:
        p.register_hook(lambda g: torch.cat([torch.zeros_like(g[:old_vocab]), g[old_vocab:]]))
    optimizer = torch.optim.AdamW(rows, lr=lr, weight_decay=0.0)  # a zero gradient with zero state: no move
    block, generator = model.config.block_size, torch.Generator().manual_seed(seed)
    data = torch.from_numpy(ids)
    model.train()
    for _ in range(steps):
        starts = torch.randint(len(data) - block - 1, (batch_size,), generator=generator)
        x = torch.stack([data[s:s + block] for s in starts])
        y = torch.stack([data[s + 1:s + block + 1] for s in starts])
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    model.eval()


def measure(model, enc, ids, counts, old_vocab, args):
    """Bits per byte of ids, and mean loss by train-count bucket (old tokens) and of new tokens."""
    autocast = torch.autocast("cpu", enabled=False)
    targets, losses = token_losses(model, ids, None, args.batch_size, autocast)
    new = targets >= old_vocab
    return {**run_val(targets, losses, enc, "second half"),
            "buckets": bucket_losses(targets[~new], losses[~new], counts),
            "new_tokens": {"n": int(new.sum()), "loss": float(losses[new].mean()) if new.any() else None}}


def extend_run(path, args):
    """The protocol on one run: its numbers before and after."""
    ckpt = load_checkpoint(path)
    model, enc = inference_model(ckpt).eval(), load_encoding(ckpt["tokenizer"])
    directory, meta = checkpoint_dataset(ckpt, args.data_dir, args.dataset)
    val = split_ids(directory, meta, "val")
    eot = enc.eot_token
    docs = [enc.decode_bytes(d[d != eot].tolist()).decode("utf-8", errors="replace")
            for d in np.split(val, np.flatnonzero(val == eot) + 1)]
    first, second = halves([d for d in docs if d])
    info, V = ckpt["tokenizer"]["info"], ckpt["model_config"]["vocab_size"]
    ranks = parse_ranks(ckpt["tokenizer"]["ranks"].encode())
    codes_from = ckpt["model_config"].get("codes_from")
    source = read_code_source(codes_from, V) if codes_from else None  # frozen codes' table, for new words
    merges = learn_merges(enc, ranks, info["pattern"], first, args.new_tokens)
    if len(merges) < args.new_tokens:  # every adjacent pair inside a chunk of the held-out half is merged
        raise UserError(f"the held-out text gives only {len(merges):,} new words, not --new_tokens {args.new_tokens:,}; "
                        + (f"give --new_tokens {len(merges)} or fewer" if merges else
                           "extend a run whose dataset holds more held-out text"))
    new_enc = extended_encoding(info, ranks, merges)
    pieces = old_pieces(ranks, merges)
    counts = token_counts(directory, meta, "train")
    before = measure(model, enc, encode_docs(enc, second), counts, V, args)
    try:
        note = add_tokens(model, pieces, [a + b for a, b in merges], source)
    except ValueError as e:
        raise UserError(f"{path}: {e}") from None
    table = args.new_rows if ckpt["model_config"]["input"] == "learned" else None  # only a table has rows to draw
    if table == "random":
        random_rows(model.wte.weight, V, ckpt["settings"]["seed"])
    if args.adapt_steps:
        adapt(model, encode_docs(new_enc, first), V, args.adapt_steps, args.adapt_lr, args.batch_size)
    after = measure(model, new_enc, encode_docs(new_enc, second), counts, V, args)
    return {"run": str(path.parent), "input": ckpt["model_config"]["input"], "kind": kind_of(ckpt["model_config"]),
            "seed": ckpt["settings"]["seed"],
            "vocab_size": V, "new_tokens": len(merges), "examples": [(a + b).decode("utf-8", "replace") for a, b in merges[:8]],
            "input_note": note, "table_rows": table, "before": before, "after": after,
            "bpb_change": after["bpb"] / before["bpb"] - 1}


def kind_of(config):
    """A model's name in the reports: its input, +tied or +codes for a head shared with its input."""
    return config["input"] + ("+tied" if config.get("tie_weights") else "") + ("+codes" if config.get("head") == "codes" else "")


@torch.no_grad()
def random_rows(table, V, seed):
    """The new rows of a learned table (ids V ..) drawn anew from N(0, 0.02^2), as GPT initialises
    the table, from a generator seeded by the run's seed."""
    rows = table[V:]
    rows.copy_(torch.randn(rows.shape, generator=torch.Generator().manual_seed(seed)).to(rows) * 0.02)


def free_and_aliased(note):
    return f"{note['free_codes']} / {note['aliased']}" if note else ""


def report(command, rows, args):
    """Markdown: the mean relative change per input, then every run."""
    by_input = {}
    for r in rows:
        by_input.setdefault(r["kind"], []).append(r)
    lines = [f"# Adding {args.new_tokens} words after training", "", f"`{command}`, "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; protocol: extend.py's docstring, "
             f"adaptation steps: {args.adapt_steps}, a learned table's new rows: {args.new_rows}.", "",
             "| input | runs | bits/byte before | bits/byte after | relative change (mean ± std) | loss on new tokens | binary codes: free / aliased |",
             "|---|---|---|---|---|---|---|"]
    for kind, rs in by_input.items():
        changes = [r["bpb_change"] for r in rs]
        std = statistics.stdev(changes) if len(changes) > 1 else 0.0
        note = rs[0]["input_note"]
        lines.append(f"| {kind} | {len(rs)} | {statistics.mean(r['before']['bpb'] for r in rs):.4f} | "
                     f"{statistics.mean(r['after']['bpb'] for r in rs):.4f} | {100 * statistics.mean(changes):+.2f}% ± "
                     f"{100 * std:.2f}% | {statistics.mean(r['after']['new_tokens']['loss'] for r in rs):.3f} | "
                     f"{free_and_aliased(note)} |")
    labels = [b["train_count"] for b in rows[0]["before"]["buckets"]]
    lines += ["", "Loss (nats) of old tokens by train count, before -> after, mean over runs:", "",
              "| input | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    for kind, rs in by_input.items():
        cells = []
        for j in range(len(labels)):
            pair = [[r[when]["buckets"][j]["loss"] for r in rs] for when in ("before", "after")]
            cells.append("" if None in pair[0] + pair[1] else f"{statistics.mean(pair[0]):.2f} -> {statistics.mean(pair[1]):.2f}")
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    lines += ["", f"New tokens, e.g.: {', '.join(repr(w) for w in rows[0]['examples'])}."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = ArgumentParser(prog="python -m tools.extend", description=__doc__.split("\n\n")[0])
    p.add_argument("--ckpt", nargs="+", required=True, help="run directories (out/<run>) or .pt files")
    p.add_argument("--new_tokens", type=int, default=64, help="M, the words added")
    p.add_argument("--adapt_steps", type=int, default=0, help="AdamW steps on the new rows only (0: none)")
    p.add_argument("--adapt_lr", type=float, default=1e-3)
    p.add_argument("--new_rows", choices=("mean", "random"), default="mean",
                   help="a learned table's new rows: the mean of their pieces' rows, or random as the table's init")
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--data_dir", default="data")
    p.add_argument("--dataset", default=None, help="prepared dataset (default: the one each run trained on)")
    p.add_argument("--name", default="extension", help="writes <results_dir>/<name>.md and .json")
    p.add_argument("--results_dir", help="where the report goes (default: the first --ckpt's run folder)")
    p.add_argument("--force", action="store_true", help="replace the report even where it was changed since this "
                   "command wrote it")
    with reader_may_leave(), user_errors("extend.py"):  # a closed pipe: quietly, the report kept
        args = p.parse_args(argv)
        require(args.new_tokens >= 1, "--new_tokens", args.new_tokens, "at least 1")
        require(args.adapt_steps >= 0, "--adapt_steps", args.adapt_steps, "at least 0")
        require(math.isfinite(args.adapt_lr) and args.adapt_lr > 0, "--adapt_lr", args.adapt_lr, "a finite number above 0")
        require(args.batch_size >= 1, "--batch_size", args.batch_size, "at least 1")
        plain_name(args.name, "--name", "<results_dir>/<name>.md and .json")
        folder = args.results_dir or find_checkpoint(args.ckpt[0]).parent
        flag, ours = "--results_dir or --name", "python -m tools.extend"
        results = check_report(Path(folder) / f"{args.name}.md", flag, ours, args.force)
        check_report(results.with_suffix(".json"), flag, ours, args.force)
        rows = []
        for ckpt in args.ckpt:
            rows.append(extend_run(find_checkpoint(ckpt), args))
            r = rows[-1]
            print(f"{ckpt} ({r['input']}): {r['before']['bpb']:.4f} -> {r['after']['bpb']:.4f} bits/byte "
                  f"({100 * r['bpb_change']:+.2f}%)", file=sys.stderr, flush=True)
        command = " ".join(["python -m tools.extend", *argv])
        table = report(command, rows, args)
        write_together({results: markdown(command, table),  # or neither
                        results.with_suffix(".json"): json_report(command, {"command": command, "runs": rows})})
        print(table)


if __name__ == "__main__":
    main()
