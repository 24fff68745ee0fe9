"""Tokenizers: byte-level BPE trained here, or a named tiktoken encoding; both encode with tiktoken.

Every tokenizer is stored the same way, as a tiktoken rank file (`tokenizer.tiktoken`: one
`base64(token bytes) rank` per line) plus its split pattern and special tokens in meta.json,
so a data directory or a run directory carries everything needed to decode its tokens.
"""

import binascii
import json
import sys
from pathlib import Path

import tiktoken

from tablefree.common import UserError

EOT = "<|endoftext|>"
BPE_SIZES = range(259, (1 << 24) + 1)  # prepare.py's --vocab_size: from id 0, 256 bytes, 1 merge and end of text
# GPT-2's pre-tokenization split; HF's ByteLevel pre-tokenizer uses the same expression,
# which is what lets a BPE trained by `tokenizers` be replayed exactly by tiktoken.
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def byte_to_unicode():
    """GPT-2's reversible map from the 256 byte values to printable characters (HF ByteLevel)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, shifted = [], 0
    for byte in range(256):
        if byte in printable:
            chars.append(chr(byte))
        else:  # unprintable bytes are moved past 255, in order
            chars.append(chr(256 + shifted))
            shifted += 1
    return dict(zip(range(256), chars))


def reserved_ids(vocab_size):
    """The ids a trained BPE leaves unused: 0 and, when it is below V, 2^K - 1 (K = ceil(log2 V)).

    They are the all-zeros and all-ones codes of 'binary' (and of 'affine', whose map fixes them:
    codes.random_affine), which enter the model as a constant vector that LayerNorm maps to 0
    (codes.constant_ids, docs/inputs.md); no text or special token may produce them."""
    top = (1 << (vocab_size - 1).bit_length()) - 1  # 2^K - 1 >= V - 1
    return [0] + ([top] if top < vocab_size else [])


def train_bpe(texts, vocab_size, progress=True):
    """Train a byte-level BPE on an iterable of strings; return tiktoken ranks {bytes: rank} and
    the end-of-text id.

    The ids skip reserved_ids(V): the 256 bytes are ids 1 .. 256, the merges follow in the order
    they were learned (tiktoken's merge rule needs rank = order), and the end-of-text token takes
    the last free id (V - 2 when V = 2^K, else V - 1). Raises ValueError if the text gives fewer
    merges than V needs.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    if not 258 < vocab_size <= 2 ** 32:
        raise ValueError(f"--vocab_size {vocab_size} must be between 259 (id 0, 256 bytes, 1 merge, end-of-text) "
                         f"and 2^32")
    reserved = len(reserved_ids(vocab_size))
    tokens = vocab_size - reserved  # bytes, merges and end-of-text
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(vocab_size=tokens - 1, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=progress and sys.stderr.isatty())  # its own bars: the merges run in Rust
    bpe.train_from_iterator(texts, trainer)
    to_byte = {char: byte for byte, char in byte_to_unicode().items()}
    ranks = {bytes([b]): 1 + b for b in range(256)}  # id 0 is reserved
    for left, right in _merges(bpe):
        token = bytes(to_byte[c] for c in left + right)
        ranks.setdefault(token, 1 + len(ranks))  # rank = order learned, as tiktoken's merge rule needs
    if len(ranks) < tokens - 1:
        given = len(ranks) + 2  # id 0, the ranks, end-of-text: V - reserved_ids(V) then asks no more than there is
        raise ValueError(f"the training text gives only {given:,} BPE tokens, not --vocab_size {vocab_size:,}; "
                         f"give --vocab_size {given}, or more text to learn from (more files, a larger --bpe_chars)")
    return ranks, len(ranks) + 1  # ids 1 .. len(ranks) are taken: the next is the last one reserved_ids leaves


def _merges(bpe):
    """The learned merges of a `tokenizers` BPE, in order, as (left, right) string pairs."""
    merges = json.loads(bpe.to_str())["model"]["merges"]
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges]


def parse_ranks(data):
    """{token bytes: rank} from the bytes of a tiktoken rank file."""
    return {binascii.a2b_base64(token): int(rank) for token, rank in (line.split() for line in data.splitlines() if line)}


def save_ranks(ranks, path):
    """Write ranks in tiktoken's format, in rank order."""
    lines = (f"{binascii.b2a_base64(token, newline=False).decode()} {rank}\n" for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]))
    Path(path).write_text("".join(lines))


def named_ranks(name):
    """(ranks, pattern, eot_id) of a named tiktoken encoding, downloaded by tiktoken."""
    import tiktoken_ext.openai_public as public

    if name not in public.ENCODING_CONSTRUCTORS:
        raise ValueError(f"unknown tiktoken encoding {name!r}; choose one of {sorted(public.ENCODING_CONSTRUCTORS)} or --tokenizer bpe")
    try:
        spec = public.ENCODING_CONSTRUCTORS[name]()
    except Exception as e:  # no internet
        raise RuntimeError(f"cannot download the {name} vocabulary ({str(e)[:100]}); connect to the internet, "
                           f"or use --tokenizer gpt2 (has an offline source) or --tokenizer bpe") from None
    return spec["mergeable_ranks"], spec["pat_str"], spec["special_tokens"][EOT]


def load_tokenizer(directory, info):
    """A tiktoken Encoding from a directory's rank file and its meta.json 'tokenizer' entry."""
    path = Path(directory) / info["file"]
    if not path.exists():
        raise FileNotFoundError(f"tokenizer file {path} is missing; re-run prepare.py for this dataset")
    return make_encoding(info, parse_ranks(path.read_bytes()))


def make_encoding(info, ranks):
    """A tiktoken Encoding from a meta.json 'tokenizer' entry and its ranks {token bytes: rank}."""
    return tiktoken.Encoding(info["name"], pat_str=info["pattern"], mergeable_ranks=ranks, special_tokens={EOT: info["eot_id"]})


def load_encoding(state):
    """The tiktoken Encoding a checkpoint's tokenizer entry describes (tokenizer_state); a damaged
    entry (a checkpoint from before its crc32 covered the tokenizer) is a one-line error."""
    try:
        ranks = parse_ranks(state["ranks"].encode())
        if not ranks or b"" in ranks or len(set(ranks.values())) != len(ranks):  # tiktoken would panic in Rust
            raise ValueError("an empty token or a rank given twice")
        return make_encoding(state["info"], ranks)
    except UserError:
        raise
    except Exception as e:  # binascii, regex, tiktoken and key errors alike: the entry is not one we wrote
        raise UserError(f"the checkpoint's tokenizer is damaged ({type(e).__name__}); restore the checkpoint from a "
                        f"copy, or train again") from None


def bytes_of_token(enc, t):
    """Token t's raw bytes; b"" for an id that is no token (reserved_ids, which a model can still draw)."""
    try:
        return enc.decode_single_token_bytes(t)
    except KeyError:
        return b""


def vocab_bytes(enc, vocab_size):
    """Every token's raw bytes, [bytes of id 0, ..., id V - 1]; b"" for an id that is no token.

    Raw, not decoded: a byte-level token can hold part of a UTF-8 character."""
    return [bytes_of_token(enc, t) for t in range(vocab_size)]
