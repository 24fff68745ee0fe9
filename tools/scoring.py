"""How a model scores text: the one batched model call, the LM Evaluation Harness's (v0.4) rules
for multiple choice and LAMBADA, held-out token losses, and the probes' next-token and echo
measurements. tools/evaluate.py turns them into its tasks; tools/extend.py reuses the losses.
"""

import copy
import math
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from tablefree.common import UserError
from tablefree.data import bits_per_byte
from tablefree.extension import add_tokens
from tablefree.tokenizer import bytes_of_token, vocab_bytes
from tools.probes import layer_cosines, typo_metrics
from tools.tasks import load_rows, to_docs


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
        if not torch.isfinite(logits).all():  # never scores of nan: a damaged or diverged model
            raise UserError("the model's logits are not finite; the weights are damaged or diverged: "
                            "evaluate another checkpoint")
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
    """acc and acc_norm (with standard errors) from each document's per-choice log-likelihoods,
    and the answers: per document its log-likelihoods, both picks, the gold choice."""
    answers = []
    for i, (doc, lls) in enumerate(zip(docs, scores)):
        pick, pick_norm = first_argmax(lls), first_argmax([ll / len(c) for ll, c in zip(lls, doc["choices"])])
        answers.append({"id": i, "lls": [float(ll) for ll in lls], "pick": pick, "pick_norm": pick_norm,
                        "gold": doc["gold"], "correct": pick == doc["gold"], "correct_norm": pick_norm == doc["gold"]})
    acc, acc_norm = ([float(a[key]) for a in answers] for key in ("correct", "correct_norm"))
    return {"acc": float(np.mean(acc)), "acc_stderr": mean_stderr(acc),
            "acc_norm": float(np.mean(acc_norm)), "acc_norm_stderr": mean_stderr(acc_norm), "answers": answers}


def benchmark_requests(name, enc, block, args):
    """A task's documents that fit the window: their rows, documents and (context, continuation) ids.

    The harness refuses a continuation longer than the model's window (HFLM asserts it), so a
    document with such a choice cannot be scored as the harness scores it: it is skipped and
    counted (`skipped`), in evaluate.py and harness.py alike. Returns rows, docs, requests, info."""
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
        answers = [{"id": i, "ll": float(ll), "correct": bool(g)} for i, (ll, g) in enumerate(zip(lls, greedy))]
        return {**out, "acc": float(np.mean(greedy)), "acc_stderr": mean_stderr(greedy), "ppl": math.exp(-np.mean(lls)),
                "answers": answers}
    return {**out, **multiple_choice(docs, [[ll for ll, _ in s] for s in scores])}


def token_losses(model, ids, limit, batch_size, autocast):
    """Per-token losses (nats) and targets over windows of block_size + 1 tokens that overlap by one.

    Each window predicts its last block_size tokens, so every token after the first is scored
    once, with up to block_size - 1 tokens of context (contexts restart at window edges)."""
    block = model.config.block_size
    starts = list(range(0, max(len(ids) - 1, 0), block))[:limit]
    if not starts:
        raise UserError("the held-out text has fewer than 2 tokens")
    windows = [ids[s:s + block + 1].tolist() for s in starts]
    targets = np.concatenate([np.asarray(w[1:]) for w in windows])
    losses, at = np.empty(len(targets), dtype=np.float32), np.cumsum([0] + [len(w) - 1 for w in windows])

    # The losses go into one array made beforehand: a small array kept for each window, left between
    # the (T, V) temporaries, fragmented glibc's heap by about that temporary a window (13 GB for the
    # regime study's 3,047 windows at V = 8,192; dev/LOG.md, 2026-12-04).
    def score(i, logits):
        target = torch.tensor(windows[i][1:], device=logits.device)
        losses[at[i]:at[i + 1]] = F.cross_entropy(logits.float(), target, reduction="none").cpu().numpy()

    score_sequences(model, [w[:-1] for w in windows], batch_size, autocast, score)
    return targets, losses


