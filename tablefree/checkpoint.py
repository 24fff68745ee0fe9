"""The run directory: checkpoints written atomically and loaded safely (the one loader train,
sample and eval share), config.json and the log.jsonl every run appends to.

A checkpoint is a dict of tensors and plain values (so `torch.load(weights_only=True)` can
read it without running any pickled code): the raw model's state_dict, its GPTConfig, the
optimizer state, the run settings, the step, and the tokenizer, so that it is all a run
directory needs to resume, sample or evaluate.
"""

import fcntl
import hashlib
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from model import GPT, GPTConfig, Rotary, make_input
from tablefree.common import UserError, append_line, holds_work, write_atomic
from tablefree.configurator import MODEL_KEYS
from tablefree import kernel
from tablefree.ternary import BitLinear, PackedTernaryLinear, absmean_ternary, pack_ternary

CKPT_NAME = "ckpt.pt"
FIXED_BY_CHECKPOINT = (*MODEL_KEYS, "dataset", "seed")  # a resumed run cannot change these
# the run's recipe (and whether it compiles, which can change its numbers): a resumed run keeps the
# checkpoint's unless one is given, and says so when it is
RECIPE = ("batch_size", "gradient_accumulation_steps", "max_iters", "learning_rate", "input_lr_scale", "min_lr",
          "warmup_iters", "lr_decay_iters", "decay_lr", "weight_decay", "beta1", "beta2", "grad_clip", "eval_interval",
          "eval_iters", "log_interval", "always_save_checkpoint", "nonfinite", "compile")


def save_checkpoint(state, out_dir):
    """Write state to out_dir/ckpt.pt atomically: the old file stays until the new one is whole."""
    write_atomic(Path(out_dir) / CKPT_NAME, lambda f: torch.save(state, f))


def read_log(path):
    """The records of a log.jsonl. A line that is not JSON (torn by a crash mid-write, or
    damaged) is dropped with a warning naming it; every good line is kept."""
    records, dropped = [], []
    for number, line in enumerate(Path(path).read_bytes().splitlines(), start=1):
        try:
            record = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            dropped.append(number)
            continue
        if isinstance(record, dict) and isinstance(record.get("iter"), int):
            records.append(record)
        else:
            dropped.append(number)
    if dropped:
        print(f"warning: {path}: dropped {len(dropped)} unreadable line(s): "
              f"{', '.join(map(str, dropped[:10]))}", file=sys.stderr)
    return records


def refuse_to_overwrite(out, overwrite):
    """A new run must not destroy the run already in out (unless train.py's overwrite is set), and
    never writes its files into a dataset."""
    work = holds_work(out)
    if work == "a dataset":
        raise UserError(f"{out} holds a prepared dataset; choose another --out_dir for the run")
    if work == "a run" and not overwrite:
        raise UserError(f"{out} already holds a run; continue it with --init_from=resume, "
                        f"choose another --out_dir, or replace it with --overwrite=True")


class RunDir:
    """A run directory's config.json and log.jsonl, and the lock that makes its run the only writer.

    A new run writes config.json at once. A resumed one changes nothing until it first appends to
    the log, which comes after its first good step: then it writes its config.json and cuts the log
    back to the checkpoint's step (lines an interrupted run wrote after it), so a resume that fails
    or is refused leaves the run as it was. The lock (flock on the folder itself: no file to leave
    behind, and the kernel releases it when the process ends, however it ends) refuses a second
    train.py in the same folder."""

    def __init__(self, out, iter_num, record, resumed):
        self.out, self.iter_num, self.record, self.resumed = Path(out), iter_num, record, resumed
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            self.lock = os.open(self.out, os.O_RDONLY)  # held open, so locked, for the process's life
        except OSError as e:
            raise UserError(f"cannot write to out_dir {out}: {e.strerror}; choose a writable --out_dir") from None
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise UserError(f"another train.py is writing to {out}; wait for it to finish (or stop it), or give "
                            f"this run another --out_dir") from None
        self.started = False
        if not resumed:
            self.start()

    def start(self):
        write_atomic(self.out / "config.json", json.dumps(self.record, indent=2))
        path = self.out / "log.jsonl"
        if path.exists():  # a resumed run keeps what was logged up to its checkpoint; a new one nothing
            kept = [r for r in read_log(path) if r["iter"] <= self.iter_num] if self.resumed else []
            write_atomic(path, "".join(json.dumps(r) + "\n" for r in kept))
        self.started = True

    def append(self, record):
        if not self.started:
            self.start()
        append_line(self.out / "log.jsonl", json.dumps(record))

    def close(self):
        """Release the lock (the run is over, or this process goes on to other work)."""
        os.close(self.lock)


