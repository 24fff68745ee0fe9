"""Checkpoints: written atomically and loaded safely, the one loader train, sample and eval share
(tablefree/rundir.py keeps the run folder around them; packed.py builds a packed export).

A checkpoint is a dict of tensors and plain values (so `torch.load(weights_only=True)` can
read it without running any pickled code): the raw model's state_dict, its GPTConfig, the
optimizer state, the run settings, the step, and the tokenizer, so that it is all a run
directory needs to resume, sample or evaluate. It also holds the crc32 of its tensors: torch's zip
format catches a torn file, not a flipped byte inside a tensor, which would load as garbage or nan.
"""

import sys
from pathlib import Path

import numpy as np
import torch

from model import GPT, GPTConfig
from tablefree.common import CKPT_NAME, UserError, state_crc32

def find_checkpoint(path, flag="--ckpt"):
    """The checkpoint file for a run directory or a file path; flag: the option that named it."""
    path = Path(path)
    if (path / "tablefree.json").is_file() or (path / "model.safetensors").is_file():
        raise UserError(f"{path} is a Hugging Face folder (tools.export's), which transformers loads; give {flag} "
                        f"the run it was exported from (its folder holds ckpt.pt)")
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
        raise UserError(f"{path} is not a loadable checkpoint ({unloadable(path, e, flag)})") from None
    missing = {"model", "model_config", "tokenizer"} - set(ckpt if isinstance(ckpt, dict) else ())
    if missing:
        raise UserError(f"{path} is not a tablefree checkpoint "
                        f"(missing {', '.join(sorted(missing))})")
    verify(ckpt, path)
    return upgrade(ckpt)


def unloadable(path, error, flag):
    """Why torch.load failed on path, and what to give instead, from the file's first bytes."""
    with open(path, "rb") as f:
        head = f.read(4)
    if not head:
        return "the file is empty: a full disk or a copy cut short; restore it, or train again"
    if head == b"GGUF":
        return f"it is a GGUF file, which llama.cpp runs: python -m tools.llama --gguf {path}"
    if head != b"PK\x03\x04":  # torch.save writes a zip archive
        return (f"it is not a file torch.save wrote; give {flag} a run folder, or the ckpt.pt or model.ternary.pt "
                f"that train.py or tools.export wrote")
    if "Weights only load failed" in str(error):
        return "it holds objects a safe load (weights_only=True) refuses: it is unsafe, or not a checkpoint of ours"
    reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:160]
    return f"{reason}; it is corrupt or truncated: restore it, or train again"


def verify(ckpt, path):
    """Refuse a checkpoint whose contents changed since they were saved (its crc32 over everything in
    it, or over its tensors alone before 2026-12-04; a packed file's sha256) or that holds a nan or
    inf weight, from which no sampling, evaluation or export can come."""
    saved_crc = ckpt.pop("crc32", None)  # None: a checkpoint saved before checkpoints had one
    everything = ckpt.get("crc32_covers") == "everything"
    if saved_crc is not None and state_crc32(ckpt, everything) != saved_crc:
        what = "contents (weights, settings or tokenizer)" if everything else "tensors"
        raise UserError(f"{path} is damaged: its {what} are not the ones it was saved with (crc32 differs); "
                        f"restore it from a copy, or train again")
    ckpt.pop("crc32_covers", None)
    if "ternary" in ckpt and "sha256" in ckpt:  # a packed export (tablefree/packed.py)
        verify_packed(ckpt, path)
    elif "ternary" in ckpt and "sha256_covers" in ckpt:  # written with a sha256 since 2026-12-05: removed since
        raise UserError(f"{path} has lost the sha256 it was written with, so it cannot be checked; export it again "
                        f"from its checkpoint (python -m tools.export --ckpt <its run> --format ternary)")
    elif "ternary" in ckpt:
        print(f"warning: {path} is a packed export from before its sha256 (2026-12-05): loaded unchecked; export "
              f"it again to have it checked", file=sys.stderr)
    bad = [name for name, t in ckpt["model"].items()
           if isinstance(t, torch.Tensor) and t.is_floating_point() and not torch.isfinite(t).all()]
    if bad:
        raise UserError(f"{path} holds non-finite weights (in {', '.join(bad[:3])}{', ...' * (len(bad) > 3)}), from "
                        f"which nothing useful comes; use a checkpoint saved before the run diverged, or train again "
                        f"with a lower learning_rate")


def verify_packed(ckpt, path):
    """Refuse a packed export whose weights (and, since 2026-12-05, config and tokenizer) are not the
    ones its sha256 was written with."""
    from tablefree.checksum import SHA256_COVERS, described, tensors_sha256
    covers = ckpt.get("sha256_covers") == SHA256_COVERS  # else a file from before 2026-12-05: weights only
    if tensors_sha256(ckpt["model"], ckpt["ternary"], described(ckpt) if covers else None) != ckpt["sha256"]:
        raise UserError(f"{path} is damaged: the packed file's {'weights, config or tokenizer' if covers else 'weights'} "
                        f"are not the ones it was written with (sha256 differs); export it again from its checkpoint")


def upgrade(ckpt):
    """A checkpoint of an earlier version in today's names: before `cells` (D, n_embd) the
    Kronecker projection was saved as wte.weight (n_embd, D); frozen codes kept their source's
    mean, components, sha256 and shape, which the source itself now gives (tablefree/extension.py)."""
    state, kind = ckpt["model"], ckpt["model_config"].get("input")
    if kind == "kronecker" and "wte.weight" in state:
        state["wte.cells"] = state.pop("wte.weight").t().contiguous()
    if kind == "frozen":
        for name in ("mean", "components", "source_sha256", "source_shape"):
            state.pop(f"wte.{name}", None)
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
        step, planned = ckpt.get("iter_num"), ckpt.get("settings", {}).get("max_iters")
        if isinstance(step, int) and isinstance(planned, int) and step < planned:  # said, then used as it is
            print(f"notice: --codes_from {path} stopped at step {step:,} of its {planned:,}: the codes come from "
                  f"its table as it was then")
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


def build_model(ckpt):
    """The GPT a training checkpoint describes, with its weights loaded (a packed export's, and the
    C kernels for inference: packed.inference_model)."""
    if "ternary" in ckpt:
        raise UserError("this is a packed export, which keeps no float weights; load it with "
                        "tablefree.packed.inference_model, or use the run's ckpt.pt")
    try:
        model = GPT(GPTConfig(**ckpt["model_config"]))
        model.load_state_dict(ckpt["model"])
    except (TypeError, ValueError, RuntimeError, KeyError) as e:
        raise UserError(weights_misfit(e)) from None
    return model


def weights_misfit(error):
    """The one line for weights that do not fit the config they were saved with."""
    return f"checkpoint weights do not fit its model config: {str(error).splitlines()[0][:200]}"
