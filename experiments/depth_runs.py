"""What the depth studies share (experiments/depth.py at 32 x 40, experiments/depth_width.py at 32 x 160):
the arms and the paper's numbers, one run trained with its stability measured (make_run), the models' sizes,
binary's gap against log2(depth) with its standard error, and the report's cells.
"""

import json
import math
import statistics

import numpy as np
import torch

from experiments.runs import run_arguments, run_dir, train_run
from model import GPT, param_counts
from tablefree.checkpoint import build_model, load_checkpoint
from tablefree.common import UserError, write_atomic
from tablefree.configurator import check_settings, model_config
from tablefree.data import Dataset, windows
from tablefree.rundir import read_log

ARMS = ("learned", "binary", "affine")  # affine at the deepest only
STRICT = ("learned", "binary")  # seed 0 at the deepest runs first with --nonfinite=stop
PAPER = {"depth": 32, "ppl": {"learned": 2.44, "binary": 2.36, "affine": 2.39}, "spread": 0.048,
         "vs_learned": {"binary": -0.033, "affine": -0.020}, "table_share": 67.1 / 537}


def arms_at(depth, depths):
    return ARMS if depth == depths[-1] else ARMS[:2]


def kind(arm, depth):
    return f"{arm}-L{depth}"


def param_table(settings, depths, vocab_size):
    """{depth: {arm: param_counts}} of each model, built on the meta device (no memory, no time)."""
    table = {}
    for depth in depths:
        table[depth] = {}
        for arm in arms_at(depth, depths):
            s = check_settings({**settings, "input": arm, "n_layer": depth})
            with torch.device("meta"):
                table[depth][arm] = param_counts(GPT(model_config(s, vocab_size)))
    return table


def largest_grad_norm(directory):
    """(the largest finite gradient norm before clipping, the step it came at) over the run's log."""
    logged = [(r["grad_norm_max"], r["grad_norm_max_iter"]) for r in read_log(directory / "log.jsonl")
              if r.get("grad_norm_max") is not None]
    return max(logged) if logged else (None, None)


@torch.no_grad()
def residual_rms(directory, data_dir, batches=8, batch_size=8):
    """The RMS of the residual stream at the last block's output (before ln_f), over `batches` held-out
    windows drawn with a fixed seed, through the run's final checkpoint."""
    ckpt = load_checkpoint(directory)
    model = build_model(ckpt).eval()
    data = Dataset(data_dir, ckpt["settings"]["dataset"], model.config.block_size)
    squares = []
    hook = model.h[-1].register_forward_hook(lambda module, args, out: squares.append(out.pow(2).mean().item()))
    generator = torch.Generator().manual_seed(0)
    for _ in range(batches):
        x, y = windows(data.splits["val"], batch_size, model.config.block_size, generator)
        model(x, y)
    hook.remove()
    return math.sqrt(statistics.mean(squares))


def make_run(train_argv, settings, arm, depth, seed, root, data_dir, strict):
    """One run trained (or read) and its stability measured while its checkpoint is at hand:
    (read_run, {skipped, grad_norm_max, grad_norm_step, residual_rms, strict}). strict: first train
    with --nonfinite=stop, and record whether that stopped."""
    directory, steps = run_dir(root, kind(arm, depth), seed), settings["max_iters"]
    argv = [*train_argv, *run_arguments(settings, arm, seed, root), f"--n_layer={depth}"]
    label = f"{arm} at {depth} layers, seed {seed}"
    strict_file, stability_file = directory / "strict.json", directory / "stability.json"
    if strict and not strict_file.exists():
        try:
            train_run([*argv, "--nonfinite=stop"], directory, steps, f"{label} (--nonfinite=stop)", checkpoint=True)
            stopped = False
        except UserError:  # train.py said why above; the run goes on from its last checkpoint with the guard
            stopped = True
        write_atomic(strict_file, json.dumps({"nonfinite": "stop", "stopped": stopped}))
    run = train_run([*argv, "--nonfinite=skip"], directory, steps, label, checkpoint=not stability_file.exists())
    if not stability_file.exists():
        norm, step = largest_grad_norm(directory)
        write_atomic(stability_file, json.dumps({"grad_norm_max": norm, "grad_norm_step": step,
                                                 "residual_rms": residual_rms(directory, data_dir)}))
    stability = json.loads(stability_file.read_text())
    stability["skipped"] = run["skipped"]
    stability["strict"] = json.loads(strict_file.read_text()) if strict_file.exists() else None
    return run, stability


def depth_trend(depths, gaps):
    """The least-squares line gap = a + b log2(depth) through every seed's gap at every depth
    (gaps: {depth: [per seed]}): {"per_doubling": b, "per_doubling_stderr": its standard error
    (sqrt(residual variance / sum (x - mean x)^2); None with no residual left), "intercept": a,
    "at": {depth: fitted}}."""
    x = np.array([math.log2(d) for d in depths for _ in gaps[d]])
    y = np.array([g for d in depths for g in gaps[d]])
    b, a = np.polyfit(x, y, 1) if len(set(x)) > 1 else (0.0, statistics.mean(y))
    spread = float(((x - x.mean()) ** 2).sum())
    left = len(x) - 2  # the residual's degrees of freedom
    stderr = math.sqrt(float(((y - a - b * x) ** 2).sum()) / left / spread) if left > 0 and spread > 0 else None
    return {"per_doubling": float(b), "per_doubling_stderr": stderr, "intercept": float(a),
            "at": {d: float(a + b * math.log2(d)) for d in depths}}


def per_doubling_error(trend):
    """' ± s.e.' of a trend's slope, or nothing where it has none (a trend read from an older report)."""
    stderr = trend.get("per_doubling_stderr")
    return "" if stderr is None else f" ± {stderr:.4f}"


def cell(value, std, digits=4):
    return f"{value:.{digits}f} ± {std:.{digits}f}"


def stability_cell(stabilities):
    """Per seed: skipped updates, the largest gradient norm @ its step, the last block's RMS."""
    return "; ".join(f"{len(s['skipped'])} skipped, {s['grad_norm_max']:.2f} @ {s['grad_norm_step']}, rms "
                     f"{s['residual_rms']:.2f}" for s in stabilities)
