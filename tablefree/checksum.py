"""Checksums of tensors: a checkpoint's crc32 (fast enough for gigabytes at every save and load)
and a packed export's sha256, so that bytes changed on disk are an error, not garbage or nan.
"""

import hashlib

import torch

from tablefree.common import raw_bytes, state_crc32


SHA256_COVERS = "config and tokenizer"  # a packed file's "sha256_covers": what its sha256 covers beside the weights


def described(ckpt):
    """What a packed file's sha256 covers beside its weights (SHA256_COVERS): its model config and tokenizer."""
    return {"model_config": ckpt.get("model_config"), "tokenizer": ckpt.get("tokenizer")}


def tensors_sha256(rest, layers, described=None):
    """sha256 of a packed file's weights (every tensor's name, dtype, shape and bytes, in name order) and
    of what describes them (described: its model_config and tokenizer, by repr; files written before
    2026-12-05 cover the weights alone): written with the file and checked when it is read, so flipped
    bytes are an error, not nan, and an edited setting or token is not a model that runs otherwise."""
    digest = hashlib.sha256()
    items = [*rest.items(), *((f"{name}.{key}", value) for name, layer in layers.items() for key, value in layer.items()),
             *(described or {}).items()]
    for name, value in sorted(items, key=lambda item: item[0]):
        digest.update(name.encode())
        if isinstance(value, torch.Tensor):
            digest.update(f"{value.dtype}{tuple(value.shape)}".encode())
            digest.update(raw_bytes(value))
        else:
            digest.update(repr(value).encode())
    return digest.hexdigest()


def weights_id(ckpt):
    """The crc32 of the trained weights a checkpoint holds, or a packed export's source checkpoint's:
    what a GGUF file records, so tools.llama --check can tell the run it came from."""
    if "source_crc32" in ckpt:
        return ckpt["source_crc32"]
    return state_crc32(ckpt.get("model", {}))  # tensors only: the same number as before 2026-12-04
