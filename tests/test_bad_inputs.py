"""Every bad input is one line on stderr, a non-zero exit, and no changed file.

    python -m pytest tests/test_bad_inputs.py

Each case runs a script's main() in this process (torch is imported once, so ~50 cases take
seconds); one case per script also runs as a real subprocess. A case passes when the script
exits with a status other than 0, its message is one line naming the problem and the fix, nothing
else reaches stderr, and no file under the data or run directories changed.
"""

import hashlib
import json
import os
import re
import shutil
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch

import prepare
import sample
import train
from conftest import TINY, flip_tensor_byte
from experiments import bench, compare
from model import GPT, GPTConfig
from tablefree.common import save_checkpoint, state_crc32
from tablefree.checksum import described, tensors_sha256
from tablefree.reports import pyplot
from tablefree.configurator import resolve
from tablefree.packed import packed_ternary
from tools import evaluate, export, extend, llama, plot

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = {"prepare": prepare, "train": train, "sample": sample, "evaluate": evaluate, "compare": compare, "extend": extend,
           "export": export, "bench": bench, "llama": llama, "plot": plot}


def command(script):
    """How a user starts a script: `python train.py`, `python -m tools.evaluate`, `python -m experiments.compare`."""
    module = SCRIPTS[script]
    return [f"{script}.py"] if "." not in module.__name__ else ["-m", module.__name__]


class RunsCode:
    """Unpickling this would run a shell command that leaves a marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.fixture(scope="module")
def world(data_dir, tmp_path_factory):
    """Data directories (one good, four broken) and run directories (a good float and ternary one, bad ones)."""
    root = tmp_path_factory.mktemp("world")
    os.symlink("loop", root / "loop")  # a symlink loop, and a link to nothing, for every path flag
    os.symlink("nowhere/x", root / "dangling")
    data = root / "data"
    shutil.copytree(data_dir / "tiny", data / "tiny")
    meta = json.loads((data / "tiny" / "meta.json").read_text())
    ids = np.fromfile(data / "tiny" / "train.bin", dtype=np.uint16)

    def broken(name, meta_text=None, train_bin=None):
        shutil.copytree(data / "tiny", data / name)
        if meta_text is not None:
            (data / name / "meta.json").write_text(meta_text)
        if train_bin is not None:
            (data / name / "train.bin").write_bytes(train_bin)

    broken("float", meta_text=json.dumps({**meta, "dtype": "float32"}))
    broken("corrupt", meta_text=json.dumps(meta)[:60])
    broken("wide", train_bin=ids.astype(np.uint32).tobytes())  # uint32 ids where meta.json says uint16
    bad_ids = ids.copy()
    bad_ids[100] = 300  # the vocabulary is 300 tokens: id 300 does not exist
    broken("badid", train_bin=bad_ids.tobytes())
    broken("emptybin", train_bin=b"")  # a train.bin with no token
    broken("zerobytes", meta_text=json.dumps({**meta, "splits": {k: {**v, "bytes": 0} for k, v in meta["splits"].items()}}))
    zero_ids = ids.copy()
    zero_ids[::50] = 0  # id 0, whose binary code is all zeros: the BPE leaves it unused now
    uncounted = {k: v for k, v in meta.items() if k != "counts"}  # no counts.npy: counted from the bins
    old_bpe = {**uncounted, "tokenizer": {k: v for k, v in meta["tokenizer"].items() if k != "reserved_ids"}}
    broken("oldbpe", meta_text=json.dumps(old_bpe), train_bin=zero_ids.tobytes())
    broken("named", meta_text=json.dumps({**uncounted, "tokenizer": {**meta["tokenizer"], "name": "gpt2"}}),
           train_bin=zero_ids.tobytes())

    runs = root / "runs"
    train.train(resolve(train.DEFAULTS, ["--data_dir", str(data), "--dataset=tiny", f"--out_dir={runs / 'good'}",
                                         *TINY, "--max_iters=2", "--eval_interval=2"]))
    train.train(resolve(train.DEFAULTS, ["--data_dir", str(data), "--dataset=tiny", f"--out_dir={runs / 'tern'}",
                                         *TINY, "--body=ternary", "--max_iters=2", "--eval_interval=2"]))
    good = (runs / "good" / "ckpt.pt").read_bytes()
    for name, contents in [("torn", good[: len(good) // 3]), ("evil", None), ("foreign", None)]:
        (runs / name).mkdir()
        if contents:
            (runs / name / "ckpt.pt").write_bytes(contents)
    torch.save({"model": RunsCode(root / "pwned"), "model_config": {}, "tokenizer": {}}, runs / "evil" / "ckpt.pt")
    torch.save({"weights": torch.zeros(3)}, runs / "foreign" / "ckpt.pt")
    ckpt = torch.load(runs / "good" / "ckpt.pt", weights_only=True)
    (runs / "weights").mkdir()  # the weights alone: enough to sample from, not to resume
    torch.save({key: ckpt[key] for key in ("model", "model_config", "tokenizer")}, runs / "weights" / "ckpt.pt")
    (runs / "empty").mkdir()
    (root / "theirs").mkdir()  # a transformers folder another tool wrote
    (root / "theirs" / "config.json").write_text("{}")
    (root / "theirs" / "pytorch_model.bin").write_bytes(b"their weights")
    (runs / "blank").mkdir()
    (runs / "blank" / "log.jsonl").write_text("")  # a run that has logged nothing yet
    shutil.copytree(data / "tiny", root / "garbled")  # a dataset whose rank file is not one
    (root / "garbled" / "tokenizer.tiktoken").write_text("not base64 at all\n")
    shutil.copytree(data / "tiny", root / "cut")  # a dataset whose rank file lost its second half
    lines = (data / "tiny" / "tokenizer.tiktoken").read_text().splitlines(keepends=True)
    (root / "cut" / "tokenizer.tiktoken").write_text("".join(lines[:len(lines) // 2]))
    (runs / "zero").mkdir()
    (runs / "zero" / "ckpt.pt").write_bytes(b"")  # a 0-byte checkpoint (a full disk, a killed copy)
    shutil.copytree(data / "tiny", root / "data2" / "tiny")  # the run's dataset, prepared again since
    (root / "data2" / "tiny" / "meta.json").write_text(json.dumps({**meta, "tokenizer": {**meta["tokenizer"],
                                                                                         "name": "another"}}))
    sft_rows = {"latin1": "\n".join(['{"prompt": "caf\xe9", "response": "cr\xe8me"}'] * 20).encode("latin-1"),
                "array": json.dumps([{"prompt": f"q{i}", "response": "a"} for i in range(20)], indent=1).encode(),
                "keys": "\n".join(json.dumps({"question": f"q{i}", "answer": "a"}) for i in range(20)).encode(),
                "long": "\n".join(json.dumps({"prompt": f"the king {i} " * 9, "response": "gold"}) for i in range(20)).encode()}
    for name, rows in sft_rows.items():  # SFT files in which no row survives, each for its own reason
        (root / f"sft_{name}.jsonl").write_bytes(rows)
    for name in ("notes.json", "notes.md", "notes.pt", "notes.gguf"):  # the user's own files, any name
        (root / name).write_text("my own notes\n")
    quoted = "My notes: `python -m tools.evaluate`, `python -m tools.extend`, `python -m experiments.compare`.\n"
    for name in ("quoted.md", "quoted.json", "README.md"):  # the user's notes that quote our commands
        (root / name).write_text(quoted)
    plt = pyplot()
    fig = plt.figure()
    fig.savefig(root / "figure.png")  # the user's own figure: matplotlib's name in it, not our mark
    plt.close(fig)
    (root / "fake.gguf").write_bytes(b"GGUF" + bytes(60))  # the magic of a GGUF file, as given to sample.py
    (root / "latin1.txt").write_bytes("Caf\xe9 cr\xe8me".encode("latin-1"))
    (root / "small.txt").write_text("The crown of the king is gold.\n" * 50)  # a few dozen BPE merges at most
    (root / "badtail.txt").write_bytes(b"The crown of the king is gold.\n" * 2000 + b"caf\xe9\n")  # bad near the end
    (root / "sums.py").write_text("n_layer = 2\nmax_iters = n_layer * 100\n")
    (root / "latin1.py").write_bytes("dataset = 'caf\xe9'\n".encode("latin-1"))  # a config file that is not UTF-8
    torch.save(torch.zeros(299, 8), root / "short.pt")  # a source table one row short
    # a person's files whose first line is nearly our mark: one more letter after the command (issue 65)
    (root / "near.md").write_text("<!-- written by tablefree: python -m tools.evaluatex -->\nmine\n")
    (root / "near.json").write_text('{"written_by": "tablefree: python -m tools.evaluatex", "mine": 1}\n')
    (root / "near2.md").write_text("<!-- written by tablefree: python -m tools.extended -->\nmine\n")
    (root / "near3.md").write_text("<!-- written by tablefree: python -m experiments.compare_old -->\nmine\n")
    (root / "task.json").write_text('{"task": "val", "mine": 1}\n')  # what evaluate's answers began with once
    (root / "ckpt.json").write_text('{\n  "checkpoint": "mine.pt",\n  "iter_num": 3\n}\n')  # and its reports
    for folder, files in {"userhf": {"README.md": "notes\n", "config.json": '{"model_type": "bert"}'},
                          "usermeta": {"meta.json": '{"mine": 1}'}, "userbins": {"train.bin": "mine", "counts.npy": "x"}}.items():
        (root / folder).mkdir()
        for name, text in files.items():  # a person's folder holding only files whose names we also write
            (root / folder / name).write_text(text)
    ternary = GPT(GPTConfig(**{**ckpt["model_config"], "body": "ternary"}))
    packed = packed_ternary(ternary, {**ckpt, "model_config": asdict(ternary.config)})
    torch.save(packed, root / "mine.pt")  # a whole packed file, beside a file of the user's where its flat file goes
    (root / "mine.bin").write_text("my own notes\n")
    flipped = {**packed, "model": dict(packed["model"])}
    flipped["model"]["lm_head.weight"] = packed["model"]["lm_head.weight"].clone()
    flipped["model"]["lm_head.weight"].view(torch.uint8)[:4] ^= 0xFF  # four bytes flipped: sha256 differs
    torch.save(flipped, runs / "flipped.ternary.pt")
    packed["ternary"]["h.0.mlp.c_fc"]["packed"][0, 0] = 0b11  # a code no weight has, in a file whose sha256 agrees
    packed["sha256"] = tensors_sha256(packed["model"], packed["ternary"], described(packed))
    torch.save(packed, runs / "bad.ternary.pt")
    torch.save(torch.randn(300, 8), root / "narrow.pt")  # a source table narrower than the 32 bits asked
    torch.save(torch.ones(300, 64), root / "flat.pt")  # every row equal: one code for every token
    torch.save(torch.randn(2, 64)[torch.arange(300) % 2], root / "two.pt")  # two distinct rows: two codes
    for name in ("flipbyte", "nan", "nanopt"):
        shutil.copytree(runs / "good", runs / name)
    flip_tensor_byte(runs / "flipbyte" / "ckpt.pt")  # a weight changed on disk: the zip still whole
    diverged = {**ckpt, "model": {**ckpt["model"], "lm_head.weight": torch.full_like(ckpt["model"]["lm_head.weight"],
                                                                                     float("nan"))}}
    save_checkpoint(diverged, runs / "nan")  # whole, checksummed, and nan
    state = ckpt["optimizer"]["state"]
    save_checkpoint({**ckpt, "optimizer": {**ckpt["optimizer"], "state": {**state, 0: {
        **state[0], "exp_avg_sq": torch.full_like(state[0]["exp_avg_sq"], float("nan"))}}}}, runs / "nanopt")
    (runs / "oldtok").mkdir()  # from before the crc32 covered the tokenizer, with a damaged one
    old = {k: v for k, v in ckpt.items() if k not in ("crc32", "crc32_covers")}
    old["tokenizer"] = {**old["tokenizer"], "ranks": "!!! 1\n"}
    torch.save({**old, "crc32": state_crc32(old, everything=False)}, runs / "oldtok" / "ckpt.pt")
    (runs / "other").mkdir()  # the same shape as good, other weights
    save_checkpoint({**ckpt, "model": {**ckpt["model"], "lm_head.weight": 2 * ckpt["model"]["lm_head.weight"]}},
                    runs / "other")
    gguf_files(root, runs)
    return root


def gguf_files(root, runs):
    """A GGUF file cut short and a valid one that is not ours (no tablefree keys), if gguf is installed."""
    try:
        import gguf
    except ImportError:
        return
    export.main(["--ckpt", str(runs / "good"), "--format", "gguf", "--out", str(root / "whole.gguf")])
    (root / "torn.gguf").write_bytes((root / "whole.gguf").read_bytes()[:5000])
    writer = gguf.GGUFWriter(root / "foreign.gguf", "llama")
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def filled(argv, world):
    """A case's arguments with {data}, {runs} and {root} made paths in the world."""
    return [a.format(data=world / "data", runs=world / "runs", root=world) for a in argv]


