"""Supervised fine-tuning data: prompt/response pairs as token bins plus a loss mask.

    python prepare.py --sft --input pairs.jsonl --tokenizer_from out --block_size 128 --name mytask

Each line of the JSONL input is one example, {"prompt": "...", "response": "..."}. An example is
written as its prompt's tokens, its response's tokens and an end-of-text token, one after the
other as prepare.py joins documents, and beside the ids a mask of one byte per token: 1 where
the token is a response token or the closing end-of-text (a target the loss counts; the model
learns to stop), 0 for the prompt (context only). data.windows turns a mask of 0 into the
target -1, which the model's cross-entropy ignores; pretraining data has no mask file and pays
nothing.

An example longer than --block_size tokens is dropped: then every window of block_size + 1
tokens that train.py draws holds at least one end-of-text among its targets, so no batch row is
without a counted target (train.py refuses a smaller block_size than the data was made for).
Rows that are not JSON, lack either key, have an empty response, hold text that is not UTF-8, or
are too long are counted by reason and reported, never a traceback. An example is val when a
checksum of its prompt falls in the --val_fraction band, so the same prompt never lands in both.
"""

import json
import zlib

import numpy as np

from tablefree.common import UserError
from tablefree.corpus import lone_surrogate

FIXES = {  # why a row is dropped: what to do about it
    "not JSON": 'write one {"prompt": ..., "response": ...} object per line (JSON Lines, not a JSON array)',
    "not an object": 'write each row as one {"prompt": ..., "response": ...} object, not an array or a value',
    "no prompt or response": 'give every row a "prompt" and a "response" string',
    "a lone surrogate": r"write the text without a lone \ud800-\udfff escape (a character past U+FFFF is a pair)",
    "empty response": 'give every row a non-empty "response"',
    "not UTF-8": "convert the file to UTF-8 (iconv -f latin1 -t utf-8 IN > OUT)",
    "longer than block_size": "give a larger --block_size (and train with it) or shorter examples",
}
REASONS = tuple(FIXES)


def read_examples(paths):
    """(prompt, response) per good row and the count of bad rows by reason."""
    examples, bad = [], dict.fromkeys(REASONS, 0)
    for path in paths:
        with open(path, "rb") as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    row = json.loads(line.decode("utf-8"))
                except UnicodeDecodeError:
                    bad["not UTF-8"] += 1
                    continue
                except json.JSONDecodeError:
                    bad["not JSON"] += 1
                    continue
                if not isinstance(row, dict):
                    bad["not an object"] += 1
                elif not all(isinstance(row.get(k), str) for k in ("prompt", "response")):
                    bad["no prompt or response"] += 1
                elif not row["response"]:
                    bad["empty response"] += 1
                elif any(lone_surrogate(row[k]) for k in ("prompt", "response")):
                    bad["a lone surrogate"] += 1  # JSON's \ud800 escapes: text no UTF-8 file could hold
                else:
                    examples.append((row["prompt"], row["response"]))
    return examples, bad


def encode_examples(examples, encoding, block_size, val_fraction, bad):
    """{split: (ids, mask, response bytes)} from the examples; the too long ones counted in bad."""
    parts = {"train": ([], [], 0), "val": ([], [], 0)}
    prompts = encoding.encode_ordinary_batch([p for p, _ in examples])
    responses = encoding.encode_ordinary_batch([r for _, r in examples])
    for (prompt, response), p_ids, r_ids in zip(examples, prompts, responses):
        if len(p_ids) + len(r_ids) + 1 > block_size:
            bad["longer than block_size"] += 1
            continue
        split = "val" if zlib.crc32(prompt.encode("utf-8")) / 2 ** 32 < val_fraction else "train"
        ids, mask, nbytes = parts[split]
        ids += [*p_ids, *r_ids, encoding.eot_token]
        mask += [0] * len(p_ids) + [1] * (len(r_ids) + 1)
        parts[split] = ids, mask, nbytes + len(response.encode("utf-8"))
    return parts


def write_sft(paths, encoding, block_size, val_fraction, dtype, directory):
    """Write {train,val}.bin and {train,val}.mask.bin into directory; return meta.json's splits and
    its "sft" entry (the block size the data was made for, examples kept, bad rows by reason)."""
    examples, bad = read_examples(paths)
    parts = encode_examples(examples, encoding, block_size, val_fraction, bad)
    splits = {}
    for split, (ids, mask, nbytes) in parts.items():
        if not ids:
            raise UserError(f"no {split} examples are left ({describe_bad(bad)}); {fix_for(parts, bad)}")
        np.asarray(ids, dtype=dtype).tofile(directory / f"{split}.bin")
        np.asarray(mask, dtype=np.uint8).tofile(directory / f"{split}.mask.bin")
        # bits per byte of the responses: the counted targets over the response text's bytes
        splits[split] = {"files": [f"{split}.bin"], "mask_files": [f"{split}.mask.bin"], "tokens": len(ids),
                         "scored_tokens": int(sum(mask)), "bytes": nbytes}
    return splits, {"block_size": block_size, "examples": len(examples) - bad["longer than block_size"], "bad_rows": bad}


def fix_for(parts, bad):
    """What to do when a split is empty: if no row survived, the fix for the commonest reason; else
    (the rows all fell in the other split) more rows or another --val_fraction."""
    if any(ids for ids, _, _ in parts.values()) or not any(bad.values()):
        return "give more rows or change --val_fraction"
    return FIXES[max(bad, key=bad.get)]


def describe_bad(bad):
    """'3 bad rows: 2 not JSON, 1 empty response' or 'no bad rows'."""
    counted = [f"{n} {reason}" for reason, n in bad.items() if n]
    return f"{sum(bad.values())} bad row(s): {', '.join(counted)}" if counted else "no bad rows"
