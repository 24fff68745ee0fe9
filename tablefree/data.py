"""Reading what prepare.py wrote: meta.json, the token bins as memmaps, and random batches.

Everything is checked once when a dataset is opened (meta.json parses and agrees with the
bins, every id is below the vocabulary size), so a bad file is a one-line UserError before
any training, never a crash hours in.
"""

import json
import math
from pathlib import Path

import numpy as np
import torch

from tablefree.common import UserError, written_by

SCAN_TOKENS = 1 << 24  # ids checked per read when scanning the bins: bounded memory

# the command that makes each dataset a config names (prepare.py --help has the rest)
PREPARE = {
    "shakespeare": "python prepare.py",
    "shakespeare-plays": "python prepare.py --dataset shakespeare-plays",
    "fineweb-edu": "python prepare.py --dataset fineweb-edu --vocab_size 65536 --max_tokens 17.5e9 "
                   "--val_fraction 0.0005 --workers 16",
}


class Dataset:
    """A prepared dataset (data_dir/name) as a run reads it: meta.json, the splits' token bins as
    memmaps (and an SFT dataset's masks), the tokenizer checkpoints store, random batches.

    vocab_size: the run's V; 0 takes the data's, another value must equal it."""

    def __init__(self, data_dir, name, block_size, vocab_size=0):
        self.path = Path(data_dir) / name
        self.meta = read_meta(self.path)
        self.vocab_size = self.meta["vocab_size"]
        if vocab_size and vocab_size != self.vocab_size:
            from tablefree.tokenizer import BPE_SIZES
            can_prepare = self.meta["tokenizer"]["name"] == "bpe" and vocab_size in BPE_SIZES
            raise UserError(f"vocab_size={vocab_size} but {self.path} has {self.vocab_size} tokens; give "
                            f"--vocab_size=0 to take the data's" + (f", or prepare the data with --vocab_size "
                                                                     f"{vocab_size}" if can_prepare else ""))
        self.splits = {split: open_split(self.path, self.meta, split) for split in ("train", "val")}
        self.masks = {split: open_masks(self.path, self.meta, split, shards, block_size)  # SFT's, else None
                      for split, shards in self.splits.items()}
        self.tokenizer = tokenizer_state(self.meta["tokenizer"], self.path / self.meta["tokenizer"]["file"])

    def val_bits_per_byte(self, val_loss):
        """A validation loss in bits per byte (an SFT set's: of its scored response tokens)."""
        val = self.meta["splits"]["val"]
        return bits_per_byte(val_loss, val.get("scored_tokens", val["tokens"]), val["bytes"])

    def vocab_bytes(self):
        """Every token's raw bytes (tokenizer.vocab_bytes): what the kronecker input codes."""
        from tablefree.tokenizer import load_encoding, vocab_bytes
        return vocab_bytes(load_encoding(self.tokenizer), self.vocab_size)

    def refuse_constant_codes(self, model):
        """Refuse this data for a fixed-code model in which a token the data holds enters as a
        constant code (refuse_constant_codes); a learned or kronecker input has none."""
        if hasattr(model.wte, "code"):
            from codes import constant_ids  # (prepare.py reads this file too, and needs no codes)
            constant = constant_ids(model.wte.code, model.config.vocab_size)
            refuse_constant_codes(constant, self.path, self.meta, model.config.input)


def prepare_command(directory):
    """How to (re)make the dataset in directory, e.g. 'python prepare.py' for data/shakespeare."""
    directory = Path(directory)
    command = PREPARE.get(directory.name, f"python prepare.py --input FILES --name {directory.name}")
    return command + ("" if directory.parent == Path("data") else f" --out_dir {directory.parent}")


