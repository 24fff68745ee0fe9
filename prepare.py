"""Turn text into token bins for train.py: data/<name>/{train,val}.bin, tokenizer.tiktoken and
meta.json.

    python prepare.py                                  # tiny Shakespeare, a 1,024-token BPE
    python prepare.py --tokenizer gpt2                 # the same text with GPT-2's 50,257 tokens
    python prepare.py --input 'books/*.txt' --name books --vocab_size 4096
    python prepare.py --dataset fineweb-edu --vocab_size 65536 --max_tokens 17e9 \
        --val_fraction 0.0005
    python prepare.py --dataset kjv --tokenizer_from data/shakespeare   # a trained model's tokens
    python prepare.py --sft --input pairs.jsonl --tokenizer_from data/shakespeare --block_size 128 \
        --name task

Top to bottom, as it runs: the text (tablefree/corpus.py reads it and splits whole documents into
train and val), the tokenizer (a byte-level BPE trained on the train split, or a named or copied
one), the ids (tiktoken, an end-of-text token after each document, --workers processes), the bins
(flat arrays of uint16 ids, uint32 past V = 65,536, in shards of --shard_tokens), and meta.json with
counts.npy. The dataset is built in data/<name>.tmp and swapped in whole at the end, so a bad input
or a crash leaves the old one as it was. Hub datasets need `pip install datasets`; --sft reads
prompt/response pairs instead and writes a loss mask beside the bins (tablefree/sft.py).
"""

from tablefree.common import interrupt_quietly  # first: Ctrl-C while the imports below load
interrupt_quietly(__name__, "prepare.py")  # is one line, not a traceback

import argparse
import binascii
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

from tablefree.common import (DATASET_FILES, ArgumentParser, UserError, check_output, holds_work,
                              mark, plain_name, reader_may_leave, replace_folder, require,
                              user_errors, writing)
from tablefree.corpus import HUB, fetch_source, input_paths, open_corpus
from tablefree.tokenizer import (BPE_SIZES, GPT2_PATTERN, make_encoding, named_ranks, parse_ranks,
                                 reserved_ids, save_ranks, train_bpe)

BATCH_CHARS = 1 << 20  # text per encoding task: enough to amortise, little enough to bound memory


def prepare(args):
    """Run the whole preparation, top to bottom; returns the meta dict (meta.json's)."""
    started = time.perf_counter()
    default = Path(args.input[0]).stem if args.input else args.dataset.replace(",", "+")
    name = plain_name(args.name or default, "--name", "<out_dir>/<name>/")
    directory = Path(args.out_dir) / name
    settings = {k: v for k, v in vars(args).items() if k not in ("force", "workers", "quiet")}
    # local inputs are also identified by size and modification time, so edits trigger a rebuild
    paths = input_paths(args.input) if args.input else []
    settings["input_stamps"] = [[p, os.path.getsize(p), os.path.getmtime(p)] for p in paths]
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot write to --out_dir {directory.parent}: {e.strerror}; choose "
                        f"another") from None
    with writing(directory, "prepare.py"):  # one writer of the folder, before it is read
        done = up_to_date(directory, settings, args.force)
        if done:
            print(f"{directory} is up to date (use --force to rebuild)")
            return done
        # a run or the user's folder is never replaced: a dataset is ours by its meta.json's mark
        check_output(directory, "--name", own=DATASET_FILES,
                     marked=("meta.json", "python prepare.py"))
        build = build_sft if args.sft else build_bins
        meta = {}
        # built beside the old dataset, which stays whole until the new one is: a bad input, a crash
        # or a full disk halfway leaves it as it was
        replace_folder(directory, lambda tmp: meta.update(build(args, tmp, settings, started)))
    for split, s in meta["splits"].items():
        print(f"{split}: {s['tokens']:,} tokens from {s['bytes']:,} bytes of text in "
              f"{', '.join(s['files'])}")
    print(f"wrote {directory}")
    return meta


