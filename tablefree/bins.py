"""Token bins as prepare.py writes them: ids encoded in parallel, written as flat arrays of uint16
(V <= 65,536) or uint32 in shards, and meta.json with counts.npy beside them (tablefree/data.py
reads them back).
"""

import hashlib
import itertools
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from tablefree.common import UserError, mark
from tablefree.data import token_counts
from tablefree.tokenizer import make_encoding

BATCH_CHARS = 1 << 20  # text per encoding task: big enough to amortise, small enough to bound memory


def batches(pieces):
    """Group (split, text, ends) pieces into (split, [(text, ends)]) of about BATCH_CHARS characters."""
    pending = {"train": [], "val": []}
    size = {"train": 0, "val": 0}
    for split, text, ends in pieces:
        if text or ends:
            pending[split].append((text, ends))
            size[split] += len(text)
            if size[split] >= BATCH_CHARS:
                yield split, pending[split]
                pending[split], size[split] = [], 0
    for split, batch in pending.items():
        if batch:
            yield split, batch


_encoder = None  # set once per worker process by init_worker


def init_worker(info, ranks):
    global _encoder
    _encoder = make_encoding(info, ranks)


def encode_batch(batch):
    """[(token ids, UTF-8 bytes of the text)] for each (text, ends) of a batch; ends adds end-of-text."""
    encoded = _encoder.encode_ordinary_batch([text for text, _ in batch])
    return [(ids + [_encoder.eot_token] * ends, len(text.encode("utf-8"))) for (text, ends), ids in zip(batch, encoded)]


def id_dtype(vocab_size):
    """The narrowest unsigned type that holds every id: uint16 up to 65,536 tokens, else uint32."""
    if vocab_size > 2 ** 32:
        raise UserError(f"a vocabulary of {vocab_size:,} tokens does not fit uint32 ids; use at most 2^32")
    return np.uint16 if vocab_size <= 2 ** 16 else np.uint32


class ShardWriter:
    """Appends ids to <split>-00000.bin, <split>-00001.bin, ... of at most shard_tokens each."""

    def __init__(self, directory, split, dtype, shard_tokens):
        self.directory, self.split, self.dtype, self.shard_tokens = Path(directory), split, dtype, shard_tokens
        self.files, self.tokens, self.bytes, self.in_shard = [], 0, 0, shard_tokens
        self.handle = None

    def write(self, ids):
        ids = np.asarray(ids, dtype=self.dtype)
        while len(ids):
            if self.in_shard == self.shard_tokens:
                self._next_shard()
            take = min(len(ids), self.shard_tokens - self.in_shard)
            ids[:take].tofile(self.handle)
            self.in_shard += take
            self.tokens += take
            ids = ids[take:]

    def _next_shard(self):
        if self.handle:
            self._close()
        self.files.append(f"{self.split}-{len(self.files):05d}.bin")
        self.handle = open(self.directory / self.files[-1], "wb")
        self.in_shard = 0

    def _close(self):
        self.handle.flush()
        os.fsync(self.handle.fileno())  # on disk before the folder becomes the dataset
        self.handle.close()

    def finish(self):
        """Close; a split in one shard is simply <split>.bin."""
        self._close()
        if len(self.files) == 1:
            os.replace(self.directory / self.files[0], self.directory / f"{self.split}.bin")
            self.files = [f"{self.split}.bin"]


def encode_to_bins(pieces, info, ranks, directory, dtype, shard_tokens, max_tokens, workers, quiet):
    """Encode (split, text, ends) pieces into directory's <split>.bin (ShardWriter), an end-of-text
    token after each document, `workers` processes at a time: ({split: files, tokens, bytes}, the
    sha256 of all text read, so a rerun can tell the corpus changed)."""
    digest = hashlib.sha256()

    def hashed(pieces):
        for split, text, ends in pieces:
            digest.update(text.encode("utf-8"))
            yield split, text, ends

    writers = {split: ShardWriter(directory, split, dtype, shard_tokens) for split in ("train", "val")}
    work = batches(hashed(pieces))
    pool = multiprocessing.Pool(workers, init_worker, (info, ranks)) if workers > 1 else None
    if pool is None:
        init_worker(info, ranks)
    progress = tqdm(desc="tokenizing", unit="tok", unit_scale=True, file=sys.stdout,
                    disable=True if quiet else None)  # None: only on a terminal
    try:
        while writers["train"].tokens < max_tokens:
            window = list(itertools.islice(work, 4 * workers))  # bounded: never the whole corpus
            if not window:
                break
            docs = [batch for _, batch in window]
            for (split, _), encoded in zip(window, pool.map(encode_batch, docs) if pool else map(encode_batch, docs)):
                for ids, n_bytes in encoded:
                    if split == "train" and writers["train"].tokens >= max_tokens:
                        break  # the budget ends train at a document boundary; val keeps this window's documents
                    writers[split].write(ids)
                    writers[split].bytes += n_bytes
                    progress.update(len(ids))
    finally:
        progress.close()
        if pool:
            pool.close()
    splits = {}
    for split, writer in writers.items():
        if writer.bytes == 0:
            raise UserError(f"the {split} split is empty; give more text (more documents or files), or "
                            f"{'raise' if split == 'val' else 'lower'} --val_fraction")
        writer.finish()
        splits[split] = {"files": writer.files, "tokens": writer.tokens, "bytes": writer.bytes}
    return splits, digest.hexdigest()


def write_meta(directory, about, info, dtype, splits, settings, started):
    """Write directory/meta.json (what the data is, its tokenizer, ids and splits) and counts.npy
    (how often each id occurs in each split: int64 (2, V), rows train and val, which train.py's
    check of the fixed codes reads instead of scanning the bins); return the meta."""
    meta = {"written_by": mark("python prepare.py"), **about, "tokenizer": info, "vocab_size": info["vocab_size"], "dtype": np.dtype(dtype).name,
            "splits": splits, "settings": settings, "created": time.strftime("%Y-%m-%d %H:%M:%S"),
            "counts": "counts.npy"}
    with open(directory / "counts.npy", "wb") as f:
        np.save(f, np.stack([token_counts(directory, meta, split) for split in ("train", "val")]))
    meta["seconds"] = time.perf_counter() - started
    (directory / "meta.json").write_text(json.dumps(meta, indent=2))
    return meta


def up_to_date(directory, settings, force):
    """The meta of directory's dataset if it was prepared with these settings (nothing to do); None if
    there is none (or force). A dataset of other settings is refused: runs trained on it would no
    longer resume."""
    old = {} if force else read_old_meta(directory / "meta.json")
    if old.get("settings") == settings:
        return old
    if isinstance(old.get("settings"), dict):  # a dataset of other text or another tokenizer: runs use it
        changed = sorted(k for k in {*settings, *old["settings"]} if settings.get(k) != old["settings"].get(k))
        raise UserError(f"{directory} holds a dataset prepared with other settings ({', '.join(changed)}); runs "
                        f"trained on it would no longer resume: give another --name, or --force to replace it")
    return None


def read_old_meta(path):
    """The meta.json of an earlier preparation, or {} if there is none or it is unreadable
    (then the directory is simply prepared again)."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return old if isinstance(old, dict) else {}
