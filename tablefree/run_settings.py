"""train.py's settings checked before any work: each number's range, each choice, the model they
describe, and what a resumed run must keep from its checkpoint.

Experiments use the same checks on the settings they hand to train.py, so a bad setting is
refused before the first run, not after some.
"""

from dataclasses import fields
from types import SimpleNamespace

from model import GPTConfig
from tablefree.checkpoint import load_checkpoint
from tablefree.errors import UserError, require

MODEL_KEYS = tuple(f.name for f in fields(GPTConfig) if f.name != "vocab_size")  # V: from the data

# the lowest value each numeric run setting may take (GPTConfig checks the model's own)
AT_LEAST = {**dict.fromkeys(("eval_interval", "eval_iters", "log_interval", "batch_size",
                             "gradient_accumulation_steps"), 1),
            **dict.fromkeys(("max_iters", "warmup_iters", "lr_decay_iters", "seed", "learning_rate",
                             "min_lr", "weight_decay", "beta1", "beta2", "grad_clip", "peak_flops"), 0)}
CHOICES = {"init_from": ("scratch", "resume"), "nonfinite": ("stop", "skip")}
FIXED_BY_CHECKPOINT = (*MODEL_KEYS, "dataset", "seed")  # a resumed run cannot change these


def check_settings(settings):
    """The settings dict as a namespace (s.batch_size), after checking every value's range."""
    s = SimpleNamespace(**settings)
    for key, low in AT_LEAST.items():
        require(getattr(s, key) >= low, key, getattr(s, key), f"at least {low}")
    for key in ("beta1", "beta2"):
        require(getattr(s, key) < 1, key, getattr(s, key), "below 1")
    for key, choices in CHOICES.items():
        require(getattr(s, key) in choices, key, getattr(s, key), " or ".join(map(repr, choices)))
    model_config(s, vocab_size=2)  # the model settings, checked before any work (V comes later)
    return s


def model_config(s, vocab_size):
    """GPTConfig from the model settings; what it refuses is a one-line error."""
    try:
        return GPTConfig(vocab_size=vocab_size, **{key: getattr(s, key) for key in MODEL_KEYS})
    except ValueError as e:
        raise UserError(str(e)) from None


def resume_from(s, given, out):
    """The checkpoint in out, after checking that it fits the settings.

    The checkpoint fixes the architecture, the dataset and the seed: one of them given (in
    `given`, or every key when given is None) with another value is an error; the ones not
    given take the checkpoint's values."""
    ckpt = load_checkpoint(out, "cpu")
    missing = {"settings", "optimizer", "iter_num", "best_val_loss", "elapsed_s"} - set(ckpt)
    if missing:
        raise UserError(f"{out}/ckpt.pt has no {', '.join(sorted(missing))}: it can be sampled and "
                        f"evaluated but not resumed; start a new run in another out_dir")
    recorded = {**ckpt["settings"], **ckpt["model_config"]}
    for key in FIXED_BY_CHECKPOINT:
        trained, asked = recorded[key], getattr(s, key)
        if asked != trained and (given is None or key in given):
            raise UserError(f"{out}/ckpt.pt was trained with {key}={trained!r}, not {asked!r}; "
                            f"drop --{key} or start a new run in another out_dir")
        setattr(s, key, trained)
    return ckpt
