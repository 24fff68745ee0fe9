"""Growing a trained model's vocabulary by M tokens, ids V .. V + M - 1: tools/extend.py's
experiment, and tools/scoring.py's echo probe (strings placed at spare ids).

Each input codes a new token its own way (GROW), the rest of the model is untouched:

    learned    a new table row: the mean of its pieces' rows
    binary     its id's code, free, while codes last: the model reads K bits, so of V + M ids only
    affine     2^K have a code of their own; past it id t gets the code of t mod 2^K, an old
               token's (V = 2^K leaves no free code; --extra_bits leaves some)
    kronecker  its bytes' code, free: the projection is shared by every token
    frozen     its source row (the mean of its pieces' rows of the table the codes were derived
               from, checked to give the model's codes) projected as the old ones were

and the head: an untied head's new row is the mean of its pieces' rows, a tied head shares the
table's, and the code head's new row is the token's new code, free, with its pieces' mean bias.
"""

from dataclasses import replace

import torch
import torch.nn as nn

from codes import byte_buffer, pack_bits, sign_pca, sign_project


def mean_rows(table, pieces):
    """One new row per new token: the mean of its pieces' rows of table (V, ...). (M, ...)"""
    return torch.stack([table[list(p)].mean(dim=0) for p in pieces])


def grow_table(model, pieces, new_bytes, source):
    wte = model.wte
    wte.weight = nn.Parameter(torch.cat([wte.weight, mean_rows(wte.weight, pieces)]))
    wte.num_embeddings = wte.weight.size(0)
    return {}


def grow_ids(model, pieces, new_bytes, source):
    free = 2 ** model.wte.bits - model.config.vocab_size
    return {"free_codes": free, "aliased": max(0, len(pieces) - free)}


def grow_bytes(model, pieces, new_bytes, source):
    wte = model.wte
    token_bytes, lengths = byte_buffer(new_bytes, wte.pos_dim)
    wte.token_bytes = torch.cat([wte.token_bytes, token_bytes.to(wte.token_bytes.device)])
    wte.lengths = torch.cat([wte.lengths, lengths.to(wte.lengths.device)])
    return {}


def grow_frozen(model, pieces, new_bytes, source):
    wte = model.wte
    if source is None:
        raise ValueError("frozen codes code a new word from the table they were derived from; give it")
    bits, mean, components = sign_pca(source, wte.bits)  # deterministic: the model's codes again
    if bits.size(0) != model.config.vocab_size or not torch.equal(pack_bits(bits), wte.packed.cpu()):
        raise ValueError("the frozen codes' source table is not the one they were derived from (it gives "
                         "other codes); give the original table")
    new = sign_project(mean_rows(source.double(), pieces), mean, components)  # (M, D)
    wte.packed = torch.cat([wte.packed, pack_bits(new).to(wte.packed.device)])
    return {}


GROW = {"learned": grow_table, "binary": grow_ids, "affine": grow_ids, "kronecker": grow_bytes, "frozen": grow_frozen}


@torch.no_grad()
def add_tokens(model, pieces, new_bytes, source=None):
    """Grow model (a GPT) in place by M = len(pieces) tokens; returns its input's note.

    pieces[i]: the old ids new token V + i is made of; new_bytes[i]: its bytes; source: the
    table frozen codes came from. The note: for binary and affine, how many free codes there
    were and how many new ids alias an old token's code."""
    note = GROW[model.config.input](model, pieces, new_bytes, source)
    head = model.lm_head
    if model.config.head == "codes":  # the new output rows are the new codes: only the bias grows
        head.bias = nn.Parameter(torch.cat([head.bias, mean_rows(head.bias, pieces)]))
    else:
        head.weight = model.wte.weight if model.config.tie_weights else nn.Parameter(
            torch.cat([head.weight, mean_rows(head.weight, pieces)]))  # (V + M, n_embd)
        head.out_features = head.weight.size(0)
    model.config = replace(model.config, vocab_size=model.config.vocab_size + len(pieces))
    return note