def build_bins(args, directory, settings, started):
    """text -> tokenizer -> ids -> bins -> meta, into directory (an empty folder): the meta."""
    stream, source = open_corpus(args)  # stream(): (split, text, ends) pieces, read and split
    info, ranks = build_tokenizer(args, stream, directory)
    dtype = id_dtype(info["vocab_size"])
    print(f"source: {source}\ntokenizer: {args.tokenizer}, {info['vocab_size']:,} tokens, ids as "
          f"{np.dtype(dtype).name}")
    splits, counts, text_sha256 = encode_to_bins(stream(), info, ranks, directory, dtype, args)
    about = {"source": source, "text_sha256": text_sha256}
    return write_meta(directory, about, info, dtype, splits, counts, settings, started)


# ---- the tokenizer: a BPE trained on the train split, a named one, or a prepared dataset's ----

def build_tokenizer(args, stream, directory):
    """Write tokenizer.tiktoken into directory; return its meta.json entry and its ranks."""
    if args.tokenizer_from:
        return copy_tokenizer(args.tokenizer_from, directory)
    try:
        if args.tokenizer == "bpe":
            id_dtype(args.vocab_size)  # refuse an impossible vocabulary before any work
            ranks, eot_id = train_bpe(train_texts(args, stream), args.vocab_size, not args.quiet)
            pattern = GPT2_PATTERN
        elif args.tokenizer in ("gpt2", "r50k_base"):  # has a verified offline source
            rank_file = fetch_source("gpt2.tiktoken", Path(args.out_dir) / "_sources")[0]
            ranks = parse_ranks(rank_file.read_bytes())
            pattern, eot_id = GPT2_PATTERN, len(ranks)  # <|endoftext|> follows the 50,256 ranks
        else:
            ranks, pattern, eot_id = named_ranks(args.tokenizer)
    except (ValueError, RuntimeError) as e:
        raise UserError(str(e)) from None
    save_ranks(ranks, directory / "tokenizer.tiktoken")
    bpe = args.tokenizer == "bpe"
    V = args.vocab_size if bpe else max(eot_id, len(ranks) - 1) + 1  # a BPE's V counts reserved_ids
    info = {"name": args.tokenizer, "file": "tokenizer.tiktoken", "pattern": pattern,
            "eot_id": eot_id, "vocab_size": V, "reserved_ids": reserved_ids(V) if bpe else []}
    return info, ranks


def train_texts(args, stream):
    """What the BPE learns from: the training split only, at most --bpe_chars of it."""
    seen = 0
    for split, text, _ in stream():
        if seen >= args.bpe_chars:
            return  # stop reading: on a streamed corpus this is the first bpe_chars, not all of it
        if split == "train" and text:
            yield text[:args.bpe_chars - seen]
            seen += len(text)


def copy_tokenizer(dataset, directory):
    """A prepared dataset's tokenizer, copied byte for byte (so train.py can tell it is the same):
    its meta.json entry and its ranks."""
    from tablefree.data import read_meta
    info = read_meta(dataset)["tokenizer"]
    path = Path(dataset) / info["file"]
    try:
        text = path.read_bytes()
        ranks = parse_ranks(text)
    except (OSError, ValueError, binascii.Error) as e:
        raise UserError(f"cannot read the tokenizer {path} ({type(e).__name__}); prepare {dataset} "
                        f"again, or give --tokenizer_from another prepared dataset") from None
    # every id 0 .. top but the reserved ones, and top just below end-of-text
    ids, top = set(ranks.values()), max(ranks.values(), default=-1)
    holes = sum(r < top for r in info.get("reserved_ids", []))
    if not ids or top + 1 < info["eot_id"] - 1 or len(ids) != top + 1 - holes:
        raise UserError(f"{path} holds {len(ranks):,} tokens, short of the {info['vocab_size']:,} "
                        f"its meta.json names (cut or edited); prepare {dataset} again, or give "
                        f"--tokenizer_from another prepared dataset")
    (directory / "tokenizer.tiktoken").write_bytes(text)
    return {**info, "file": "tokenizer.tiktoken"}, ranks


# ---- the ids: the text encoded in batches, --workers processes at a time ----