def read_meta(directory):
    """meta.json of a prepared dataset, checked for the fields training needs."""
    path = Path(directory) / "meta.json"
    for folder in (path.parent.parent, path.parent):  # --data_dir, the dataset's own
        if folder.exists() and not folder.is_dir():
            here = f" ({folder.parent})" if (folder.parent / "meta.json").is_file() else ""
            raise UserError(f"{folder} is a file, not a folder; give the folder prepare.py wrote{here}")
    if not path.exists():
        raise UserError(f"{path} not found; prepare the data first: {prepare_command(directory)}")
    try:
        meta = json.loads(path.read_text())
        vocab_size, dtype = meta["vocab_size"], np.dtype(meta["dtype"])
        meta["splits"]["train"]["files"], meta["splits"]["val"]["bytes"]
        if dtype.name not in ("uint16", "uint32") or not isinstance(vocab_size, int):
            raise ValueError(f"ids of type {dtype.name}")
        for split in ("train", "val"):  # bits per byte divide by them; a batch needs tokens
            if not (meta["splits"][split]["bytes"] > 0 and meta["splits"][split]["tokens"] > 0):
                raise ValueError(f"its {split} split has no bytes or no tokens")
    except (ValueError, KeyError, TypeError) as e:
        ours = written_by(path, "python prepare.py")  # else the user's file: never prepared over
        again = f"prepare the data again: {prepare_command(directory)} --force" if ours else "give a dataset's folder"
        raise UserError(f"{path} is corrupt or from another tool ({type(e).__name__}: {e}); {again}") from None
    if vocab_size > np.iinfo(dtype).max + 1:
        raise UserError(f"{path} says vocab_size {vocab_size} but dtype {dtype.name} holds ids "
                        f"below {np.iinfo(dtype).max + 1}; prepare the data again: "
                        f"{prepare_command(directory)} --force")
    return meta


def open_split(directory, meta, split):
    """The split's token shards as read-only memmaps, checked against meta.json."""
    directory, dtype = Path(directory), np.dtype(meta["dtype"])
    again = f"prepare the data again: {prepare_command(directory)} --force"
    shards = []
    for name in meta["splits"][split]["files"]:
        path = directory / name
        if not path.exists():
            raise UserError(f"{path} is missing; {again}")
        if path.stat().st_size == 0:
            raise UserError(f"{path} holds no token; {again}")
        if path.stat().st_size % dtype.itemsize:
            raise UserError(f"{path} is {path.stat().st_size} bytes, not a whole number of "
                            f"{dtype.name} ids; it is truncated or of another type, {again}")
        shards.append(np.memmap(path, dtype=dtype, mode="r"))
    tokens = sum(len(s) for s in shards)
    if tokens != meta["splits"][split]["tokens"]:
        raise UserError(f"{directory}/{split} bins hold {tokens:,} {dtype.name} ids but meta.json "
                        f"says {meta['splits'][split]['tokens']:,}; {again}")
    for shard, name in zip(shards, meta["splits"][split]["files"]):
        for start in range(0, len(shard), SCAN_TOKENS):
            high = int(shard[start:start + SCAN_TOKENS].max())
            if high >= meta["vocab_size"]:
                raise UserError(f"{directory / name} holds token id {high} but the vocabulary "
                                f"has {meta['vocab_size']}; the bins do not match meta.json, {again}")
    return shards


def open_masks(directory, meta, split, shards, block_size=None):
    """The split's loss masks, uint8 memmaps one per shard of open_split's shards (1: a target the
    loss counts), for supervised fine-tuning data (tablefree/sft.py); None for other data. A
    block_size below the one the data was made for is refused (a window could count nothing)."""
    names = meta["splits"][split].get("mask_files")
    if names is None:
        return None
    if block_size is not None and block_size < meta["sft"]["block_size"]:
        raise UserError(f"{directory} was prepared for block_size {meta['sft']['block_size']} (its longest examples); "
                        f"train with --block_size={meta['sft']['block_size']} or more, or prepare it again with "
                        f"--block_size {block_size}")
    directory = Path(directory)
    masks = []
    for name, tokens in zip(names, (len(s) for s in shards)):
        path = directory / name
        if not path.exists() or path.stat().st_size != tokens:
            raise UserError(f"{path} is missing or not one byte per token of its bins; prepare the data again "
                            f"with prepare.py --sft ... --force")
        masks.append(np.memmap(path, dtype=np.uint8, mode="r"))
    return masks


def split_ids(directory, meta, split):
    """All of a split's token ids in one int64 array (for held-out text, which is small)."""
    return np.concatenate([np.asarray(s, dtype=np.int64) for s in open_split(directory, meta, split)])


def token_counts(directory, meta, split):
    """How often each id occurs in a split: int64 (V,), counted in pieces (bincount copies its
    input to int64, so a whole shard at once would need 8 bytes per token)."""
    counts = np.zeros(meta["vocab_size"], dtype=np.int64)
    for shard in open_split(directory, meta, split):
        for start in range(0, len(shard), SCAN_TOKENS):
            counts += np.bincount(shard[start:start + SCAN_TOKENS], minlength=meta["vocab_size"])
    return counts