def run_val(targets, losses, enc, where):
    """Loss, perplexity and bits per byte (dataset.bits_per_byte, as train.py logs it): the
    losses of all target tokens over the UTF-8 bytes they spell; end of text spells none."""
    spelled = np.array([len(b) for b in vocab_bytes(enc, enc.n_vocab)])
    spelled[enc.eot_token] = 0
    loss = float(losses.mean())
    return {"source": where, "n": len(targets), "loss": loss, "ppl": math.exp(loss),
            "bpb": bits_per_byte(loss, len(targets), int(spelled[targets].sum()))}


def indices_by(items, key):
    """{item[key]: [the indices of the items with it]}, in first-seen order: a probe's categories."""
    groups = {}
    for i, item in enumerate(items):
        groups.setdefault(item[key], []).append(i)
    return groups


def next_token_shift(model, enc, pairs, args, autocast, group):
    """How a typo moves the next-token distribution: top-1 agreement and KL(P_clean || P_typo)
    after each pair's clean and typo prompts (probes.typo_metrics), overall and per pair[group]."""
    block = model.config.block_size
    prompts = [enc.encode_ordinary(p)[-block:] for pair in pairs for p in (pair["clean"], pair["typo"])]
    last = score_sequences(model, prompts, args.batch_size, autocast,  # (V,) each: the next token's distribution
                           lambda i, logits: F.log_softmax(logits[-1].float(), dim=-1))
    agree, kl = typo_metrics(torch.stack(last[0::2]), torch.stack(last[1::2]))
    by_group = {k: {"n": len(i), "top1_agreement": float(agree[i].mean()), "kl": float(kl[i].mean())}
                for k, i in indices_by(pairs, group).items()}
    answers = [{"id": i, **pair, "top1_agreement": bool(a), "kl": float(k)}
               for i, (pair, a, k) in enumerate(zip(pairs, agree, kl))]
    return {"n": len(pairs), "top1_agreement": float(np.mean(agree.numpy().astype(np.float64))),
            "top1_agreement_stderr": mean_stderr(agree.numpy()),
            "kl": float(kl.mean()), f"by_{group}": by_group, "examples": pairs[:3], "answers": answers}


def generated(model, prompt_ids, new_tokens, autocast, stop=None, **sampling):
    """Up to new_tokens ids model.generate chooses after prompt_ids (its last block_size), ending
    early after `stop`; sampling: generate's (temperature, top_p, generator, ...)."""
    idx = torch.tensor([prompt_ids[-model.config.block_size:]], device=next(model.parameters()).device)
    new = []
    try:
        with autocast:
            for token in model.generate(idx, new_tokens, **sampling):
                new.append(token.item())
                if new[-1] == stop:
                    break
    except ValueError as e:  # non-finite logits
        raise UserError(f"{e}; evaluate another checkpoint") from None
    return new


SAMPLED = {"temperature": 0.7, "top_p": 0.9}  # the Kronecker paper's generation probe
ECHO_SAMPLES = 5  # draws per prompt at SAMPLED


def spare_ids(model, enc, prompts):
    """(a copy of model with one spare id per prompt, each prompt's ids): the prompt's string
    (with its leading space, as the text has it) enters as the single new token V + i whose bytes
    it is, the rest of the prompt as usual: what the Kronecker package's forward_with_byte_override
    computes at that position (tests/test_kronecker.py). Only a code made from bytes can do it."""
    if not hasattr(model.wte, "token_bytes"):
        raise UserError(f"echo_override needs the Kronecker input, whose code is made from a token's bytes; this "
                        f"model's input is {model.config.input!r}: score echo instead")
    strings = [" " + p["string"] if " " + p["string"] in p["prompt"] else p["string"] for p in prompts]
    V, model = model.config.vocab_size, copy.deepcopy(model)
    add_tokens(model, [enc.encode_ordinary(s) for s in strings], [s.encode("utf-8") for s in strings])
    ids = []
    for i, (p, s) in enumerate(zip(prompts, strings)):
        before, _, after = p["prompt"].partition(s)
        ids.append([*enc.encode_ordinary(before), V + i, *enc.encode_ordinary(after)])
    return model, ids, [s.encode("utf-8") for s in strings]


