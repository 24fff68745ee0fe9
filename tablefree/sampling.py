"""How the next token is chosen from the logits: greedy, or sampled at a temperature from the k
likeliest tokens (top-k) and/or the nucleus (top-p).

A. Holtzman et al., "The Curious Case of Neural Text Degeneration" (2020, arXiv:1904.09751):
nucleus sampling draws from the smallest set of likeliest tokens whose probability reaches p,
renormalised. The Kronecker paper's echo probe samples at temperature 0.7, top-p 0.9.
"""

import torch
from torch.nn import functional as F


def nucleus(probs, top_p):
    """probs (B, V) with every token outside the top_p nucleus set to 0: sorted by probability,
    a token is kept while the mass of the tokens before it is below top_p (so the likeliest one
    always is)."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    keep = sorted_probs.cumsum(dim=-1) - sorted_probs < top_p  # (B, V), in sorted order
    return torch.zeros_like(probs).scatter(-1, order, sorted_probs * keep)


def choose(logits, temperature, top_k=None, top_p=None, generator=None):
    """The next ids (B, 1) for logits (B, V) float32: argmax at temperature 0, else a draw."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    # shifted first, so that (l - max) / T <= 0 for any T > 0, however small: never inf - inf
    logits = (logits - logits.max(dim=-1, keepdim=True).values) / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]  # (B, 1)
        logits = logits.masked_fill(logits < kth, -float("inf"))
    probs = F.softmax(logits, dim=-1)  # (B, V)
    if top_p is not None:
        probs = nucleus(probs, top_p)  # multinomial renormalises
    return torch.multinomial(probs, 1, generator=generator)
