"""The quality of a frozen code derived from a source table, which train.py reports once (on screen
and in config.json) and refuses when the code cannot tell most tokens apart. (The norms it logs at
every evaluation are train.py's own: input_norms.)
"""

import numpy as np
import torch

from tablefree.common import UserError


def average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..N of x, ties given the mean of the ranks they span (as scipy's rankdata)."""
    order = np.argsort(x, kind="stable")
    sorted_x = x[order]
    starts = np.flatnonzero(np.r_[True, sorted_x[1:] != sorted_x[:-1]])  # first index of each tie group
    ends = np.r_[starts[1:], len(x)]
    ranks = np.empty(len(x))
    ranks[order] = np.repeat((starts + ends + 1) / 2, ends - starts)  # mean of ranks start+1 .. end
    return ranks


def code_quality(bits: torch.Tensor, source: torch.Tensor, pairs: int = 20_000, seed: int = 0,
                 exact_below: int = 8192) -> dict:
    """How good a frozen code is, since injectivity cannot be promised.

    bits uint8 (V, D), source float (V, d). distinct: how many different codes the V tokens have.
    min_hamming: over all pairs when V <= exact_below, else over the sampled pairs (the key
    says which). mean_hamming: exact over all pairs, from each bit's share of ones p_j:
    sum_j 2 p_j (1 - p_j) V / (V - 1). bit_balance: min / mean / max of p_j. spearman: rank
    correlation between the source rows' cosine similarity and the codes' Hamming similarity
    1 - h / D, on `pairs` pairs drawn with `seed` (i != j)."""
    V, D = bits.shape
    ones = bits.double().mean(dim=0)  # (D,) p_j
    signs = 2 * bits.float() - 1  # (V, D); h(i, j) = (D - s_i . s_j) / 2
    rng = np.random.default_rng(seed)
    i = rng.integers(0, V, pairs)
    j = (i + rng.integers(1, V, pairs)) % V  # never i
    sampled = (D - (signs[i] * signs[j]).sum(dim=1)) / 2  # (pairs,)
    if V <= exact_below:
        min_hamming, how = D, "all pairs"
        for start in range(0, V, 1024):  # (1024, V) at a time
            h = (D - signs[start:start + 1024] @ signs.T) / 2
            h[torch.arange(h.size(0)), torch.arange(start, start + h.size(0))] = D + 1  # not a pair
            min_hamming = min(min_hamming, int(h.min()))
    else:
        min_hamming, how = int(sampled.min()), f"{pairs:,} sampled pairs"
    unit = torch.nn.functional.normalize(source.double(), dim=1)
    cosine = (unit[i] * unit[j]).sum(dim=1).numpy()
    similarity = (1 - sampled / D).numpy()
    spearman = np.corrcoef(average_ranks(cosine), average_ranks(similarity))[0, 1]
    return {"V": V, "D": D, "distinct": len(torch.unique(bits, dim=0)), "min_hamming": min_hamming,
            "min_hamming_over": how, "mean_hamming": float((2 * ones * (1 - ones)).sum() * V / (V - 1)),
            "bit_balance": {"min": float(ones.min()), "mean": float(ones.mean()), "max": float(ones.max())},
            "spearman": float(spearman), "spearman_pairs": pairs}


def describe_quality(q: dict) -> str:
    """code_quality's figures (or their means over seeds) as one line."""
    return (f"{q['distinct']:,.0f} distinct codes of {q['V']:,.0f}, {q['D']:.0f} bits, Hamming distance min "
            f"{q['min_hamming']:.4g} ({q['min_hamming_over']}) and mean {q['mean_hamming']:.1f}, share of ones per "
            f"bit {q['bit_balance']['min']:.2f}-{q['bit_balance']['max']:.2f}, Spearman correlation of the source's "
            f"cosine and the codes' Hamming similarity {q['spearman']:.3f} ({q['spearman_pairs']:,} pairs)")


MIN_DISTINCT = 0.9  # the share of tokens a frozen code must tell apart (a trained table's: all or nearly all)


def require_distinct(quality, source):
    """quality (code_quality's), unless its codes tell fewer than MIN_DISTINCT of the tokens apart:
    then the one-line error naming the source table and the fix."""
    if quality["distinct"] < MIN_DISTINCT * quality["V"]:
        raise UserError(f"the codes derived from --codes_from {source} tell only {quality['distinct']:,} of "
                        f"{quality['V']:,} tokens apart (under {MIN_DISTINCT:.0%}); give a trained table with "
                        f"distinct rows, or more bits (--code_dim, at most n_embd)")
    return quality