def run_echo(model, enc, prompts, autocast, new_tokens=16, override=False, seed=0):
    """Does generation repeat a string it has only seen in the prompt (an invented name, a
    misspelt word)? echo_rate: the share of prompts whose greedy next new_tokens contain it;
    echo_rate_sampled: the share of ECHO_SAMPLES draws a prompt at SAMPLED that do. override:
    the string enters as one token of its own bytes (spare_ids; the Kronecker input only)."""
    ids, extra, V = [enc.encode_ordinary(p["prompt"]) for p in prompts], [], model.config.vocab_size
    if override:
        model, ids, extra = spare_ids(model, enc, prompts)
    generator = torch.Generator(next(model.parameters()).device).manual_seed(seed)

    def continue_(prompt_ids, **sampling):
        new = generated(model, prompt_ids, new_tokens, autocast, generator=generator, **sampling)
        return b"".join(bytes_of_token(enc, t) if t < V else extra[t - V] for t in new).decode(
            "utf-8", errors="replace")  # a spare id spells its string

    answers = []
    for i, (p, prompt_ids) in enumerate(zip(prompts, ids)):
        greedy = continue_(prompt_ids, temperature=0)
        draws = [continue_(prompt_ids, **SAMPLED) for _ in range(ECHO_SAMPLES)]
        answers.append({"id": i, **p, "continuation": greedy, "echoed": p["string"] in greedy, "samples": draws,
                        "echoed_sampled": float(np.mean([p["string"] in d for d in draws]))})
    echoed, sampled = [float(a["echoed"]) for a in answers], [a["echoed_sampled"] for a in answers]
    by_category = {k: [answers[i] for i in group] for k, group in indices_by(answers, "category").items()}
    return {"n": len(prompts), "echo_rate": float(np.mean(echoed)), "echo_rate_stderr": mean_stderr(echoed),
            "echo_rate_sampled": float(np.mean(sampled)), "echo_rate_sampled_stderr": mean_stderr(sampled),
            "sampling": {**SAMPLED, "samples": ECHO_SAMPLES, "seed": seed},
            "by_category": {k: {"n": len(v), "echo_rate": float(np.mean([a["echoed"] for a in v])),
                                "echo_rate_sampled": float(np.mean([a["echoed_sampled"] for a in v]))}
                            for k, v in by_category.items()},
            "examples": answers[:3], "answers": answers}


def run_layers(model, enc, pairs, autocast):
    """The layered probe (probes.layer_cosines): per category, the mean cosine similarity of the
    pairs' hidden states at the input and after each block; per pair, its own."""
    cosines = layer_cosines(model, enc, pairs, autocast)  # (N, n_layer + 1)
    return {"n": len(pairs), "by_category": {c: {"n": len(i), "cosine_by_layer": cosines[i].mean(dim=0).tolist()}
                                             for c, i in indices_by(pairs, "category").items()},
            "answers": [{"id": i, **pair, "cosine_by_layer": cosines[i].tolist()} for i, pair in enumerate(pairs)]}


def run_sft(model, enc, examples, autocast):
    """Exact match on prompt/response examples: greedy decoding from the prompt gives the response's
    tokens and then end-of-text. examples: [(prompt ids, response ids)] (evaluate.sft_examples)."""
    answers = []
    for prompt, response in examples:
        new = generated(model, prompt, len(response) + 1, autocast, stop=enc.eot_token, temperature=0)
        answers.append({"id": len(answers), "prompt": prompt, "response": response, "generated": new,
                        "correct": new == [*response, enc.eot_token]})
    hits = [float(a["correct"]) for a in answers]
    shown = [{"prompt": enc.decode(a["prompt"]), "response": enc.decode(a["response"]),
              "generated": enc.decode([t for t in a["generated"] if t != enc.eot_token])} for a in answers[:3]]
    return {"n": len(examples), "exact_match": float(np.mean(hits)), "exact_match_stderr": mean_stderr(hits),
            "examples": shown, "answers": answers}