def snapshot(root):
    """(size, sha256) of every file under root: the data, the runs and every output a case names."""
    return {str(p.relative_to(root)): (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*")) if p.is_file()}


def sft(name):
    """prepare.py --sft on the world's sft_<name>.jsonl, in the run's tokenizer."""
    return ["--sft", "--input", f"{{root}}/sft_{name}.jsonl", "--tokenizer_from", "{data}/tiny", "--out_dir", "{data}",
            "--name", "t"]


# (script, arguments with {data} {runs} {root} filled in, what the message must say)
TRAIN = ["--data_dir={data}", "--dataset=tiny", "--out_dir={runs}/new", *TINY]
# Every suggested fix works (issue 77): a case whose error names a fix records it with fix(case, *steps), and
# test_every_suggested_fix_gets_past_its_error runs the command with those steps. A step "--key=value" replaces the
# key's value in argv or is added, "--flag" is added, "-key" drops the key, "rm PATH" removes that file first; BENCH
# and STUDY keep a benchmark or a study, which the fix lets run, to seconds.
FIXES = {}
BENCH = ["--quick", "--sections=input"]
STUDY = ["--seeds=1", "--inputs=learned", *TINY, "--max_iters=2", "--eval_interval=2", "--lr_decay_iters=2"]


def fix(case, *steps):
    """case, with the steps its error's suggested fix takes recorded for the test that follows them."""
    FIXES[case[0], tuple(case[1])] = steps
    return case


EVALUATE = ["--ckpt", "{runs}/good", "--tasks", "val", "--data_dir", "{data}"]  # scored on the tiny data
RESUME = ["--data_dir={data}", "--out_dir={runs}/good", "--init_from=resume", "--device=cpu", "--compile=False"]
CASES = [
    ("prepare", ["--workers", "0"], "--workers must be at least 1, not 0"),
    ("prepare", ["--val_fraction", "1.5"], "--val_fraction must be between 0 and 1"),
    ("prepare", ["--vocab_size", "100"], "--vocab_size must be from 259 (a reserved id 0"),
    ("prepare", ["--vocab_size", "0"], "--vocab_size must be from 259"),  # not the default's 1,024
    ("prepare", ["--vocab_size", "1000000000"], "--vocab_size must be from 259 (a reserved id 0, 256 bytes, 1 merge, "
                                                "end of text) to 16,777,216, not 1000000000"),  # before the BPE allocates
    ("train", [*TRAIN, "--seed=99999999999999999999"], "seed must be below 2^63"),
    fix(("train", [*TRAIN, "--out_dir={data}/_sources"], "or inside its dataset or its sources' cache, where prepare.py"), "--out_dir={root}/out-mine"),
    ("prepare", ["--shard_tokens", "0"], "--shard_tokens must be at least 1"),
    ("prepare", ["--max_tokens", "-5"], "--max_tokens must be above 0"),
    fix(("prepare", ["--dataset", "nosuch", "--out_dir", "{data}"], "unknown dataset 'nosuch'"), "-dataset",
        "--input={root}/small.txt", "--name=fresh"),
    ("prepare", ["--input", "{root}/missing/*.txt", "--out_dir", "{data}"], "matches no files"),
    ("prepare", ["--colour", "blue"], "unrecognized arguments: --colour blue"),
    fix(("prepare", ["--tokenizer_from", "{data}/tiny", "--vocab_size", "300", "--out_dir", "{data}"],
     "brings its own vocabulary; drop --vocab_size"), "-vocab_size"),
    fix(("prepare", ["--tokenizer", "gpt2", "--vocab_size", "300"], "brings its own vocabulary; drop --vocab_size"), "-vocab_size"),
    fix(("prepare", ["--input", "{root}/small.txt", "--tokenizer_from", "{root}/garbled", "--out_dir", "{data}",
                 "--name", "fromgarbled"], "cannot read the tokenizer"), "--tokenizer_from={data}/tiny"),
    fix(("prepare", ["--input", "{root}/small.txt", "--tokenizer_from", "{root}/cut", "--out_dir", "{data}",
                 "--name", "fromcut"], "short of the 300 its meta.json names (cut or edited)"), "--tokenizer_from={data}/tiny"),
    fix(("prepare", ["--input", "{root}/small.txt", "--tokenizer_from", "{root}/theirs", "--out_dir", "{data}",
                 "--name", "fromtheirs"], "has no meta.json, so it is not a prepared dataset"), "--tokenizer_from={data}/tiny"),
    ("extend", ["--ckpt", "{runs}/good", "--name", ""], "--name must be a plain name"),
    ("train", [*TRAIN, "--n_head=3"], "must split into n_head=3 heads"),
    ("train", [*TRAIN, "--n_embd=8"], "n_embd=8 is narrower than the 9-bit code"),
    ("train", [*TRAIN, "--input=foo"], "unknown input 'foo'"),
    ("train", [*TRAIN, "--dropout=1.5"], "dropout must be in [0, 1), not 1.5"),
    ("train", [*TRAIN, "--grad_clip=-1"], "grad_clip must be at least 0, not -1.0"),
    ("train", [*TRAIN, "--beta2=1.5"], "beta2 must be below 1, not 1.5"),
    ("train", [*TRAIN, "--batch_size=0"], "batch_size must be at least 1, not 0"),
    ("train", [*TRAIN, "--init_from=restart"], "init_from='restart' is not 'scratch', 'resume' or a trained run"),
    ("train", [*TRAIN, "--learnig_rate=1e-3"], "unknown setting 'learnig_rate'; did you mean 'learning_rate'?"),
    ("train", [*TRAIN, "--dtype=float64"], "dtype must be 'auto' or one of float32, bfloat16, float16"),
    ("train", [*TRAIN, "--device=cuda:3"], "device 'cuda:3' is not available on this machine"),
    ("train", [*TRAIN, "{root}/sums.py"], "max_iters must be a literal value, not 'n_layer * 100'"),
    fix(("train", [*TRAIN, "--out_dir={runs}/good"], "already holds a run; continue it with --init_from=resume"), "--init_from=resume"),
    fix(("train", [*TRAIN, "--out_dir={runs}/good", "--init_from={runs}/good"], "holds the run being fine-tuned; give the new"), "--out_dir={root}/fresh"),
    ("train", [*TRAIN, "--block_size=1000000000"], "block_size must be at most 1,048,576, not 1000000000"),
    ("train", [*TRAIN, "--batch_size=1000000000000"], "batch_size must be at most 1,048,576, not 1000000000000"),
    ("train", [*TRAIN, "--batch_size=100000", "--block_size=1024"], "at most 16,777,216 tokens a micro-batch, not 102400000"),
    fix(("train", [*TRAIN, "--out_dir={data}/tiny", "--overwrite=True"], "holds a prepared dataset (prepare.py's meta.json), which --overwrite never replaces; choose another --out_dir"), "--out_dir={root}/fresh"),
    fix(("train", [*RESUME, "--n_layer=32"], "trained with n_layer=2, not 32"), "--n_layer=2"),
    fix(("train", [*RESUME, "--dataset=other"], "trained with dataset='tiny', not 'other'"), "--dataset=tiny"),
    fix(("train", [*RESUME, "--seed=7"], "trained with seed=1337, not 7"), "--seed=1337"),
    ("train", [*RESUME, "--out_dir={runs}/evil"], "holds objects a safe load (weights_only=True) refuses: it is unsafe"),
    ("train", [*RESUME, "--out_dir={runs}/torn"], "it is corrupt or truncated: restore it, or train again"),
    ("train", [*RESUME, "--out_dir={runs}/foreign"], "is not a tablefree checkpoint"),
    fix(("train", [*RESUME, "--out_dir={runs}/empty"], "no checkpoint at"), "--out_dir={runs}/good"),
    ("train", [*TRAIN, "--out_dir="], "out_dir must be a real path (it is empty), not ''"),
    ("train", [*TRAIN, "--out_dir={root}/loop"], "out_dir must be a real path (it is or passes through a symlink loop)"),
    ("train", [*TRAIN, "--data_dir={root}/dangling"], "data_dir must be a real path (it is a link to nothing (nowhere/x))"),
    ("prepare", ["--input", "{root}/dangling"], "dangling' is a link to nothing (nowhere/x); give a real path"),
    ("prepare", ["--input", "{root}/small.txt", "--out_dir", "{root}/loop"], "loop' is or passes through a symlink loop"),
    ("sample", ["--ckpt", ""], "argument --ckpt: '' is empty; give a real path"),
    ("sample", ["--ckpt", "{runs}/good", "--start_file", "{root}/loop"], "argument --start_file: "),
    ("evaluate", ["--ckpt", "{runs}/good", "--out", ""], "argument --out: '' is empty; give a real path"),
    ("export", ["--ckpt", "{runs}/good", "--out", "{root}/loop"], "loop' is or passes through a symlink loop"),
    ("export", ["--ckpt", "{runs}/tern", "--out", "{root}/dangling"], "dangling' is a link to nothing (nowhere/x)"),
    ("extend", ["--ckpt", "{runs}/good", "--results_dir", "{root}/loop/x"], "passes through a symlink loop"),
    ("plot", ["{runs}/good", "--out", "{root}/dangling"], "argument --out: "),
    ("llama", ["--gguf", ""], "argument --gguf: '' is empty; give a real path"),
    ("train", [*TRAIN, "--init_from= "], "init_from must be a real path (it is empty"),
    ("train", [*RESUME, "--out_dir={runs}/zero"], "is not a loadable checkpoint (the file is empty: a full disk"),
    fix(("train", [*RESUME, "--data_dir={root}/data2"], "was prepared again since"), "--init_from=scratch", "--out_dir={root}/fresh"),
    fix(("prepare", ["--input", "{root}/small.txt", "--out_dir", "{data}", "--name", "tiny", "--vocab_size", "300"],
     "holds a dataset prepared with other settings"), "--force"),
    fix(("train", [*RESUME, "--out_dir={runs}/weights"], "has no best_val_loss, elapsed_s, iter_num, optimizer, settings"), "--init_from=scratch", "--out_dir={root}/fresh"),
    ("train", [*TRAIN, "--dataset=float"], "meta.json is corrupt or from another tool (ValueError: ids of type float32)"),
    ("train", [*TRAIN, "--dataset=corrupt"], "meta.json is corrupt or from another tool"),
    ("train", [*TRAIN, "--dataset=wide"], "uint16 ids but meta.json says"),
    ("train", [*TRAIN, "--dataset=badid"], "holds token id 300 but the vocabulary has 300"),
    ("train", [*TRAIN, "--dataset=oldbpe"], "it was prepared before the BPE left them unused; prepare it again"),
    ("train", [*TRAIN, "--dataset=named"], "the gpt2 tokenizer uses every id; train --input=learned or kronecker"),
    ("train", [*TRAIN, "--dataset=nothing"], "prepare the data first: python prepare.py --input FILES --name nothing"),
    ("train", [*TRAIN, "--input=frozen"], "codes_from names the table frozen codes are derived from"),
    ("train", [*TRAIN, "--input=binary", "--codes_from={runs}/good"], "set it for input='frozen' and only then"),
    ("train", [*TRAIN, "--input=frozen", "--codes_from={runs}/good"], "was trained with input='binary': it has no table"),
    ("train", [*TRAIN, "--input=frozen", "--codes_from={root}/short.pt"], "has 299 rows but the vocabulary has 300"),
    ("train", [*TRAIN, "--input=frozen", "--codes_from={runs}/torn"], "it is corrupt or truncated"),
    ("sample", ["--ckpt", "{runs}/good", "--temperature", "-1"], "--temperature must be a finite number at least 0"),
    ("sample", ["--ckpt", "{runs}/good", "--top_k", "-5"], "--top_k must be at least 0"),
    ("sample", ["--ckpt", "{runs}/good", "--num_samples", "0"], "--num_samples must be at least 1"),
    ("sample", ["--ckpt", "{runs}/oldtok"], "the checkpoint's tokenizer is damaged (ValueError); restore the checkpoint"),
    ("sample", ["--ckpt", "{runs}/good", "--device=xpu"], "device 'xpu' is not available on this machine; use 'cpu'"),
    ("sample", ["--ckpt", "{runs}/good", "--device=gpu:0"], "device 'gpu:0' is not a device name; use 'auto', 'cpu'"),
    ("sample", ["--ckpt", "{runs}/good", "--seed", str(2 ** 70)], "--seed must be a whole number from 0 to 2^63 - 1"),
    ("sample", ["--ckpt", "{runs}/good", "--max_new_tokens", str(2 ** 31 - 1)], "--max_new_tokens must be from 1 to 2^24"),
    ("sample", ["--ckpt", "{runs}/good", "--start", "ROMEO:", "--start_file", "{root}/small.txt"],
     "give the prompt as --start or as --start_file, not both"),
    fix(("sample", ["--ckpt", "{runs}/good", "--start", ""], "the prompt is empty"), "--start=ROMEO"),
    ("sample", ["--ckpt", "{runs}/good", "--start", "caf\udce9"], "--start is not UTF-8 text (near character 3)"),
    ("sample", ["--ckpt", "{runs}/good", "--start", "The king is gold. " * 20], "but the model sees at most block_size=32"),
    ("sample", ["--ckpt", "{runs}/good", "--start_file", "{root}/latin1.txt"], "is not UTF-8 text (near byte 3)"),
    ("sample", ["--ckpt", "{runs}/good", "--start_file", "{root}/nothing.txt"], "cannot read --start_file"),
    ("sample", ["--ckpt", "{runs}/evil"], "it is unsafe, or not a checkpoint of ours"),
    ("sample", ["--ckpt", "{root}/fake.gguf"], "it is a GGUF file, which llama.cpp runs: python -m tools.llama --gguf"),
    fix(("sample", ["--ckpt", "{root}/latin1.txt"], "it is not a file torch.save wrote; give --ckpt a run folder"), "--ckpt={runs}/good"),
    fix(("train", [*TRAIN, "--init_from={root}/latin1.txt"], "it is not a file torch.save wrote; give --init_from a run"), "--init_from={runs}/good"),
    ("sample", ["--ckpt", "{runs}/torn/ckpt.pt"], "it is corrupt or truncated"),
    ("sample", ["--ckpt", "{runs}/foreign"], "is not a tablefree checkpoint"),
    ("sample", ["--ckpt", "{runs}/bad.ternary.pt"], "unused code 11; the file is corrupt"),
    ("sample", ["--ckpt", "{runs}/flipped.ternary.pt"], "(sha256 differs); export it again from its checkpoint"),
    ("sample", ["--ckpt", "{runs}/good", "--engine", "c"], "is not a packed ternary export; the C runtime decodes those"),
    fix(("sample", ["--ckpt", "{root}/mine.pt", "--engine", "c"], "mine.bin exists and this command did not write it"), "rm {root}/mine.bin"),
    fix(("sample", ["--ckpt", "{runs}/good", "--engine", "c", "--no_cache"], "--engine c runs on the CPU with its KV cache"), "-device", "-no_cache"),
    ("sample", ["--ckpt", "{runs}/good", "--temperature", "inf"], "--temperature must be a finite number"),
    ("sample", ["--ckpt", "{runs}/good", "--temperature", "nan"], "--temperature must be a finite number"),
    ("evaluate", ["--ckpt", "{runs}/flipped.ternary.pt", "--tasks", "spelling", "--out", "{root}/e.json"],
     "sha256 differs"),
    # settings whose useful range only the data tells
    fix(("train", [*TRAIN, "--vocab_size=512"], "has 300 tokens; give --vocab_size=0 to take the data's, or prepare the "
     "data with --vocab_size 512"), "--vocab_size=0"),
    fix(("train", [*TRAIN, "--vocab_size=100"], "has 300 tokens; give --vocab_size=0 to take the data's$"), "--vocab_size=0"),  # prepare needs 259+
    ("train", [*TRAIN, "--mlp_width=-1"], "mlp_width must be at least 0, not -1"),
    fix(("train", [*TRAIN, "--dry_run=True", "--dataset=nothing"], "the dry run needs the vocabulary: give --vocab_size=N"), "--vocab_size=300"),
    fix(("train", [*RESUME, "--dry_run=True"], "the dry run describes a new run from its settings; give --init_from=scratch"), "--init_from=scratch"),
    fix(("train", [*TRAIN, "--input=kronecker", "--pos_dim=200"], "pos_dim=200 is more than the longest token's"), "--pos_dim=13"),
    ("train", [*TRAIN, "--input=kronecker", "--pos_dim=100000"], "pos_dim must be at most 256, not 100000"),
    fix(("train", [*TRAIN, "--input=frozen", "--codes_from={root}/narrow.pt"], "principal components of a 300 x 8 table; give --code_dim=8"), "--code_dim=8"),
    ("train", [*TRAIN, "--input=frozen", "--codes_from={root}/flat.pt"], "has every row equal"),
    ("train", [*TRAIN, "--input=frozen", "--codes_from={root}/two.pt"], "tell only 2 of 300 tokens apart (under 90%)"),
    fix(("prepare", ["--input", "{root}/small.txt", "--out_dir", "{data}", "--name", "big", "--vocab_size", "5000"],
     "BPE tokens, not --vocab_size 5,000; give --vocab_size"), "--vocab_size=279"),
    ("export", ["--ckpt", "{runs}/good", "--format", "ternary", "--out", "{root}/x.pt"], "only a ternary body packs to 2 bits"),
    ("export", ["--ckpt", "{runs}/torn"], "it is corrupt or truncated"),
    fix(("evaluate", ["--ckpt", "{runs}/good", "--out", "{root}/no/such/dir/eval.json"], "no/such/dir is not a writable folder; give --out in one"), "--out={root}/fresh.json"),
    ("evaluate", ["--ckpt", "{runs}/good", "--harness", "--tasks", "piqa,val"], "arc_challenge, lambada, not val; score the others without --harness"),
    ("evaluate", ["--ckpt", "{runs}/good", "--tasks", "val,trivia"], "unknown task(s) trivia"),
    ("evaluate", ["--ckpt", "{runs}/good", "--batch_size", "0"], "--batch_size must be at least 1"),
    fix(("evaluate", ["--ckpt", "{runs}/empty"], "no checkpoint at"), "--ckpt={runs}/good"),
    ("evaluate", ["--ckpt", "{runs}/good", "--tasks", "val", "--text", "{root}/latin1.txt", "--out", "{root}/e.json"],
     "cannot read --text"),
    ("extend", ["--ckpt", "{runs}/good", "--new_tokens", "0"], "--new_tokens must be at least 1"),
    ("extend", ["--ckpt", "{runs}/torn", "--results_dir", "{root}"], "it is corrupt or truncated"),
    fix(("extend", ["--ckpt", "{runs}/good", "--results_dir", "{root}/latin1.txt"], "latin1.txt is not a writable folder; give --results_dir or --name in one"), "--results_dir={root}"),
    # a run, a dataset or one of their files given as any writer's output: refused, nothing changed
    fix(("export", ["--ckpt", "{runs}/good", "--out", "{runs}/good"], "holds a run (ckpt.pt, log.jsonl) that replacing it"), "--out={root}/fresh-hf"),
    fix(("export", ["--ckpt", "{runs}/good", "--out", "{runs}/good/log.jsonl"], "log.jsonl is a file; give --out a folder"), "--out={root}/fresh-hf"),
    fix(("export", ["--ckpt", "{runs}/good", "--out", "{data}/tiny"], "holds a dataset (counts.npy, meta.json, tokenizer.tiktoken"), "--out={root}/fresh-hf"),
    fix(("export", ["--ckpt", "{runs}/good", "--out", "{runs}"], "holds files this command did not write"), "--out={root}/fresh-hf"),
    fix(("export", ["--ckpt", "{runs}/tern", "--out", "{runs}/tern/ckpt.pt"], "ckpt.pt belongs to a run"), "--out={root}/fresh.pt"),
    fix(("export", ["--ckpt", "{runs}/tern", "--out", "{runs}/tern"], "tern is a folder; give --out a file path"), "--out={root}/fresh.pt"),
    fix(("export", ["--ckpt", "{runs}/tern", "--out", "{runs}/good/config.json"], "config.json belongs to a run"), "--out={root}/fresh.pt"),
    fix(("export", ["--ckpt", "{runs}/tern", "--out", "{data}/tiny/train.bin"], "tiny is a dataset's folder, which holds only"), "--out={root}/fresh.pt"),
    fix(("export", ["--ckpt", "{runs}/tern", "--out", "{data}/tiny/meta.json"], "tiny is a dataset's folder, which holds only"), "--out={root}/fresh.pt"),
    fix(("evaluate", [*EVALUATE, "--out", "{data}/tiny/eval.json"],
     "tiny is a dataset's folder, which holds only what prepare.py writes; give --out a file elsewhere"), "--out={root}/fresh.json"),  # a new file
    fix(("plot", ["{runs}/good", "--out", "{data}/tiny/loss.png"], "tiny is a dataset's folder, which holds only"), "--out={root}/fresh.png"),
    fix(("evaluate", [*EVALUATE, "--out", "{root}/results.md"],
     "is not a .json path; tools.evaluate writes its results as JSON"), "--out={root}/fresh.json"),
    fix(("evaluate", [*EVALUATE, "--out", "{runs}/good/log.jsonl"],
     "log.jsonl belongs to a run"), "--out={root}/fresh.json"),
    fix(("evaluate", [*EVALUATE, "--out", "{runs}/good/ckpt.pt"],
     "ckpt.pt belongs to a run"), "--out={root}/fresh.json"),
    fix(("evaluate", [*EVALUATE, "--out", "{data}/tiny/meta.json"],
     "tiny is a dataset's folder, which holds only what prepare.py writes"), "--out={root}/fresh.json"),
    fix(("evaluate", [*EVALUATE, "--out", "{runs}/good"],
     "good is a folder; give --out a file path"), "--out={root}/fresh.json"),
    fix(("prepare", ["--input", "{root}/badtail.txt", "--out_dir", "{runs}", "--name", "good"], "holds a run"), "--name=fresh"),
    ("prepare", ["--input", "{root}/badtail.txt", "--out_dir", "{data}", "--name", "tiny", "--force"],
     "is not valid UTF-8"),  # the dataset it would have replaced stays whole
    ("prepare", ["--input", "{root}/latin1.txt", "--out_dir", "{root}/latin1.txt"], "cannot write to --out_dir"),
    fix(("bench", ["--out", "{runs}/good/log.jsonl"], "log.jsonl belongs to a run"), "--out={root}/fresh.md", *BENCH),
    fix(("bench", ["--out", "{runs}/good/ckpt.pt"], "ckpt.pt belongs to a run"), "--out={root}/fresh.md", *BENCH),
    fix(("bench", ["--out", "{runs}/good"], "good is a folder; give --out a file path"), "--out={root}/fresh.md", *BENCH),
    fix(("export", ["--ckpt", "{runs}/good", "--out", "{root}/latin1.txt/hf"], "is not a writable folder; give --out in one"), "--out={root}/fresh-hf"),
    fix(("evaluate", [*EVALUATE, "--out", "{data}/tiny/train.bin"],
     "tiny is a dataset's folder, which holds only what prepare.py writes"), "--out={root}/fresh.json"),
    fix(("prepare", ["--input", "{root}/small.txt", "--out_dir", "{data}", "--name", "tiny", "--vocab_size", "5000", "--force"],
     "give --vocab_size"), "--vocab_size=279"),  # a dataset rebuilt from input that cannot give it: the old one stays whole
    fix(("train", [*RESUME, "--max_iters=1"], "is at step 2, past max_iters=1; give --max_iters=2 or more"), "--max_iters=2"),
    fix(("bench", ["--out", "{data}/tiny/meta.json"], "tiny is a dataset's folder, which holds only what prepare.py writes"), "--out={root}/fresh.md", *BENCH),
    ("export", ["--ckpt", "{runs}/good", "--format", "gguf", "--gguf_type", "TQ2_0"], "body is 'float': store it as F32, F16, Q8_0, not TQ2_0"),
    ("export", ["--ckpt", "{runs}/tern", "--format", "gguf", "--gguf_type", "Q8_0"], "store it as TQ2_0, TQ1_0, not Q8_0"),
    ("export", ["--ckpt", "{runs}/tern", "--format", "gguf"], "rows are 32 and 128 wide; no type of a ternary body fits: train with n_embd and mlp_width multiples of 256"),
    fix(("export", ["--ckpt", "{runs}/good", "--format", "gguf", "--out", "{root}/no/such/m.gguf"], "is not a writable folder; give --out in one"), "--out={root}/fresh.gguf"),
    fix(("export", ["--ckpt", "{runs}/good", "--format", "gguf", "--out", "{root}/latin1.txt"], "latin1.txt exists and this command did not write it; give --out a new path"), "--out={root}/fresh.gguf"),
    fix(("export", ["--ckpt", "{runs}/tern", "--out", "{root}/latin1.txt"], "latin1.txt exists and this command did not write it"), "--out={root}/fresh.pt"),
    fix(("export", ["--ckpt", "{runs}/good", "--format", "gguf", "--out", "{runs}/good/ckpt.pt"], "ckpt.pt belongs to a run"), "--out={root}/fresh.gguf"),
    fix(("export", ["--ckpt", "{runs}/good", "--gguf_type", "F16"], "--gguf_type is for --format gguf, not hf"), "--format=gguf"),
    ("llama", ["--gguf", "{runs}/good/ckpt.pt"], "is not a GGUF file (it does not begin with 'GGUF')"),
    ("llama", ["--gguf", "{root}/torn.gguf"], "is a corrupt or truncated GGUF file"),
    ("llama", ["--gguf", "{root}/foreign.gguf"], "was not written by tools.export --format gguf"),
    ("llama", ["--gguf", "{root}/none.gguf"], "no GGUF file at"),
    ("llama", ["--gguf", "{root}/none.gguf", "--threads", "100000"], "--threads must be at most 1,024"),  # a segfault
    ("llama", ["--gguf", "{root}/none.gguf", "--max_new_tokens", "0"], "--max_new_tokens must be at least 1"),
    ("llama", ["--gguf", "{root}/whole.gguf", "--start", "caf\udce9"], "--start is not UTF-8 text (near character 3)"),
    ("llama", ["--gguf", "{root}/none.gguf", "--temperature", "inf"], "--temperature must be a finite number"),
    ("llama", ["--gguf", "{root}/whole.gguf", "--max_new_tokens", "1000000000"],
     "--max_new_tokens must be at most"),  # past the context (needs llama-cpp-python, as CI has)
    ("llama", ["--gguf", "{root}/whole.gguf", "--start", "a", "--max_new_tokens", "32"],  # llama.cpp's context is larger
     "--max_new_tokens must be at most 31: the model's block size of 32 tokens less the prompt's 1"),
    ("llama", ["--gguf", "{root}/none.gguf", "--prompts", "100000"], "--prompts must be at most 256"),
    # weights changed on disk, or not finite: nothing proceeds from them
    ("sample", ["--ckpt", "{runs}/flipbyte"], "flipbyte/ckpt.pt is damaged: its contents (weights, settings or tokenizer) are not"),
    ("train", [*RESUME, "--out_dir={runs}/flipbyte"], "crc32 differs); restore it from a copy"),
    ("train", [*TRAIN, "--init_from={runs}/nan"], "nan/ckpt.pt holds non-finite weights (in lm_head.weight)"),
    fix(("train", [*RESUME[:1], "--out_dir={runs}/nanopt", *RESUME[2:]], "nanopt/ckpt.pt's optimizer state holds "
     "non-finite values (in optimizer/state/0/exp_avg_sq), which would make the weights non-finite at its first step; "
     "fine-tune its finite weights with a new optimizer instead: --init_from="), "--init_from={runs}/nanopt", "--out_dir={root}/fresh"),
    ("export", ["--ckpt", "{runs}/flipbyte", "--format", "gguf", "--out", "{root}/f.gguf"], "crc32 differs"),
    ("export", ["--ckpt", "{runs}/nan", "--out", "{root}/hf"], "holds non-finite weights"),
    ("export", ["--ckpt", "{runs}/nan", "--format", "gguf", "--out", "{root}/n.gguf"], "holds non-finite weights"),
    ("evaluate", ["--ckpt", "{runs}/nan", "--tasks", "val", "--data_dir", "{data}", "--out", "{root}/e.json"],
     "holds non-finite weights"),
    ("extend", ["--ckpt", "{runs}/flipbyte", "--results_dir", "{root}"], "crc32 differs"),
    ("llama", ["--gguf", "{root}/whole.gguf", "--check", "{runs}/nan"], "holds non-finite weights"),
    fix(("llama", ["--gguf", "{root}/whole.gguf", "--check", "{runs}/tern"],
     "whole.gguf was exported from another checkpoint than"), "--check={runs}/good"),  # its model differs: body 'float' vs 'ternary'
    fix(("llama", ["--gguf", "{root}/whole.gguf", "--check", "{runs}/other"], "(the same shape, other weights); give --check"), "--check={runs}/good"),
    ("compare", ["--seeds", "0"], "--seeds must be at least 1"),
    # a file of the user's, given as any writer's output: refused, as runs and datasets are
    fix(("evaluate", [*EVALUATE, "--out", "{root}/notes.json"],
     "notes.json exists and this command did not write it; give --out a new path, or move that file away first"), "--out={root}/fresh.json"),
    fix(("export", ["--ckpt", "{runs}/tern", "--out", "{root}/notes.pt"], "notes.pt exists and this command did not write it"), "--out={root}/fresh.pt"),
    fix(("export", ["--ckpt", "{runs}/good", "--format", "gguf", "--out", "{root}/notes.gguf"], "did not write it"), "--out={root}/fresh.gguf"),
    fix(("bench", ["--out", "{root}/notes.md"], "notes.md exists and this command did not write it"), "--out={root}/fresh.md", *BENCH),
    fix(("extend", ["--ckpt", "{runs}/good", "--results_dir", "{root}", "--name", "notes"], "notes.md exists and this"), "--name=fresh"),
    fix(("compare", ["--results_dir", "{root}", "--name", "notes", "--runs_dir", "{runs}/cmp", *TRAIN[:2]],
     "notes.md exists and this command did not write it; give --results_dir or --name a new path"), "--name=fresh", *STUDY),
    # settings that make no sense together, and inputs that once gave tracebacks
    ("train", [*TRAIN, "--min_lr=1e-2", "--learning_rate=1e-3"], "min_lr must be at most learning_rate (0.001)"),
    ("train", [*TRAIN, "--out_dir={data}"], "where prepare.py writes; give the run a folder"),
    ("train", [*TRAIN, "--out_dir={data}/tiny/run"], "or inside its dataset or its sources' cache, where prepare.py"),
    ("train", [*TRAIN, "{root}/latin1.py"], "latin1.py is not UTF-8 (near byte 14); save it as UTF-8"),
    ("train", [*TRAIN, "--dataset=emptybin"], "emptybin/train.bin holds no token; prepare the data again"),
    ("train", [*TRAIN, "--dataset=zerobytes"], "its train split has no bytes or no tokens); prepare the data again"),
    ("extend", ["--ckpt", "{runs}/good", "--results_dir", "{root}", "--data_dir", "{data}", "--adapt_lr", "nan"], "--adapt_lr must be"),
    ("extend", ["--ckpt", "{runs}/good", "--results_dir", "{root}", "--data_dir", "{data}", "--adapt_lr", "-1"], "--adapt_lr must be"),
    ("extend", ["--ckpt", "{runs}/good", "--results_dir", "{root}", "--data_dir", "{data}", "--batch_size", "0"], "--batch_size must be"),
    fix(("extend", ["--ckpt", "{runs}/good", "--results_dir", "{root}", "--data_dir", "{data}", "--new_tokens", "100000"],
     "the held-out text gives only"), "--new_tokens=14"),
    ("prepare", ["--input", "{root}", "--name", "adir", "--out_dir", "{data}"], "(Is a directory); nothing was written"),
    # names that would leave their folder
    ("prepare", ["--input", "{root}/small.txt", "--name", "../escape", "--out_dir", "{data}"], "--name must be a plain name"),
    ("compare", ["--results_dir", "{root}", "--name", "../x", "--runs_dir", "{runs}/cmp", *TRAIN[:2]],
     "--name must be a plain name (it makes <results_dir>/<name>.md"),
    ("extend", ["--ckpt", "{runs}/good", "--results_dir", "{root}", "--name", ".."], "--name must be a plain name"),
    # a mark that only starts like ours, an old pattern any JSON can match, a folder ours only by its file names
    fix(("evaluate", [*EVALUATE, "--out", "{root}/near.json"],
     "near.json exists and this command did not write it"), "--out={root}/fresh.json"),
    fix(("evaluate", [*EVALUATE, "--out", "{root}/task.json"],
     "task.json exists and this command did not write it"), "--out={root}/fresh.json"),
    fix(("evaluate", [*EVALUATE, "--out", "{root}/ckpt.json"],
     "ckpt.json exists and this command did not write it"), "--out={root}/fresh.json"),
    fix(("extend", ["--ckpt", "{runs}/good", "--results_dir", "{root}", "--name", "near2"], "near2.md exists and this"), "--name=fresh"),
    fix(("compare", ["--results_dir", "{root}", "--name", "near3", "--runs_dir", "{runs}/cmp", *TRAIN[:2]],
     "near3.md exists and this command did not write it"), "--name=fresh", *STUDY),
    fix(("export", ["--ckpt", "{runs}/good", "--out", "{root}/userhf"],
     "userhf holds files this command did not write (README.md, config.json: no tablefree.json"), "--out={root}/fresh-hf"),
    fix(("prepare", ["--input", "{root}/small.txt", "--out_dir", "{root}", "--name", "usermeta"],
     "usermeta holds files this command did not write (meta.json: no meta.json of python prepare.py's)"), "--name=fresh"),
    fix(("prepare", ["--input", "{root}/small.txt", "--out_dir", "{root}", "--name", "userbins"],
     "userbins holds files this command did not write (counts.npy, train.bin"), "--name=fresh"),
    # the user's notes that quote a command, the user's own matplotlib figure: still the user's
    fix(("evaluate", [*EVALUATE, "--out", "{root}/quoted.json"],
     "quoted.json exists and this command did not write it"), "--out={root}/fresh.json"),
    fix(("extend", ["--ckpt", "{runs}/good", "--results_dir", "{root}", "--name", "quoted"], "quoted.md exists and this"), "--name=fresh"),
    fix(("compare", ["--results_dir", "{root}", "--name", "README", "--runs_dir", "{runs}/cmp", *TRAIN[:2]],
     "README.md exists and this command did not write it"), "--name=fresh", *STUDY),
    fix(("bench", ["--out", "{root}/quoted.md"], "quoted.md exists and this command did not write it"), "--out={root}/fresh.md", *BENCH),
    fix(("plot", ["{runs}/good", "--out", "{root}/figure.png"], "figure.png exists and this command did not write it"), "--out={root}/fresh.png"),
    fix(("export", ["--ckpt", "{runs}/good", "--remote_code", "--out", "{root}/theirs"],
     "theirs holds files this command did not write (pytorch_model.bin)"), "--out={root}/fresh-hf"),
    fix(("export", ["--ckpt", "{runs}/good", "--format", "gguf", "--remote_code"], "--remote_code is for --format hf, not gguf"), "-remote_code"),
    fix(("plot", ["{runs}/good", "--out", "{root}/x.jpg"], "x.jpg is not a .png path; tools.plot writes PNG images"), "--out={root}/fresh.png"),
    ("plot", ["{runs}/blank"], "blank/log.jsonl holds no loss yet"),
    ("prepare", sft("latin1"), "20 not UTF-8); convert the file to UTF-8"),
    ("prepare", sft("array"), "not JSON); write one {\"prompt\": ..., \"response\": ...} object per line (JSON Lines"),
    ("prepare", sft("keys"), "20 no prompt or response); give every row a \"prompt\" and a \"response\" string"),
    ("prepare", [*sft("long"), "--block_size", "16"], "20 longer than block_size); give a larger --block_size"),
    ("compare", ["--runs_dir", "{data}/tiny", "--seeds", "1", *TRAIN[:2]], "--runs_dir"),  # holds a dataset; give ...
    ("prepare", ["--input", "{root}/small.txt", "--out_dir", "{data}", "--tokenizer", "gpt2", "--tokenizer_from",
                 "{data}/tiny"], "so --tokenizer gpt2 would go unused; drop one of them"),
    ("prepare", ["--input", "{root}/small.txt", "--out_dir", "{data}", "--tokenizer_from", "{runs}/good"],
     "good is a run, not a prepared dataset; give the dataset it trained on: --tokenizer_from"),
    ("compare", ["--inputs", "learned,foo"], "--inputs must be a comma-separated list of learned, binary, affine"),
    ("compare", ["--runs_dir", "{runs}/cmp", "--n_head=3"], "must split into n_head=3 heads"),
    ("compare", ["--runs_dir", "{runs}/cmp", "--results_dir", "{root}/latin1.txt/results", *TRAIN[:2]],
     "cannot write to --results_dir"),
]


@pytest.mark.parametrize("script, argv, message", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_bad_input_is_one_line_and_changes_nothing(world, script, argv, message, capsys):
    argv = filled(argv, world)
    before = snapshot(world)
    with pytest.raises(SystemExit) as exit:
        SCRIPTS[script].main(argv)
    text = str(exit.value)
    assert exit.value.code not in (0, None)
    assert text.startswith(f"{script}.py: error: ") and "\n" not in text and message in text + "$", text  # $: the end
    assert capsys.readouterr().err == ""  # nothing else: no traceback, no usage block
    assert snapshot(world) == before
    assert not (world / "pwned").exists()


def with_fix(argv, steps, world):
    """argv after the steps of a suggested fix (fix()), its placeholders filled; the files a step removes go."""
    argv = list(argv)
    for step in filled(steps, world):
        if step.startswith("rm "):
            Path(step[3:]).unlink()
            continue
        key = step.lstrip("-").split("=")[0]
        at = [i for i, a in enumerate(argv) if a.split("=")[0] == f"--{key}"]
        for i in reversed(at):  # --key=value, or --key and its value (argparse's form)
            del argv[i:i + (1 if "=" in argv[i] or i + 1 == len(argv) or argv[i + 1].startswith("--") else 2)]
        if step.startswith("--"):
            argv.append(step)
    return argv


@pytest.mark.parametrize("script, argv", list(FIXES), ids=[f"{s}-{i}" for i, (s, _) in enumerate(FIXES)])
def test_every_suggested_fix_gets_past_its_error(world, script, argv, tmp_path, capsys):
    """The command as its error told the user to change it, in a copy of the world (a fix may write): that error
    is gone. It may end in another, later one (a fixed --out may still meet another case's broken input)."""
    message = next(m for s, a, m in CASES if (s, tuple(a)) == (script, argv))
    copy = shutil.copytree(world, tmp_path / "world", symlinks=True)
    short = ["--max_iters=2", "--eval_interval=2", "--eval_iters=1"] if script == "train" else []  # seconds, not hours
    fixed = with_fix([*short, *filled(argv, copy)], FIXES[script, argv], copy)
    try:
        SCRIPTS[script].main(fixed)
    except SystemExit as exit:
        assert exit.code in (0, None) or message.rstrip("$") not in str(exit), (fixed, str(exit))


def flags_of(script, capsys):
    """The --flags a script accepts, read from its --help (and train.py's settings, which the
    experiments pass on to every run)."""
    try:
        SCRIPTS[script].main(["--help"])
    except SystemExit:  # argparse exits after printing; train.py returns
        pass
    flags = set(re.findall(r"--([a-z_]+)", capsys.readouterr().out))
    return flags | {"help"} | (set(train.DEFAULTS) if script in ("train", "compare") else set())


def test_every_fix_names_a_real_flag(world, capsys):
    """A one-line error that tells the user to change --something names a flag that script has."""
    known = {script: flags_of(script, capsys) for script in SCRIPTS}
    unfollowed = []
    for script, argv, message in CASES:
        argv = filled(argv, world)
        with pytest.raises(SystemExit) as exit:
            SCRIPTS[script].main(argv)
        text = str(exit.value).split(": error: ", 1)[1]
        # a fix may be another command (`python prepare.py --name x`, up to a `;` or `)`): its flags are that script's
        commands = list(re.finditer(r"python (?:-m )?([\w./]+)([^;)]*)", text))
        typed = {a[2:].split("=")[0] for a in argv if a.startswith("--")}  # quoted back, not suggested
        parts = [(script, re.sub(r"python (?:-m )?[\w./]+[^;)]*", "", text))]
        parts += [(re.sub(r"\.py$", "", c[1]).split("/")[-1].split(".")[-1], c[2]) for c in commands]
        for owner, piece in parts:
            named = set(re.findall(r"--([a-z_]+)", piece)) - (typed if owner == script else set())
            assert named <= known[owner], (script, argv, text, owner, named - known[owner])
        # a fix in this command's own flags (give --x, drop --x, or --force, with --init_from=...): followed by a test
        if re.search(r"\b(give|drop|add|or|with|instead:) --[a-z_]+", parts[0][1]):
            unfollowed += [] if (script, tuple(argv)) in {(s, tuple(filled(a, world))) for s, a in FIXES} else [text]
    assert unfollowed == [], "\n".join(unfollowed)


def test_as_real_processes_one_line_on_stderr(world):
    """One case per script through the command line, as a user meets them (and torchrun's ranks)."""
    for script, argv, message in [next(case for case in CASES if case[0] == script) for script in SCRIPTS]:
        argv = filled(argv, world)
        done = subprocess.run([sys.executable, *command(script), *argv], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 1 and done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert len(CASES) >= 30


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_answers_help(script, capsys):
    module = SCRIPTS[script]
    for flag in ("--help", "-h"):
        try:
            module.main([flag])
        except SystemExit as exit:  # argparse exits 0 after printing
            assert exit.code == 0
        printed = capsys.readouterr()
        assert printed.out.startswith("usage:") and printed.err == ""
        description = printed.out.split("\n\n")[1]  # after the usage block: whole sentences, not a cut line
        assert description.rstrip().endswith((".", "?", ":")), description
    if script == "train":  # the settings, their defaults and the comments from the top of train.py
        assert re.search(r"^  --grad_clip=1\.0 +0 disables clipping$", printed.out, re.MULTILINE)
        assert all(f"--{key}=" in printed.out for key in train.DEFAULTS)


def test_a_reader_that_stops_early_gets_no_traceback(world):
    """`python sample.py | head`: the pipe closes mid-sample; sample.py stops without a traceback."""
    child = subprocess.Popen([sys.executable, "sample.py", "--ckpt", str(world / "runs" / "good"), "--num_samples", "50",
                              "--max_new_tokens", "300", "--temperature", "1.0"],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdout.read(10)
    child.stdout.close()
    stderr = child.stderr.read().decode()
    assert child.wait() == 1 and stderr.startswith("sampling ") and stderr.count("\n") == 1, stderr  # what it loaded


def test_a_reader_that_stops_early_gets_no_traceback_from_llama_cpp(world):
    """`python -m tools.llama ... | head -c 0`: no BrokenPipeError, exit status 1. The pipe is closed before
    the child has started (reading two bytes first raced it: 30 tokens fit in the pipe's buffer, and on a
    fast machine the child had written them all and exited 0 before the close)."""
    pytest.importorskip("llama_cpp")
    child = subprocess.Popen([sys.executable, "-m", "tools.llama", "--gguf", str(world / "whole.gguf"), "--start", "a",
                              "--max_new_tokens", "30", "--temperature", "1.0"], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    child.stdout.close()
    stderr = child.stderr.read().decode()
    assert child.wait() == 1 and "Traceback" not in stderr and "Error" not in stderr, stderr


def test_llama_check_fits_a_context_below_48_tokens(world):
    """--check decodes 16 + 32 tokens where the context allows: in block_size 32, 16 + 16 (no traceback)."""
    pytest.importorskip("gguf")
    pytest.importorskip("llama_cpp")
    same, first, gaps = llama.check(llama.parse_args(["--gguf", str(world / "whole.gguf"), "--check",
                                                      str(world / "runs" / "good"), "--data_dir", str(world / "data")]))
    assert len(first) == 8 and all(0 <= f <= 16 for f in first) and len(gaps) == 8 - same


@pytest.mark.parametrize("script", ["prepare", "train", "sample", "evaluate", "extend", "export", "llama", "plot",
                                    "compare"])
def test_ctrl_c_while_a_script_starts_is_one_line(script, tmp_path):
    """Ctrl-C 0.3 s in, while torch is still loading: one line and exit status 1, no traceback
    (common.interrupt_quietly), and nothing written in the folder it runs from."""
    child = subprocess.Popen([sys.executable, *command(script), "--help"], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    if child.returncode == 0:
        pytest.skip(f"{script} finished its imports within 0.3 s here")
    if child.returncode == -signal.SIGINT and not err:  # before Python's own handler: not yet our code
        pytest.skip(f"the interpreter had not started {script} within 0.3 s here (a loaded machine)")
    # while the imports load, or (a loaded machine's timing) just after, inside user_errors: one line either way
    assert child.returncode == 1 and err.count("\n") == 1 and (
        err == f"{script}.py: interrupted while starting; nothing was written\n"
        or err.startswith(f"{script}.py: interrupted; ")), err


def test_ctrl_c_inside_an_import_that_catches_it_is_still_one_line():
    """A C extension's import that fails on Ctrl-C comes back as its ImportError (numpy's under torch's,
    seen in CI): so interrupt_quietly's handler ends the process itself, and no except clause on the way
    out turns the interrupt into a traceback or carries on."""
    code = ("import os, signal, time\n"
            "from tablefree.common import interrupt_quietly\n"
            "interrupt_quietly('__main__', 'x.py')\n"
            "try:\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "    time.sleep(5)\n"
            "except BaseException as e:\n"
            "    raise ImportError('cannot load module more than once per process') from e\n"
            "print('carried on')\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (1, "", "x.py: interrupted while starting; nothing was written\n")


@pytest.mark.parametrize("script", ["train", "prepare", "plot", "extend"])
def test_a_closed_pipe_ends_quietly_and_keeps_the_work(world, script, tmp_path):
    """`python <script> ... | head -c 20`: no traceback, nothing of BrokenPipeError; a run's checkpoint, a dataset, a
    plot, a report are whole (or were never begun)."""
    argv = {"train": ["train.py", *filled(TRAIN, world), f"--out_dir={tmp_path / 'run'}", "--max_iters=4",
                      "--eval_interval=2"],
            "prepare": ["prepare.py", "--input", str(tmp_path / "text.txt"), "--name", "piped", "--out_dir",
                        str(tmp_path), "--vocab_size", "300"],
            "plot": ["-m", "tools.plot", str(world / "runs" / "good"), "--out", str(tmp_path / "loss.png")],
            "extend": ["-m", "tools.extend", "--ckpt", str(world / "runs" / "good"), "--new_tokens", "4",
                       "--results_dir", str(tmp_path)]}[script]
    (tmp_path / "text.txt").write_text("".join(f"Line {i} of a small text to prepare.\n" for i in range(3000)))
    done = subprocess.run(["bash", "-c", " ".join(map(shlex.quote, [sys.executable, *argv])) + " | head -c 20"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr and "Exception ignored" not in done.stderr, \
        done.stderr[-2000:]
    assert len(done.stdout) <= 20
    whole = {"train": tmp_path / "run" / "ckpt.pt", "prepare": tmp_path / "piped" / "meta.json",
             "plot": tmp_path / "loss.png", "extend": tmp_path / "extension.md"}[script]
    assert whole.exists() or not whole.with_name(whole.name + ".tmp").exists()  # whole, or never begun
