"""The norms train.py logs at every evaluation: the vectors each token enters the Transformer with,
and the head's rows it leaves by.

The Kronecker paper reports that "BPE embedding norm drifts during training while Kronecker
projection norm stays near 1.0". Measured here for every input alike: x(t) = wte(t) for every
token t of the vocabulary (the learned table's rows; the Kronecker projection of each token's
code; a fixed code, which never moves), the mean and standard deviation of their L2 norms; the
same for the head's rows; and for `kronecker` the projection's own rows (one per byte x
position cell, `cells`).
"""

import torch

CHUNK = 8192  # tokens per wte call: bounded memory at V = 65,536 or 262,144


def mean_std(norms):
    return {"mean": norms.mean().item(), "std": norms.std().item() if norms.numel() > 1 else 0.0}


@torch.no_grad()
def input_norms(model):
    """{"input": {mean, std}, "head": {...}, and for kronecker "projection": {...}} of a raw GPT."""
    device = model.ln_f.weight.device
    ids = torch.arange(model.config.vocab_size, device=device)
    inputs = torch.cat([model.wte(chunk.view(1, -1)).float().norm(dim=-1).flatten() for chunk in ids.split(CHUNK)])
    norms = {"input": mean_std(inputs), "head": mean_std(head_row_norms(model))}
    if hasattr(model.wte, "cells"):
        norms["projection"] = mean_std(model.wte.cells.float().norm(dim=-1))
    return norms


def head_row_norms(model):
    """The L2 norm of each token's output row (V,): the head's weight's rows, or for the code head
    the token's code through the projection, c(t) W / sqrt(D) (CodeHead), CHUNK tokens at a time
    (never a V x n_embd float table)."""
    head = model.lm_head
    if model.config.head != "codes":
        return head.weight.float().norm(dim=-1)
    weight = head.proj.weight.float()  # (D, n_embd)
    return torch.cat([(head.signs(rows, weight.dtype) @ weight).norm(dim=-1) for rows in model.wte.packed.split(CHUNK)]
                     ) / head.dim ** 0.5