def encode_to_bins(pieces, info, ranks, directory, dtype, args):
    """Encode (split, text, ends) pieces into directory's <split>.bin (ShardWriter), an end-of-text
    token after each document: ({split: files, tokens, bytes}, counts (2, V), the sha256 of all
    text read, so a rerun can tell the corpus changed). The train split stops at the first
    document boundary past --max_tokens."""
    digest = hashlib.sha256()

    def hashed(pieces):
        for split, text, ends in pieces:
            digest.update(text.encode("utf-8"))
            yield split, text, ends

    writers = {split: ShardWriter(directory, split, dtype, args.shard_tokens, info["vocab_size"])
               for split in ("train", "val")}
    work, workers = batches(hashed(pieces)), args.workers
    pool = multiprocessing.Pool(workers, init_worker, (info, ranks)) if workers > 1 else None
    if pool is None:
        init_worker(info, ranks)
    progress = tqdm(desc="tokenizing", unit="tok", unit_scale=True, file=sys.stdout,
                    disable=True if args.quiet else None)  # None: only on a terminal
    try:
        while writers["train"].tokens < args.max_tokens:
            window = list(itertools.islice(work, 4 * workers))  # bounded: never the whole corpus
            if not window:
                break
            docs = [batch for _, batch in window]
            encoded = pool.map(encode_batch, docs) if pool else map(encode_batch, docs)
            for (split, _), batch in zip(window, encoded):
                for ids, n_bytes in batch:
                    if split == "train" and writers["train"].tokens >= args.max_tokens:
                        break  # train ends at a document boundary; val keeps this window's
                    writers[split].write(ids)
                    writers[split].bytes += n_bytes
                    progress.update(len(ids))
    finally:
        progress.close()
        if pool:
            pool.close()
    for split, writer in writers.items():
        if writer.bytes == 0:
            raise UserError(f"the {split} split is empty; give more text (more documents or "
                            f"files), or {'raise' if split == 'val' else 'lower'} --val_fraction")
        writer.finish()
    splits = {split: {"files": w.files, "tokens": w.tokens, "bytes": w.bytes}
              for split, w in writers.items()}
    counts = np.stack([writers[split].counts for split in ("train", "val")])
    return splits, counts, digest.hexdigest()


def batches(pieces):
    """(split, text, ends) pieces grouped into (split, [(text, ends)]) of about BATCH_CHARS
    characters."""
    pending, size = {"train": [], "val": []}, {"train": 0, "val": 0}
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
    """[(token ids, UTF-8 bytes of the text)] for each (text, ends) of a batch; ends adds
    end-of-text."""
    encoded = _encoder.encode_ordinary_batch([text for text, _ in batch])
    return [(ids + [_encoder.eot_token] * ends, len(text.encode("utf-8")))
            for (text, ends), ids in zip(batch, encoded)]


# ---- the bins: flat arrays of ids, uint16 where V allows ----

def id_dtype(vocab_size):
    """The narrowest unsigned type that holds every id: uint16 up to 65,536 tokens, else uint32."""
    if vocab_size > 2 ** 32:
        raise UserError(f"a vocabulary of {vocab_size:,} tokens does not fit uint32 ids; use at "
                        f"most 2^32")
    return np.uint16 if vocab_size <= 2 ** 16 else np.uint32


class ShardWriter:
    """Appends ids to <split>-00000.bin, <split>-00001.bin, ... of at most shard_tokens each, and
    counts how often each id occurs (int64 (V,): counts.npy's row)."""

    def __init__(self, directory, split, dtype, shard_tokens, vocab_size):
        self.directory, self.split, self.dtype = Path(directory), split, dtype
        self.shard_tokens, self.counts = shard_tokens, np.zeros(vocab_size, dtype=np.int64)
        self.files, self.tokens, self.bytes, self.in_shard = [], 0, 0, shard_tokens
        self.handle = None

    def write(self, ids):
        ids = np.asarray(ids, dtype=self.dtype)
        self.counts += np.bincount(ids, minlength=len(self.counts))
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


# ---- meta.json: what the data is, its tokenizer, ids and splits ----

