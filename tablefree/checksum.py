"""Checksums of tensors: a checkpoint's crc32 (fast enough for gigabytes at every save and load)
and a packed export's sha256, so that bytes changed on disk are an error, not garbage or nan.
"""

import hashlib
import zlib

import torch


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


def raw_bytes(tensor):
    """A tensor's bytes as stored (uint8, a view where it can be), whatever its dtype."""
    return tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()


def state_crc32(state, everything=True):
    """crc32 of a checkpoint: every tensor (weights, optimizer state, ...) with its path, dtype and
    shape, and (everything) every other value with its path and repr (the settings, the tokenizer,
    the step), in the dicts' order (torch.load keeps it). About 2 GB/s on one core: 2.8 s for the
    papers' 32-layer shape with its AdamW state, 5.6 GB (dev/checksum_cost.py, docs/training.md).
    everything=False: the tensors alone, as checkpoints saved before 2026-12-04 recorded it."""
    crc = 0
    for path, value in leaves_of(state):
        if isinstance(value, torch.Tensor):
            crc = zlib.crc32(f"{path} {value.dtype} {tuple(value.shape)}".encode(), crc)
            crc = zlib.crc32(raw_bytes(value), crc)
        elif everything:
            crc = zlib.crc32(f"{path}={value!r}".encode(), crc)
    return crc


def weights_id(ckpt):
    """The crc32 of the trained weights a checkpoint holds, or a packed export's source checkpoint's:
    what a GGUF file records, so tools.llama --check can tell the run it came from."""
    if "source_crc32" in ckpt:
        return ckpt["source_crc32"]
    return state_crc32(ckpt.get("model", {}))  # tensors only: the same number as before 2026-12-04


def leaves_of(value, path=""):
    """(path, value) for every tensor and every other leaf in nested dicts and lists, depth first."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from leaves_of(item, f"{path}/{key}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from leaves_of(item, f"{path}/{index}")
    else:
        yield path, value