def interrupted(iter_num, out):
    """The one line Ctrl-C ends a run with: where it stopped and how to go on."""
    if not (Path(out) / "ckpt.pt").exists():
        return f"interrupted at step {iter_num}, before the first checkpoint; start the run again"
    return (f"interrupted at step {iter_num}; {out}/ckpt.pt holds the last evaluation's step: continue with "
            f"python train.py --init_from=resume --out_dir={out}")


def find_checkpoint(path, flag="--ckpt"):
    """The checkpoint file for a run directory or a file path; flag: the option that named it."""
    path = Path(path)
    if path.is_dir():
        path = path / CKPT_NAME
    if not path.is_file():
        raise UserError(f"no checkpoint at {path}; train first (python train.py ...) "
                        f"or give {flag} a run directory that has one")
    return path


def load_checkpoint(path, device="cpu", flag="--ckpt"):
    """The checkpoint dict from a run directory or file, read with weights_only=True."""
    path = find_checkpoint(path, flag)
    try:
        ckpt = torch.load(path, map_location=device, weights_only=True)
    except Exception as e:  # truncated zip, garbage bytes, or a pickle that wants to run code
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]  # an empty file: no message
        raise UserError(f"{path} is not a loadable checkpoint ({reason}); it is corrupt, "
                        f"truncated or unsafe") from None
    missing = {"model", "model_config", "tokenizer"} - set(ckpt if isinstance(ckpt, dict) else ())
    if missing:
        raise UserError(f"{path} is not a tablefree checkpoint "
                        f"(missing {', '.join(sorted(missing))})")
    return ckpt


def read_code_source(path, vocab_size):
    """The V x d table frozen codes are derived from: a learned run's input table (its run
    directory or ckpt.pt), or a 2-D tensor saved with torch.save or numpy.save (.npy)."""
    path = Path(path)
    if path.suffix == ".npy":
        try:
            source = torch.from_numpy(np.load(path, allow_pickle=False))
        except (OSError, ValueError) as e:
            raise UserError(f"cannot read --codes_from {path} as a .npy array ({str(e)[:120]})") from None
    elif path.is_dir() or not path.is_file() or path.name == CKPT_NAME:
        ckpt = load_checkpoint(path, flag="--codes_from")
        if ckpt["model_config"]["input"] != "learned":
            raise UserError(f"--codes_from {path} was trained with input={ckpt['model_config']['input']!r}: it "
                            f"has no table to derive codes from; give a learned run")
        source = ckpt["model"]["wte.weight"]
    else:
        try:
            source = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:
            raise UserError(f"cannot read --codes_from {path} as a saved tensor ({str(e).strip()[:120]})") from None
    if not isinstance(source, torch.Tensor) or source.dim() != 2 or not source.is_floating_point():
        raise UserError(f"--codes_from {path} is not a 2-D float table (V x d); save one tensor of that shape")
    if source.size(0) != vocab_size:
        raise UserError(f"--codes_from {path} has {source.size(0)} rows but the vocabulary has {vocab_size} "
                        f"tokens; derive the codes from a table of this dataset's tokenizer")
    if not torch.isfinite(source).all():
        raise UserError(f"--codes_from {path} holds non-finite values; give a finite table")
    if (source == source[0]).all():  # no principal component: every token would get one code
        raise UserError(f"--codes_from {path} has every row equal, so all tokens would share one code; give a "
                        f"trained table")
    return source


def build_model(ckpt, kernels=True):
    """The GPT a checkpoint (or a packed export, tools/export.py) describes, with its weights loaded.
    kernels: its Linears run one-row inference in the C kernel where there is one (kernel.fast_linears;
    train.py, which only trains, leaves them as they are)."""
    try:
        config = GPTConfig(**ckpt["model_config"])
        if "ternary" in ckpt:
            if "sha256" in ckpt and tensors_sha256(ckpt["model"], ckpt["ternary"]) != ckpt["sha256"]:
                raise UserError("the packed file's weights are not the ones it was written with (sha256 differs): "
                                "it is damaged; export it again from its checkpoint")
            model = build_packed(config, ckpt)
            return kernel.fast_linears(model) if kernels else model
        model = GPT(config)
        model.load_state_dict(ckpt["model"])
    except (TypeError, ValueError, RuntimeError, KeyError) as e:
        reason = str(e).splitlines()[0][:200]
        raise UserError(f"checkpoint weights do not fit its model config: {reason}") from None
    return kernel.fast_linears(model) if kernels else model