def write_meta(directory, about, info, dtype, splits, counts, settings, started):
    """Write directory/meta.json and counts.npy (how often each id occurs in each split: int64
    (2, V), rows train and val, which train.py's check of the fixed codes reads instead of scanning
    the bins); return the meta."""
    with open(directory / "counts.npy", "wb") as f:
        np.save(f, counts)
    meta = {"written_by": mark("python prepare.py"), **about, "tokenizer": info,
            "vocab_size": info["vocab_size"], "dtype": np.dtype(dtype).name, "splits": splits,
            "settings": settings, "created": time.strftime("%Y-%m-%d %H:%M:%S"),
            "counts": "counts.npy", "seconds": time.perf_counter() - started}
    (directory / "meta.json").write_text(json.dumps(meta, indent=2))
    return meta


def build_sft(args, directory, settings, started):
    """Prompt/response pairs (tablefree/sft.py) into directory: tokenizer, bins, masks, meta."""
    from tablefree.data import token_counts
    from tablefree.sft import describe_bad, write_sft
    info, ranks = build_tokenizer(args, None, directory)
    dtype = id_dtype(info["vocab_size"])
    paths = input_paths(args.input)
    digest = hashlib.sha256()
    for path in paths:
        digest.update(Path(path).read_bytes())
    splits, sft = write_sft(paths, make_encoding(info, ranks), args.block_size, args.val_fraction,
                            dtype, directory)
    print(f"{sft['examples']:,} examples kept; {describe_bad(sft['bad_rows'])}")
    about = {"source": " ".join(paths), "text_sha256": digest.hexdigest(), "sft": sft}
    meta = {"vocab_size": info["vocab_size"], "dtype": np.dtype(dtype).name, "splits": splits}
    counts = np.stack([token_counts(directory, meta, split) for split in ("train", "val")])
    return write_meta(directory, about, info, dtype, splits, counts, settings, started)


# ---- before any work: is there anything to do, and are the settings sound ----

def up_to_date(directory, settings, force):
    """The meta of directory's dataset if it was prepared with these settings (nothing to do); None
    if there is none (or force). A dataset of other settings is refused: runs trained on it would
    no longer resume."""
    old = {} if force else read_old_meta(directory / "meta.json")
    if old.get("settings") == settings:
        return old
    if isinstance(old.get("settings"), dict):  # a dataset of other text or another tokenizer
        changed = sorted(k for k in {*settings, *old["settings"]}
                         if settings.get(k) != old["settings"].get(k))
        raise UserError(f"{directory} holds a dataset prepared with other settings "
                        f"({', '.join(changed)}); runs trained on it would no longer resume: give "
                        f"another --name, or --force to replace it")
    return None