def split_counts(directory, meta):
    """How often each id occurs in the train and val splits: int64 (2, V). Read from counts.npy,
    which prepare.py writes; a dataset prepared before it had one is counted from its bins (one
    pass over them, as open_split's check already makes)."""
    if "counts" not in meta:
        return np.stack([token_counts(directory, meta, split) for split in ("train", "val")])
    path = Path(directory) / meta["counts"]
    try:
        counts = np.load(path, allow_pickle=False)
        if counts.shape != (2, meta["vocab_size"]):
            raise ValueError(f"shape {counts.shape}")
    except (OSError, ValueError) as e:
        raise UserError(f"{path} is missing or corrupt ({e}); prepare the data again: "
                        f"{prepare_command(directory)} --force") from None
    return counts


def refuse_constant_codes(constant, directory, meta, kind):
    """Refuse data in which an id whose fixed code is constant occurs (constant: those ids, from
    codes.constant_ids): LayerNorm maps its input to 0, so the model cannot see the token and a
    deep model's gradient overflows at every row that starts with it (docs/inputs.md)."""
    counts = split_counts(directory, meta).sum(axis=0)[constant.numpy()]
    if not counts.any():
        return
    found = ", ".join(f"id {t} ({n:,} times)" for t, n in zip(constant.tolist(), counts.tolist()) if n)
    info = meta["tokenizer"]
    if info["name"] != "bpe":
        fix = (f"the {info['name']} tokenizer uses every id; train --input=learned or kronecker, or prepare the "
               f"data with python prepare.py --tokenizer bpe (its BPE leaves them unused)")
    elif "reserved_ids" not in info:
        fix = f"it was prepared before the BPE left them unused; prepare it again: {prepare_command(directory)} --force"
    else:
        fix = (f"this {kind} code is constant on ids the tokenizer uses (an affine map drawn before it fixed ids "
               f"0 and 2^K - 1, or frozen codes with too few bits); start a new run or derive the codes again")
    raise UserError(f"{directory} holds tokens whose {kind} code is constant, which the model cannot see and "
                    f"whose gradient overflows in a deep model (docs/inputs.md): {found}; {fix}")


def tokenizer_state(info, rank_file):
    """What a checkpoint stores to decode its tokens: the meta.json entry and the rank file text.
    Two of them are equal when the tokenizers are (two BPEs of one size have equal entries)."""
    try:
        return {"info": info, "ranks": Path(rank_file).read_text()}
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read the tokenizer file {rank_file} ({e}); prepare the data again") from None


def windows(shards, batch_size, block_size, generator, masks=None):
    """x, y (B, T) int64: random windows of the shards and the same windows shifted by one token.
    With masks (open_masks) a target whose mask is 0 becomes -1, which the loss ignores."""
    starts = np.array([max(len(s) - block_size - 1, 0) for s in shards])  # window starts per shard
    if starts.sum() == 0:
        raise UserError(f"the data holds fewer than block_size + 1 = {block_size + 1} tokens; "
                        f"lower block_size")
    picks = torch.randint(int(starts.sum()), (batch_size,), generator=generator).numpy()
    shard_of = np.searchsorted(np.cumsum(starts), picks, side="right")  # each window's shard
    offsets = picks - np.concatenate(([0], np.cumsum(starts)))[shard_of]
    windows = np.stack([shards[s][o:o + block_size + 1] for s, o in zip(shard_of, offsets)])
    windows = torch.from_numpy(windows.astype(np.int64))  # (B, T + 1)
    x, y = windows[:, :-1], windows[:, 1:]
    if masks is not None:
        counted = np.stack([masks[s][o + 1:o + block_size + 1] for s, o in zip(shard_of, offsets)])  # (B, T)
        y = y.masked_fill(torch.from_numpy(counted == 0), -1)
    return x, y


def bits_per_byte(nats_per_token, tokens, nbytes):
    """Bits per UTF-8 byte of text: the code length of all `tokens` target tokens, end-of-text
    tokens included (they code the document boundaries), over the `nbytes` bytes they spell.

    The one definition train.py and tools/evaluate.py share; unlike a per-token loss it compares models
    whose tokenizers differ."""
    return nats_per_token / math.log(2) / (nbytes / tokens)


def checkpoint_dataset(ckpt, data_dir, dataset=None):
    """The prepared dataset's folder and meta.json, checked to use the checkpoint's tokenizer."""
    directory = Path(data_dir) / (dataset or ckpt["settings"]["dataset"])
    meta = read_meta(directory)
    if tokenizer_state(meta["tokenizer"], directory / meta["tokenizer"]["file"]) != ckpt["tokenizer"]:
        raise UserError(f"{directory} was prepared with another tokenizer than the checkpoint's; evaluate on the "
                        f"dataset the run trained on (--dataset) or give --text")
    return directory, meta