FORMAT = "tablefree-ternary-1"
# frozen's derivation (its source's mean and components, float64) codes new words, which an export never
# adds (extend the checkpoint): left out of packed files, 2.6 MB at the frozen-code paper's shape
DERIVATION = {"wte.mean", "wte.components"}


def packed_ternary(model, ckpt):
    """The packed file's contents for a trained model with a ternary body (tools/export.py writes it;
    build_packed reads it)."""
    if model.config.body != "ternary":
        raise UserError(f"the checkpoint's body is {model.config.body!r}; only a ternary body packs to 2 bits "
                        f"(train one: python train.py ... --body=ternary)")
    layers, packed_names = {}, set()
    for name, module in model.named_modules():
        if isinstance(module, BitLinear):
            w_t, gamma = absmean_ternary(module.weight.detach().float())
            layers[name] = {"packed": pack_ternary(w_t), "in_features": module.in_features, "gamma": gamma}
            packed_names.add(f"{name}.weight")
    params = {name for name, _ in model.named_parameters()}
    rest = {name: (t.half() if name in params and t.dim() >= 2 and t.is_floating_point() else t)
            for name, t in model.state_dict().items() if name not in packed_names | DERIVATION | tied_head(model.config)}
    return {"format": FORMAT, "model_config": ckpt["model_config"], "tokenizer": ckpt["tokenizer"],
            "settings": ckpt.get("settings", {}), "iter_num": ckpt.get("iter_num", 0), "model": rest, "ternary": layers,
            "sha256": tensors_sha256(rest, layers)}


def tied_head(config):
    """A tied head's name, whose weight a packed file stores once, as the input table's."""
    return {"lm_head.weight"} if config.tie_weights else set()


