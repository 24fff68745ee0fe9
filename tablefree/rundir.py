"""Where a run starts when not from scratch: resumed from its own checkpoint (and the rules of what a
resume may change), or fine-tuned from another run's; and a run's log.jsonl read back. train.py
imports it only for --init_from=resume or a run to fine-tune (its own RunDir writes the folder).
"""

import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace

import torch

from model import GPTConfig
from tablefree.checkpoint import find_checkpoint, load_checkpoint
from tablefree.common import UserError, leaves_of, refuse_to_overwrite
from tablefree.configurator import MODEL_KEYS

ELSEWHERE = "--init_from=scratch --out_dir=<a new folder>"  # a new run, where a resume cannot go on


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


# ---- where a run starts: from scratch, resumed from its checkpoint, or fine-tuned from another run ----

FIXED_BY_CHECKPOINT = (*MODEL_KEYS, "dataset", "seed")  # a resumed run cannot change these
# the run's recipe (and whether it compiles, which can change its numbers): a resumed run keeps the
# checkpoint's unless one is given, and says so when it is
RECIPE = ("batch_size", "gradient_accumulation_steps", "max_iters", "learning_rate", "input_lr_scale", "min_lr",
          "warmup_iters", "lr_decay_iters", "decay_lr", "weight_decay", "beta1", "beta2", "grad_clip", "eval_interval",
          "eval_iters", "log_interval", "always_save_checkpoint", "nonfinite", "compile")


@dataclass
class Start:
    """What a run starts from. settings: the run's; ckpt: the checkpoint (None from scratch);
    notices: lines to print (a resumed run's recipe changes); finetuned_from: the source run's
    record (fine-tuning, and runs resumed from one)."""
    settings: SimpleNamespace
    ckpt: dict = None
    notices: list = field(default_factory=list)
    finetuned_from: dict = None

    @property
    def resumed(self):
        return self.settings.init_from == "resume"

    def restore(self, optimizer):
        """(step, best val loss, the run's start time counting the runs it resumes): a resumed run's, with
        its optimizer state loaded, else a new run's. The checkpoint is let go: its weights are in the model."""
        ckpt = self.ckpt if self.resumed else {}
        self.ckpt = None
        if ckpt:
            optimizer.load_state_dict(ckpt["optimizer"])
        return (ckpt.get("iter_num", 0), ckpt.get("best_val_loss", float("inf")),
                time.time() - ckpt.get("elapsed_s", 0.0))

    def check_data(self, data):
        """Refuse a dataset (data.Dataset) other than the one this start's weights were trained with."""
        if self.ckpt is None:
            return
        ours, theirs = self.ckpt["tokenizer"], data.tokenizer
        out = self.settings.out_dir
        if self.resumed and self.ckpt["model_config"]["vocab_size"] != data.vocab_size:
            raise UserError(f"{out}/ckpt.pt has vocab_size {self.ckpt['model_config']['vocab_size']} but "
                            f"{data.path} has {data.vocab_size}; prepare the data again as the run had it")
        if self.resumed and ours != theirs:
            raise UserError(f"{data.path} was prepared again since {out}/ckpt.pt trained on it (another tokenizer "
                            f"or source); prepare it as the run had it, or start a new run elsewhere: {ELSEWHERE}")
        if not self.resumed and ours != theirs:  # the tokenizer's entry and rank file: two BPEs of one size differ
            source, a, b = self.finetuned_from, ours["info"], theirs["info"]
            raise UserError(f"{source['checkpoint']} was trained with a {a['name']} tokenizer of {a['vocab_size']:,} "
                            f"tokens (data {source['dataset']!r}) but {data.path} was prepared with another "
                            f"({b['name']}, {b['vocab_size']:,} tokens); prepare it with the model's: python "
                            f"prepare.py ... --tokenizer_from {Path(self.settings.data_dir) / str(source['dataset'])}")


def starting_point(s, given):
    """The Start for s.init_from: 'resume' (s.out_dir's checkpoint) or a trained run's folder or .pt
    (fine-tuning); train.py starts a run from scratch itself. given: the keys the user set (None:
    every key)."""
    return resume_from(s, given) if s.init_from == "resume" else finetune_from(s, given)


