"""The papers' two probes, as pure functions evaluate.py feeds with model outputs.

rare tokens   held-out loss grouped by how often each target token occurs in the training split:
              the frozen-code paper reports its largest gains on rare words.
typos         prompt pairs that differ by one typo in their last word; the probe compares the
              model's next-token distributions after the two (top-1 agreement and KL divergence),
              as in the Kronecker-embedding paper's spelling-robustness probe.
"""

import re

import numpy as np
import torch
import torch.nn.functional as F

BUCKET_EDGES = (0, 1, 10, 100, 1_000, 10_000, 100_000)  # train-split counts where buckets start
TYPO_KINDS = ("swap", "drop", "double", "replace")
WORD = re.compile(r"(?<![A-Za-z'])[A-Za-z]{5,}(?![A-Za-z'])")  # a whole word of 5+ ASCII letters


def bucket_losses(targets, losses, counts, edges=BUCKET_EDGES):
    """Mean loss per bucket of train frequency.

    targets (N,) int token ids, losses (N,) nats, counts (V,) occurrences of each id in the
    training split. Bucket j holds the targets with edges[j] <= count < edges[j + 1]; the last
    bucket is open. Empty buckets are kept with n 0 and loss None, so tables line up across runs."""
    which = np.searchsorted(edges, counts[targets], side="right") - 1  # (N,) bucket index
    buckets = []
    for j, low in enumerate(edges):
        high = edges[j + 1] if j + 1 < len(edges) else None
        label = f">={low:,}" if high is None else str(low) if high == low + 1 else f"{low:,}-{high - 1:,}"
        chosen = which == j
        buckets.append({"train_count": label, "n": int(chosen.sum()),
                        "loss": float(losses[chosen].mean()) if chosen.any() else None})
    return buckets


def misspell(word, kind):
    """word with one typo at its middle letter i = len(word) // 2 (never the first or last letter):

    swap     letters i-1 and i trade places                               "keyboard" -> "keyobard"
    drop     letter i is deleted                                          "keyboard" -> "keybard"
    double   letter i is written twice                                    "keyboard" -> "keybooard"
    replace  letter i becomes the next in the alphabet, same case, z -> a  "keyboard" -> "keybpard"
    """
    i = len(word) // 2
    if kind == "swap":
        return word[:i - 1] + word[i] + word[i - 1] + word[i + 1:]
    if kind == "drop":
        return word[:i] + word[i + 1:]
    if kind == "double":
        return word[:i] + word[i] + word[i:]
    if kind == "replace":
        base = ord("a") if word[i].islower() else ord("A")
        return word[:i] + chr(base + (ord(word[i]) - base + 1) % 26) + word[i + 1:]
    raise ValueError(f"unknown typo kind {kind!r}")


def typo_pairs(text, n, context_chars=300, gap_chars=200):
    """Up to n clean/typo prompt pairs from text, deterministically.

    Candidate words are whole words of 5+ ASCII letters, taken in text order with at least
    gap_chars between one pair's word and the next, and at least context_chars into the text.
    Pair k uses typo kind TYPO_KINDS[k % 4]; a word the typo leaves unchanged (a swap of equal
    letters) is passed over. Each prompt is the context_chars before the word, started at a
    word boundary, then the word: clean as written, typo misspelt. Nothing follows the word, so
    the next-token prediction depends on it directly."""
    pairs, earliest = [], context_chars
    for match in WORD.finditer(text):
        if len(pairs) == n:
            break
        if match.start() < earliest:
            continue
        word, kind = match.group(), TYPO_KINDS[len(pairs) % len(TYPO_KINDS)]
        typo = misspell(word, kind)
        if typo == word:
            continue
        start = match.start() - context_chars
        space = text.find(" ", start, match.start())
        start = space + 1 if space >= 0 else start
        prefix = text[start:match.start()]
        pairs.append({"kind": kind, "word": word, "typo_word": typo, "clean": prefix + word, "typo": prefix + typo})
        earliest = match.end() + gap_chars
    return pairs


def typo_metrics(clean, typo):
    """Per pair: top-1 agreement (1.0 when both distributions have the same likeliest token) and
    KL(P_clean || P_typo) in nats, from log-probabilities clean, typo (N, V). Returns two (N,) tensors."""
    agree = (clean.argmax(-1) == typo.argmax(-1)).float()
    kl = F.kl_div(typo, clean, reduction="none", log_target=True).sum(-1)  # sum_v p_c (log p_c - log p_t)
    return agree.cpu(), kl.cpu()


@torch.no_grad()
def layer_cosines(model, enc, pairs, autocast):
    """Where does a model tell two words apart? Per pair, the cosine similarity of the two words'
    hidden states at their last token, each word after "the" ("the compute" / "the commute"), at
    the input (the token input's output) and after each block: (N, n_layer + 1) float64."""
    device, states = next(model.parameters()).device, []
    hooks = [m.register_forward_hook(lambda m, args, out: states.append(out[0, -1].double()))
             for m in (model.wte, *model.h)]
    try:
        rows = []
        for pair in pairs:
            both = []
            for word in (pair["a"], pair["b"]):
                states.clear()
                with autocast:
                    model(torch.tensor([enc.encode_ordinary(f"the {word}")], device=device))
                both.append(torch.stack(states))  # (n_layer + 1, n_embd)
            rows.append(F.cosine_similarity(both[0], both[1], dim=-1))
    finally:
        for hook in hooks:
            hook.remove()
    return torch.stack(rows).cpu()