def read_old_meta(path):
    """The meta.json of an earlier preparation, or {} if there is none or it is unreadable
    (then the directory is simply prepared again)."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return old if isinstance(old, dict) else {}


def run_dataset(run):
    """The folder of the dataset a run trained on, as its config.json names it."""
    try:
        settings = json.loads((Path(run) / "config.json").read_text())["settings"]
        return Path(settings["data_dir"]) / settings["dataset"]
    except (OSError, ValueError, KeyError, TypeError):  # no readable config.json: say its shape
        return "data/<the run's dataset>"


def parse_args(argv=None):
    p = ArgumentParser(prog="prepare.py", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add = p.add_argument
    add("--dataset", default="shakespeare",
        help=f"shakespeare (tiny), shakespeare-plays (38 plays, 5 MB), kjv (the King James Bible, "
             f"4.4 MB), cpu-mix (both and a Wikipedia sample; its parts cpu-mix-nowiki, "
             f"cpu-mix-wiki), or hub datasets: {', '.join(HUB)} (comma-separated to mix)")
    add("--input", nargs="+", help="local text files or globs (each file a document), or .jsonl")
    add("--text_field", default="text", help="field holding the text in .jsonl input")
    add("--hub_data_files", help="read --dataset from local JSON/Parquet files of the hub schema")
    add("--name", help="output directory name under --out_dir (default: the dataset's or input's)")
    add("--out_dir", default="data")
    add("--tokenizer", default="bpe",
        help="bpe (trained on the train split) or a tiktoken encoding: gpt2, cl100k_base, ...")
    add("--tokenizer_from",
        help="a prepared dataset's folder: encode with its tokenizer (to fine-tune a model on it)")
    add("--sft", action="store_true",
        help="--input is JSONL of {\"prompt\", \"response\"} pairs: bins plus a loss mask")
    add("--block_size", type=int, default=1024,
        help="--sft: drop examples longer than this many tokens")
    add("--vocab_size", type=int, default=None,
        help="BPE vocabulary including end-of-text and the reserved ids (default 1024; only with "
             "--tokenizer bpe)")
    add("--bpe_chars", type=float, default=200_000_000,
        help="train the BPE on at most this many characters (2e9 is fine)")
    add("--val_fraction", type=float, default=0.1)
    add("--max_tokens", type=float, default=float("inf"),
        help="stop at the first document boundary after the train split has this many tokens")
    add("--shard_tokens", type=int, default=1_000_000_000, help="tokens per output shard")
    add("--workers", type=int, default=1, help="encoding processes (more for large corpora)")
    add("--force", action="store_true", help="rebuild even if the output is up to date")
    add("--quiet", action="store_true", help="no progress bars, even on a terminal")
    args = p.parse_args(argv)
    if args.vocab_size is not None and (args.tokenizer_from or args.tokenizer != "bpe"):
        raise UserError(f"--vocab_size sets the size of a BPE trained here, but --tokenizer_from "
                        f"or --tokenizer {args.tokenizer} brings its own vocabulary; drop "
                        f"--vocab_size")
    if args.tokenizer_from and args.tokenizer != "bpe":
        raise UserError(f"--tokenizer_from copies {args.tokenizer_from}'s tokenizer, so "
                        f"--tokenizer {args.tokenizer} would go unused; drop one of them")
    work = args.tokenizer_from and holds_work(args.tokenizer_from)  # a run, a dataset, or None
    if work == "a run":
        raise UserError(f"--tokenizer_from {args.tokenizer_from} is a run, not a prepared dataset; "
                        f"give the dataset it trained on: --tokenizer_from "
                        f"{run_dataset(args.tokenizer_from)}")
    if args.tokenizer_from and work is None and Path(args.tokenizer_from).is_dir():  # the user's
        raise UserError(f"--tokenizer_from {args.tokenizer_from} has no meta.json, so it is not a "
                        f"prepared dataset; give the folder prepare.py wrote for the model's data")
    args.vocab_size = 1024 if args.vocab_size is None else args.vocab_size
    require(args.vocab_size in BPE_SIZES, "--vocab_size", args.vocab_size,  # before any allocation
            "from 259 (a reserved id 0, 256 bytes, 1 merge, end of text) to 16,777,216")
    require(args.bpe_chars >= 1, "--bpe_chars", args.bpe_chars, "at least 1")
    args.bpe_chars = int(args.bpe_chars)
    require(0 < args.val_fraction < 1, "--val_fraction", args.val_fraction, "between 0 and 1")
    require(args.max_tokens > 0, "--max_tokens", args.max_tokens, "above 0")
    require(args.shard_tokens >= 1, "--shard_tokens", args.shard_tokens, "at least 1")
    require(args.workers >= 1, "--workers", args.workers, "at least 1")
    require(args.block_size >= 2, "--block_size", args.block_size, "at least 2")
    if args.sft and not (args.input and all(p.endswith(".jsonl") for p in args.input)):
        raise UserError("--sft reads prompt/response pairs from .jsonl files; give them with "
                        "--input FILE.jsonl")
    if args.sft and args.tokenizer == "bpe" and not args.tokenizer_from:
        raise UserError("--sft data is for fine-tuning a trained model: give --tokenizer_from the "
                        "folder of the dataset it was trained on (or a tiktoken --tokenizer "
                        "such as gpt2)")
    return args


def main(argv=None):
    with reader_may_leave(), user_errors("prepare.py"):  # a closed pipe: quietly, the data whole
        prepare(parse_args(argv))


if __name__ == "__main__":
    main()