def finetune_from(s, given):
    """A new run in s.out_dir from the weights of the run s.init_from names: step 0, a fresh
    optimizer, the new run's own schedule and data. The model settings become the checkpoint's (one
    given with another value is an error: the weights fix the architecture), except dropout, which
    acts only in training and may be set anew."""
    if not Path(s.init_from).exists():
        raise UserError(f"init_from={s.init_from!r} is not 'scratch', 'resume' or a trained run (no such folder or "
                        f"file); give one of them")
    path = find_checkpoint(s.init_from, "--init_from")
    if Path(s.out_dir).resolve() == path.parent.resolve():
        raise UserError(f"--out_dir {s.out_dir} holds the run being fine-tuned; give the new run its own --out_dir")
    refuse_to_overwrite(s.out_dir, s.overwrite)
    ckpt = load_checkpoint(path, "cpu", flag="--init_from")
    if "ternary" in ckpt:
        raise UserError(f"{path} is a packed export, which keeps no float weights to train; fine-tune from the "
                        f"run's ckpt.pt")
    s = SimpleNamespace(**vars(s))
    recorded = asdict(GPTConfig(**ckpt["model_config"]))  # fields added since: their defaults
    for key in MODEL_KEYS:
        trained, asked = recorded[key], getattr(s, key)
        if key == "dropout" and (given is None or key in given):
            ckpt["model_config"]["dropout"] = asked
        elif asked != trained and (given is None or key in given):
            raise UserError(f"{path} was trained with {key}={trained!r}, not {asked!r}; a fine-tuned model keeps "
                            f"the checkpoint's architecture: give {as_flag(key, trained)}")
        else:
            setattr(s, key, trained)
    source = {"checkpoint": str(path), "iter_num": ckpt.get("iter_num"),
              "dataset": ckpt.get("settings", {}).get("dataset")}
    step = f" (step {source['iter_num']})" if source["iter_num"] is not None else ""
    return Start(s, ckpt, [f"fine-tuning {path}{step}"], source)


def as_flag(key, value):
    """The command-line setting that gives key this value, whichever config file set it otherwise
    (the command line comes last): --block_size=64, --input=binary."""
    return f"--{key}={value if isinstance(value, str) else repr(value)}"


def resume_from(s, given):
    """The run in s.out_dir, to go on from its last checkpoint.

    The checkpoint fixes the architecture, the dataset and the seed: one of them given (in
    `given`, or every key when given is None) with another value is an error, the others take
    the checkpoint's values. The recipe (RECIPE: batch, schedule, optimizer, evaluation) is the
    checkpoint's too unless given; a given change is allowed and comes back as a notice, and
    max_iters may grow but not fall below the step reached. The rest (where and how the run
    runs: out_dir, data_dir, device, dtype, peak_flops) follows the command."""
    out = s.out_dir
    ckpt = load_checkpoint(out, "cpu", flag="--out_dir")
    missing = {"settings", "optimizer", "iter_num", "best_val_loss", "elapsed_s"} - set(ckpt)
    if missing:
        raise UserError(f"{out}/ckpt.pt has no {', '.join(sorted(missing))}: it can be sampled and "
                        f"evaluated but not resumed; start a new run elsewhere: {ELSEWHERE}")
    bad = [where for where, v in leaves_of(ckpt["optimizer"]) if isinstance(v, torch.Tensor) and
           v.is_floating_point() and not torch.isfinite(v).all()]  # its weights are finite (load_checkpoint)
    if bad:
        raise UserError(f"{out}/ckpt.pt's optimizer state holds non-finite values (in optimizer{bad[0]}), which "
                        f"would make the weights non-finite at its first step; fine-tune its finite weights with a "
                        f"new optimizer instead: --init_from={out} --out_dir=<a new folder>")
    s = SimpleNamespace(**vars(s))
    recorded = {**ckpt["settings"], **asdict(GPTConfig(**ckpt["model_config"]))}  # fields added since: defaults
    for key in FIXED_BY_CHECKPOINT:
        trained, asked = recorded[key], getattr(s, key)
        if asked != trained and (given is None or key in given):
            raise UserError(f"{out}/ckpt.pt was trained with {key}={trained!r}, not {asked!r}; "
                            f"give {as_flag(key, trained)}, or start a new run elsewhere: {ELSEWHERE}")
        setattr(s, key, trained)
    notices = [f"resuming {out}/ckpt.pt at step {ckpt['iter_num']}"]
    for key in RECIPE:
        trained, asked = recorded.get(key, getattr(s, key)), getattr(s, key)  # a setting added since: as asked
        if given is not None and key not in given:
            setattr(s, key, trained)
        elif asked != trained:
            notices.append(f"resuming with {key} {asked!r} instead of the run's {trained!r}")
    if s.max_iters < ckpt["iter_num"]:
        raise UserError(f"{out}/ckpt.pt is at step {ckpt['iter_num']}, past max_iters={s.max_iters}; give "
                        f"--max_iters={ckpt['iter_num']} or more")
    return Start(s, ckpt, notices, ckpt.get("finetuned_from"))
