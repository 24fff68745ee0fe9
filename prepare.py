"""Turn text into token bins for train.py: data/<name>/{train,val}.bin, tokenizer.tiktoken, meta.json.

    python prepare.py                                  # tiny Shakespeare, a 1,024-token BPE
    python prepare.py --tokenizer gpt2                 # the same text with GPT-2's 50,257 tokens
    python prepare.py --input 'books/*.txt' --name books --vocab_size 4096
    python prepare.py --dataset fineweb-edu --vocab_size 65536 --max_tokens 17e9 --val_fraction 0.0005
    python prepare.py --dataset kjv --tokenizer_from data/shakespeare   # new text in a trained model's tokens
    python prepare.py --sft --input pairs.jsonl --tokenizer_from data/shakespeare --block_size 128 --name task

Top to bottom: tablefree/corpus.py reads the text and splits it; this file trains or fetches the
tokenizer; tablefree/bins.py encodes the text with tiktoken (an end-of-text token after each
document) and writes the bins: flat arrays of uint16 ids (V <= 65,536; uint32 above), in shards
of --shard_tokens. The dataset is built in data/<name>.tmp and
swapped in whole at the end, so a bad input or a crash leaves the old one as it was. The hub
datasets need `pip install datasets`. --sft reads prompt/response pairs instead and writes a
loss mask beside the bins (tablefree/sft.py).
"""

from tablefree.common import interrupt_quietly
interrupt_quietly(__name__, "prepare.py")  # is one line, not a traceback

import argparse
import binascii
import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np

from tablefree.bins import encode_to_bins, id_dtype, up_to_date, write_meta
from tablefree.common import (DATASET_FILES, ArgumentParser, UserError, check_output, holds_work, plain_name,
                              replace_folder, require, user_errors, writing)
from tablefree.corpus import HUB, fetch_source, input_paths, open_corpus
from tablefree.data import read_meta
from tablefree.tokenizer import (BPE_SIZES, GPT2_PATTERN, make_encoding, named_ranks, parse_ranks, reserved_ids,
                                 save_ranks, train_bpe)

def train_texts(args, stream):
    """What the BPE learns from: the training split only, at most --bpe_chars of it."""
    seen = 0
    for split, text, _ in stream():
        if seen >= args.bpe_chars:
            return  # stop reading: on a streamed corpus this is the first bpe_chars, not all of it
        if split == "train" and text:
            yield text[:args.bpe_chars - seen]
            seen += len(text)


def run_dataset(run):
    """The folder of the dataset a run trained on, as its config.json names it."""
    try:
        settings = json.loads((Path(run) / "config.json").read_text())["settings"]
        return Path(settings["data_dir"]) / settings["dataset"]
    except (OSError, ValueError, KeyError, TypeError):  # no readable config.json: say the shape of the answer
        return "data/<the run's dataset>"


def build_tokenizer(args, stream, directory):
    """Write tokenizer.tiktoken into directory; return its meta.json entry and its ranks."""
    if args.tokenizer_from:  # the file copied byte for byte, so train.py can tell it is the same tokenizer
        info = read_meta(args.tokenizer_from)["tokenizer"]
        path = Path(args.tokenizer_from) / info["file"]
        try:
            text = path.read_bytes()
            ranks = parse_ranks(text)
        except (OSError, ValueError, binascii.Error) as e:
            raise UserError(f"cannot read the tokenizer {path} ({type(e).__name__}); prepare {args.tokenizer_from} "
                            f"again, or give --tokenizer_from another prepared dataset") from None
        ids, top = set(ranks.values()), max(ranks.values(), default=-1)  # every id 0 .. top but the reserved ones,
        holes = sum(r < top for r in info.get("reserved_ids", []))       # and top just below end-of-text
        if not ids or top + 1 < info["eot_id"] - 1 or len(ids) != top + 1 - holes:
            raise UserError(f"{path} holds {len(ranks):,} tokens, short of the {info['vocab_size']:,} its meta.json "
                            f"names (cut or edited); prepare {args.tokenizer_from} again, or give --tokenizer_from "
                            f"another prepared dataset")
        (directory / "tokenizer.tiktoken").write_bytes(text)
        return {**info, "file": "tokenizer.tiktoken"}, ranks
    try:
        if args.tokenizer == "bpe":
            id_dtype(args.vocab_size)  # refuse an impossible vocabulary before any work
            ranks, eot_id = train_bpe(train_texts(args, stream), args.vocab_size, not args.quiet)
            pattern = GPT2_PATTERN
        elif args.tokenizer in ("gpt2", "r50k_base"):  # has a verified offline source
            ranks = parse_ranks(fetch_source("gpt2.tiktoken", Path(args.out_dir) / "_sources")[0].read_bytes())
            pattern, eot_id = GPT2_PATTERN, len(ranks)  # <|endoftext|> follows the 50,256 ranks
        else:
            ranks, pattern, eot_id = named_ranks(args.tokenizer)
    except (ValueError, RuntimeError) as e:
        raise UserError(str(e)) from None
    save_ranks(ranks, directory / "tokenizer.tiktoken")
    V = args.vocab_size if args.tokenizer == "bpe" else max(eot_id, len(ranks) - 1) + 1  # a BPE's V counts reserved_ids
    info = {"name": args.tokenizer, "file": "tokenizer.tiktoken", "pattern": pattern, "eot_id": eot_id,
            "vocab_size": V, "reserved_ids": reserved_ids(V) if args.tokenizer == "bpe" else []}
    return info, ranks