def tensors_sha256(rest, layers):
    """sha256 of a packed file's weights (every tensor's name, dtype, shape and bytes, in name order):
    written with the file and checked when it is read, so flipped bytes are an error, not nan."""
    digest = hashlib.sha256()
    items = [*rest.items(), *((f"{name}.{key}", value) for name, layer in layers.items() for key, value in layer.items())]
    for name, value in sorted(items, key=lambda item: item[0]):
        digest.update(name.encode())
        if isinstance(value, torch.Tensor):
            digest.update(f"{value.dtype}{tuple(value.shape)}".encode())
            digest.update(value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        else:
            digest.update(repr(value).encode())
    return digest.hexdigest()


def build_packed(config, ckpt):
    """A GPT from a packed ternary export whose body never exists in float: the model is built
    on the meta device (shapes, no memory), each ternary Linear is replaced by a packed one from
    its 2-bit weights (kept at 2 bits for the C kernel, else unpacked to int8; one line on stderr
    says which), and the rest is loaded in float32 from the file."""
    with torch.device("meta"):
        model = GPT(config)
    model.wte = make_input(config)  # real modules for the parts with derived (unsaved) buffers
    model.rotary = Rotary(config.n_embd // config.n_head, config.block_size, config.rope_base)
    rest = {k: v.float() if v.dtype == torch.float16 else v for k, v in ckpt["model"].items()}
    for name, layer in ckpt["ternary"].items():
        parent, child = name.rsplit(".", 1)
        setattr(model.get_submodule(parent), child, PackedTernaryLinear(
            layer["packed"], layer["in_features"], layer["gamma"], bias=rest.pop(f"{name}.bias", None), lib=kernel.kernel()))
    int8_buffers = {f"{name}.{buffer}" for name in ckpt["ternary"] for buffer in ("weight", "codes", "gamma")}
    if set(rest) & int8_buffers:
        raise ValueError("the packed file holds a float copy of a ternary layer's weight")
    missing, unexpected = model.load_state_dict(rest, strict=False, assign=True)
    if unexpected or any(k not in int8_buffers | DERIVATION | tied_head(config) for k in missing):
        raise ValueError(f"the packed file does not fit its config (missing {missing[:3]}, unexpected {unexpected[:3]})")
    for name in DERIVATION & set(missing):  # not placeholders that would code new words wrongly: nothing
        setattr(model.wte, name.split(".")[1], None)
    if config.tie_weights:
        model.lm_head.weight = model.wte.weight
    if any(t.is_meta for t in [*model.parameters(), *model.buffers()]):
        raise ValueError("the packed file leaves part of the model without weights")
    print(f"ternary matmul: {kernel.describe()}", file=sys.stderr)
    return model


def model_state(model):
    """The model half of a checkpoint: raw weights (never a compile or DDP wrapper) and config."""
    return {"model": model.state_dict(), "model_config": asdict(model.config)}


def finetune_from(s, given, out):
    """(the checkpoint s.init_from names, what the new run records of it) for a new run in out from its weights
    (fine-tuning): step 0, a fresh optimizer, the new run's own schedule and data. The model
    settings become the checkpoint's (one given with another value is an error: the weights fix
    the architecture), except dropout, which acts only in training and may be set anew."""
    if not Path(s.init_from).exists():
        raise UserError(f"init_from={s.init_from!r} is not 'scratch', 'resume' or a trained run (no such folder or "
                        f"file); give one of them")
    path = find_checkpoint(s.init_from, "--init_from")
    if Path(out).resolve() == path.parent.resolve():
        raise UserError(f"--out_dir {out} holds the run being fine-tuned; give the new run its own --out_dir")
    ckpt = load_checkpoint(path, "cpu", flag="--init_from")
    if "ternary" in ckpt:
        raise UserError(f"{path} is a packed export, which keeps no float weights to train; fine-tune from the "
                        f"run's ckpt.pt")
    recorded = asdict(GPTConfig(**ckpt["model_config"]))  # fields added since: their defaults
    for key in MODEL_KEYS:
        trained, asked = recorded[key], getattr(s, key)
        if key == "dropout" and (given is None or key in given):
            ckpt["model_config"]["dropout"] = asked
        elif asked != trained and (given is None or key in given):
            raise UserError(f"{path} was trained with {key}={trained!r}, not {asked!r}; a fine-tuned model keeps "
                            f"the checkpoint's architecture: drop --{key}")
        else:
            setattr(s, key, trained)
    return ckpt, {"checkpoint": str(path), "iter_num": ckpt.get("iter_num"),
                  "dataset": ckpt.get("settings", {}).get("dataset")}


def same_tokenizer(ckpt, source, tokenizer, data, data_dir):
    """Refuse data prepared with another tokenizer than the fine-tuned model's (tokenizer.tokenizer_state:
    its entry and rank file, so two BPEs of one size still differ); source: finetune_from's record."""
    if ckpt["tokenizer"] != tokenizer:
        ours, theirs = ckpt["tokenizer"]["info"], tokenizer["info"]
        raise UserError(f"{source['checkpoint']} was trained with a {ours['name']} tokenizer of {ours['vocab_size']:,} "
                        f"tokens (data {source['dataset']!r}) but {data} was prepared with another ({theirs['name']}, "
                        f"{theirs['vocab_size']:,} tokens); prepare it with the model's: python prepare.py ... "
                        f"--tokenizer_from {Path(data_dir) / str(source['dataset'])}")


def resume_from(s, given, out):
    """(the checkpoint in out, the notices to print) after fitting the settings s to it.

    The checkpoint fixes the architecture, the dataset and the seed: one of them given (in
    `given`, or every key when given is None) with another value is an error, the others take
    the checkpoint's values. The recipe (RECIPE: batch, schedule, optimizer, evaluation) is the
    checkpoint's too unless given; a given change is allowed and comes back as a notice, and
    max_iters may grow but not fall below the step reached. The rest (where and how the run
    runs: out_dir, data_dir, device, dtype, peak_flops) follows the command."""
    ckpt = load_checkpoint(out, "cpu", flag="--out_dir")
    missing = {"settings", "optimizer", "iter_num", "best_val_loss", "elapsed_s"} - set(ckpt)
    if missing:
        raise UserError(f"{out}/ckpt.pt has no {', '.join(sorted(missing))}: it can be sampled and "
                        f"evaluated but not resumed; start a new run in another out_dir")
    recorded = {**ckpt["settings"], **asdict(GPTConfig(**ckpt["model_config"]))}  # fields added since: defaults
    for key in FIXED_BY_CHECKPOINT:
        trained, asked = recorded[key], getattr(s, key)
        if asked != trained and (given is None or key in given):
            raise UserError(f"{out}/ckpt.pt was trained with {key}={trained!r}, not {asked!r}; "
                            f"drop --{key} or start a new run in another out_dir")
        setattr(s, key, trained)
    notices = []
    for key in RECIPE:
        trained, asked = recorded.get(key, getattr(s, key)), getattr(s, key)  # a setting added since: as asked
        if given is not None and key not in given:
            setattr(s, key, trained)
        elif asked != trained:
            notices.append(f"resuming with {key} {asked!r} instead of the run's {trained!r}")
    if s.max_iters < ckpt["iter_num"]:
        raise UserError(f"{out}/ckpt.pt is at step {ckpt['iter_num']}, past max_iters={s.max_iters}; give "
                        f"--max_iters={ckpt['iter_num']} or more, or drop --max_iters")
    return ckpt, notices