def prepare(args):
    """Run the whole preparation, top to bottom; returns the meta dict (also written to meta.json)."""
    started = time.perf_counter()
    name = plain_name(args.name or (Path(args.input[0]).stem if args.input else args.dataset.replace(",", "+")), "--name",
                      "<out_dir>/<name>/")
    directory = Path(args.out_dir) / name
    settings = {k: v for k, v in vars(args).items() if k not in ("force", "workers", "quiet")}
    # local inputs are also identified by size and modification time, so edits trigger a rebuild
    settings["input_stamps"] = [[p, os.path.getsize(p), os.path.getmtime(p)] for p in (input_paths(args.input) if args.input else [])]
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot write to --out_dir {directory.parent}: {e.strerror}; choose another") from None
    with writing(directory, "prepare.py"):  # one writer of the folder, before it is read
        done = up_to_date(directory, settings, args.force)
        if done:
            print(f"{directory} is up to date (use --force to rebuild)")
            return done
        # a run or the user's folder is never replaced: a dataset is ours by its meta.json's mark
        check_output(directory, "--name", own=DATASET_FILES, marked=("meta.json", "python prepare.py"))
        build = build_sft if args.sft else build_bins
        meta = {}
        # built beside the old dataset, which stays whole until the new one is: a bad input, a crash
        # or a full disk halfway leaves it as it was
        replace_folder(directory, lambda tmp: meta.update(build(args, tmp, settings, started)))
    for split, s in meta["splits"].items():
        print(f"{split}: {s['tokens']:,} tokens from {s['bytes']:,} bytes of text in {', '.join(s['files'])}")
    print(f"wrote {directory}")
    return meta


def build_bins(args, directory, settings, started):
    """text -> tokenizer -> ids -> bins, into directory (an empty folder); returns the meta."""
    stream, source = open_corpus(args)  # (split, text, ends) pieces: the corpus read and split
    info, ranks = build_tokenizer(args, stream, directory)
    dtype = id_dtype(info["vocab_size"])
    print(f"source: {source}\ntokenizer: {args.tokenizer}, {info['vocab_size']:,} tokens, ids as {np.dtype(dtype).name}")
    splits, text_sha256 = encode_to_bins(stream(), info, ranks, directory, dtype, args.shard_tokens, args.max_tokens,
                                         args.workers, args.quiet)
    return write_meta(directory, {"source": source, "text_sha256": text_sha256}, info, dtype, splits, settings,
                      started)


def build_sft(args, directory, settings, started):
    """Prompt/response pairs (tablefree/sft.py) into directory: tokenizer, bins, masks, meta.json."""
    from tablefree.sft import describe_bad, write_sft
    info, ranks = build_tokenizer(args, None, directory)
    dtype = id_dtype(info["vocab_size"])
    paths = input_paths(args.input)
    digest = hashlib.sha256()
    for path in paths:
        digest.update(Path(path).read_bytes())
    splits, sft = write_sft(paths, make_encoding(info, ranks), args.block_size, args.val_fraction, dtype, directory)
    print(f"{sft['examples']:,} examples kept; {describe_bad(sft['bad_rows'])}")
    return write_meta(directory, {"source": " ".join(paths), "text_sha256": digest.hexdigest(), "sft": sft}, info,
                      dtype, splits, settings, started)


def parse_args(argv=None):
    p = ArgumentParser(prog="prepare.py", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--dataset", default="shakespeare",
                   help=f"shakespeare (tiny), shakespeare-plays (38 plays, 5 MB), kjv (the King James Bible, 4.4 MB), cpu-mix (both and a "
                        f"Wikipedia sample; its parts cpu-mix-nowiki, cpu-mix-wiki), or hub datasets: {', '.join(HUB)} (comma-separated to mix)")
    p.add_argument("--input", nargs="+", help="local text files or globs (each file a document), or .jsonl files")
    p.add_argument("--text_field", default="text", help="field holding the text in .jsonl input")
    p.add_argument("--hub_data_files", help="read --dataset from local JSON/Parquet files of the hub schema")
    p.add_argument("--name", help="output directory name under --out_dir (default: from the dataset or input)")
    p.add_argument("--out_dir", default="data")
    p.add_argument("--tokenizer", default="bpe", help="bpe (trained on the train split) or a tiktoken encoding: gpt2, cl100k_base, ...")
    p.add_argument("--tokenizer_from", help="a prepared dataset's folder: encode with its tokenizer (to fine-tune a model trained on it)")
    p.add_argument("--sft", action="store_true", help="--input is JSONL of {\"prompt\", \"response\"} pairs: bins plus a loss mask")
    p.add_argument("--block_size", type=int, default=1024, help="--sft: drop examples longer than this many tokens")
    p.add_argument("--vocab_size", type=int, default=None,
                   help="BPE vocabulary including end-of-text and the reserved ids (default 1024; only with --tokenizer bpe)")
    p.add_argument("--bpe_chars", type=float, default=200_000_000, help="train the BPE on at most this many characters (2e9 is fine)")
    p.add_argument("--val_fraction", type=float, default=0.1)
    p.add_argument("--max_tokens", type=float, default=float("inf"), help="stop at the first document boundary after the train split has this many tokens")
    p.add_argument("--shard_tokens", type=int, default=1_000_000_000, help="tokens per output shard")
    p.add_argument("--workers", type=int, default=1, help="encoding processes (use more for large corpora)")
    p.add_argument("--force", action="store_true", help="rebuild even if the output is up to date")
    p.add_argument("--quiet", action="store_true", help="no progress bars, even on a terminal")
    args = p.parse_args(argv)
    if args.vocab_size is not None and (args.tokenizer_from or args.tokenizer != "bpe"):
        raise UserError(f"--vocab_size sets the size of a BPE trained here, but --tokenizer_from or --tokenizer "
                        f"{args.tokenizer} brings its own vocabulary; drop --vocab_size")
    if args.tokenizer_from and args.tokenizer != "bpe":
        raise UserError(f"--tokenizer_from copies {args.tokenizer_from}'s tokenizer, so --tokenizer {args.tokenizer} "
                        f"would go unused; drop one of them")
    if args.tokenizer_from and holds_work(args.tokenizer_from) == "a run":
        raise UserError(f"--tokenizer_from {args.tokenizer_from} is a run, not a prepared dataset; give the dataset it "
                        f"trained on: --tokenizer_from {run_dataset(args.tokenizer_from)}")
    args.vocab_size = 1024 if args.vocab_size is None else args.vocab_size
    require(args.vocab_size in BPE_SIZES, "--vocab_size", args.vocab_size,  # before any file or allocation
            "from 259 (a reserved id 0, 256 bytes, 1 merge, end of text) to 16,777,216")
    require(args.bpe_chars >= 1, "--bpe_chars", args.bpe_chars, "at least 1")
    args.bpe_chars = int(args.bpe_chars)
    require(0 < args.val_fraction < 1, "--val_fraction", args.val_fraction, "between 0 and 1")
    require(args.max_tokens > 0, "--max_tokens", args.max_tokens, "above 0")
    require(args.shard_tokens >= 1, "--shard_tokens", args.shard_tokens, "at least 1")
    require(args.workers >= 1, "--workers", args.workers, "at least 1")
    require(args.block_size >= 2, "--block_size", args.block_size, "at least 2")
    if args.sft and not (args.input and all(p.endswith(".jsonl") for p in args.input)):
        raise UserError("--sft reads prompt/response pairs from .jsonl files; give them with --input FILE.jsonl")
    if args.sft and args.tokenizer == "bpe" and not args.tokenizer_from:
        raise UserError("--sft data is for fine-tuning a trained model: give --tokenizer_from the folder of the "
                        "dataset it was trained on (or a tiktoken --tokenizer such as gpt2)")
    return args


def main(argv=None):
    with user_errors("prepare.py"):
        prepare(parse_args(argv))


if __name__ == "__main__":
    main()
