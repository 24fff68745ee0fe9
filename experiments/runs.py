"""What the experiments share: train.py run as its own process for each (input, seed), exactly
as a user would run it; finished runs read back from their run directories; the probes scored by
tools/evaluate.py, also as a process (the statistics over seeds: experiments/stats.py).

A run whose log already holds its final evaluation is never redone; an interrupted one resumes
from its checkpoint, so stopping an experiment and starting it again loses at most one
evaluation interval of one run.
"""

import json
import math
import os
import statistics
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

import numpy as np
import torch

from model import GPT, INPUTS
from tablefree.checkpoint import load_checkpoint
from tablefree.common import CKPT_NAME, UserError, holds_work, write_atomic
from tablefree.rundir import read_log
from tablefree.configurator import check_settings, model_config, resolve, script_settings
from tablefree.cost import flops_per_token

ROOT = Path(__file__).resolve().parents[1]  # the checkout: train.py and tools/ live there
TRAIN = ROOT / "train.py"
PROBES = ("spelling", "echo", "layers")  # tools/evaluate.py's committed probe sets, scored on every finished run


def train_settings(argv):
    """The settings train.py would run with for these arguments (its defaults read from its source),
    checked as train.py checks them, so a bad one is refused before the first run."""
    settings = resolve(script_settings(TRAIN), argv)
    check_settings(settings)
    return settings


def run_size(settings, vocab_size):
    """(training FLOPs, tokens, the binary-input model on the meta device: no memory, no time) of one
    run; the FLOPs are the same for every input (their count leaves the input out): frozen's too."""
    s = check_settings({**settings, "input": "binary", "codes_from": ""})
    with torch.device("meta"):
        model = GPT(model_config(s, vocab_size))
    tokens = s.max_iters * s.gradient_accumulation_steps * s.batch_size * s.block_size
    return flops_per_token(model) * tokens, tokens, model


def launcher(nproc_per_node):
    """How each run starts: `python train.py`, or torchrun with one process per device."""
    if nproc_per_node == 1:
        return [sys.executable, str(TRAIN)]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc_per_node}", str(TRAIN)]


def runs_root(path):
    """A study's --runs_dir, refused when it is itself a run or a dataset: the study's runs and its
    lock files would go inside it."""
    work = holds_work(path)
    if work:
        raise UserError(f"--runs_dir {path} holds {work}; give the study's runs a folder of their own")
    return Path(path)


def run_dir(root, kind, seed):
    return Path(root) / f"{kind}-seed{seed}"


def read_run(directory):
    """One finished run's numbers from its log.jsonl and config.json."""
    log = read_log(directory / "log.jsonl")
    config = json.loads((directory / "config.json").read_text())
    s = config["settings"]
    evals = [r for r in log if "val_loss" in r]
    final = evals[-1]
    return {"val_loss": final["val_loss"], "val_ppl": math.exp(final["val_loss"]), "val_bpb": final["val_bpb"],
            "tokens": s["max_iters"] * s["gradient_accumulation_steps"] * s["batch_size"] * s["block_size"],
            "trainable": config["params"]["trainable"], "input_params": config["params"]["input"],
            "wall_s": final["elapsed_s"], "curve": [[r["iter"], r["val_loss"]] for r in evals],
            # the run's length at its median logged step: its wall time less pauses (a stopped queue) and restarts
            "steady_s": s["max_iters"] * statistics.median([r["ms"] for r in log if "ms" in r] or [0]) / 1000,
            "norms": [[r["iter"], r["norms"]] for r in evals if r.get("norms")],  # logged since 2026-12-01
            "code_quality": config.get("code_quality"),
            "skipped": [r["iter"] - 1 for r in log if "skipped" in r]}  # steps not applied (--nonfinite=skip)


def finished(directory, max_iters):
    """True when the run's log holds its final evaluation."""
    log = directory / "log.jsonl"
    return log.exists() and any(r["iter"] == max_iters and "val_loss" in r for r in read_log(log))


# A run's kind: an input, optionally +variant; a variant's (train.py arguments, learned control, what its base lacks)
VARIANTS = {"ternary": (["--body=ternary"], "learned", "float body"),
            "tied": (["--tie_weights=True"], "learned", "untied head"),
            "codes": (["--head=codes"], "learned+tied", "untied head")}  # the frozen-code paper's pair


def control(kind):
    """The learned kind a kind is compared with, and frozen's codes come from: the frozen-code
    paper's code head against its tied table, everything else against the untied learned run."""
    variant = kind.partition("+")[2]
    return VARIANTS[variant][1] if variant else "learned"


def is_kind(kind):  # an input, and a variant this module knows
    name, _, variant = kind.partition("+")
    return name in INPUTS and (variant == "" or variant in VARIANTS)


def write_table(directory, path):
    """The finished run's input table (its checkpoint's wte.weight, V x n_embd float32) to path (.npy),
    atomically: what a frozen run derives its codes from, small enough to be kept (experiments/keep.py)
    where the checkpoint is not, so a new machine need not train the run again for its codes."""
    table = load_checkpoint(directory)["model"]["wte.weight"].float().numpy()
    write_atomic(path, lambda f: np.save(f, table))


def run_arguments(settings, kind, seed, root, source=None):
    """What one run adds to the shared arguments: its input and seed (affine also draws its A and
    b from it), its variant's settings; 'frozen' derives its codes from its control's run of the
    same seed (control), or from source, a run or a V x d table file given by the caller."""
    name, _, variant = kind.partition("+")
    args = [f"--input={name}", f"--seed={seed}", f"--code_seed={seed}", *(VARIANTS[variant][0] if variant else [])]
    if name == "frozen" and source:
        args.append(f"--codes_from={source}")
    elif name == "frozen":
        source = run_dir(root, control(kind), seed)
        if not finished(source, settings["max_iters"]):
            raise UserError(f"{kind} derives its codes from {source}, which is not finished; "
                            f"run {control(kind)} first (--inputs {control(kind)},{kind})")
        args.append(f"--codes_from={source}")
    return args


@contextmanager
def claimed(path):
    """Hold path's lock (a file beside it) while making it: another process making the same run or
    report waits here, then finds it made. So two copies of an experiment, or two experiments
    sharing runs (dev/queue.sh's lanes), never write one run directory at once. No flock on Windows:
    run one copy at a time there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file(path), "a") as lock:  # "a": made once, never written
        if fcntl:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        yield


def lock_file(path):
    """The file whose lock is path's claim: .<name>.lock beside it."""
    return path.parent / f".{path.name}.lock"


def held(path):
    """True while another process holds path's claim (is making that run or report now)."""
    lock = lock_file(path)
    if not fcntl or not lock.exists():
        return False
    with open(lock, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: taken, and let go on closing
        except BlockingIOError:
            return True
    return False


def made_free_first(items, path, make):
    """[make(item) for item in items], made in another order: each next the first item whose path
    (item -> run directory or report) no other process holds now, or when all are held the first.
    So two processes walking one list of runs (the queue's lanes where they meet) make different runs
    side by side instead of one waiting on each run the other makes. Only for items that do not
    depend on each other (the seeds of one run)."""
    left, made = list(items), {}
    while left:
        item = next((i for i in left if not held(path(i))), left[0])
        left.remove(item)
        made[item] = make(item)
    return [made[item] for item in items]


def train_run(argv, directory, max_iters, label, start="scratch", nproc_per_node=1, checkpoint=False):
    """read_run(directory) after training (or resuming) the run there, unless its log already holds
    its final evaluation. argv: train.py's arguments; start: --init_from of a first attempt,
    'scratch' or the checkpoint a fine-tuning run starts from; label: the run's name in messages;
    checkpoint: the caller needs the run's ckpt.pt afterwards, so a finished run kept without it
    (experiments/keep.py) is trained again (seeded: the same numbers)."""
    with claimed(Path(directory)):
        return _train_run(argv, Path(directory), max_iters, label, start, nproc_per_node, checkpoint)


# Settings that do not make a run another run: where it is and runs, how often it logs, how it ends a
# bad step (the log records every skipped step), where its codes' source lies (restored runs move)
WHERE = ("out_dir", "data_dir", "init_from", "overwrite", "device", "dtype", "compile", "eval_only", "dry_run",
         "log_interval", "always_save_checkpoint", "peak_flops", "nonfinite", "codes_from", "wandb_log",
         "wandb_project", "wandb_run_name", "tensorboard")


def other_settings(directory, argv):
    """{setting: (the run's, asked)} where the run kept at directory was made with other settings
    than train.py's arguments argv ask for; {} for a folder with no run yet."""
    try:
        kept = json.loads((directory / "config.json").read_text())["settings"]
    except (OSError, ValueError, KeyError):
        return {}
    asked = resolve(script_settings(TRAIN), argv)
    return {key: (kept[key], asked[key]) for key in sorted(asked.keys() & kept.keys() - set(WHERE))
            if kept[key] != asked[key]}


def _train_run(argv, directory, max_iters, label, start, nproc_per_node, checkpoint):
    differ = other_settings(directory, argv)
    if differ:  # a study run again with other settings: never its old numbers under the new name
        key, (kept, asked) = next(iter(differ.items()))
        raise UserError(f"{directory} holds a run made with {key}={kept!r}, not {asked!r}"
                        f"{f' (and {len(differ) - 1} more)' if len(differ) > 1 else ''}; give the study another "
                        f"--runs_dir, or move that folder away")
    done = finished(directory, max_iters)
    kept = done and checkpoint and not (directory / CKPT_NAME).exists()
    if kept or not done:
        resume = not kept and (directory / CKPT_NAME).exists()
        what = "its checkpoint was not kept, training it again" if kept else "resuming" if resume else "training"
        print(f"== {label}: {what} in {directory}", flush=True)
        # the experiment owns its run directories: a run killed before its first checkpoint restarts
        command = [*launcher(nproc_per_node), *argv, f"--out_dir={directory}",
                   f"--init_from={'resume' if resume else start}", f"--overwrite={not resume}"]
        if subprocess.run(command).returncode:
            raise UserError(f"the {label} run failed (train.py's error is above); fix it and run again: "
                            f"finished runs are kept, {directory} resumes")
    return read_run(directory)


def run_all(argv, settings, kinds, seeds, root, nproc_per_node=1, needed=lambda directory: False):
    """{kind: [read_run(...) per seed]}, training (or resuming) every run not yet finished.

    argv: train.py's arguments shared by every run (config files, --key=value); settings: what
    they resolve to (train_settings); needed(directory): the caller will need that run's checkpoint
    (as a frozen run not yet trained needs its learned source's)."""
    def frozen(kind):  # 'frozen' or 'frozen+<variant>': its codes come from its control's run
        return kind.partition("+")[0] == "frozen"

    def make(run):
        kind, seed = run
        source_needed = any(frozen(k) and control(k) == kind and not finished(run_dir(root, k, seed), settings["max_iters"])
                            for k in kinds)
        return train_run([*argv, *run_arguments(settings, kind, seed, root)], run_dir(root, kind, seed),
                         settings["max_iters"], f"{kind}, seed {seed}", nproc_per_node=nproc_per_node,
                         checkpoint=needed(run_dir(root, kind, seed)) or source_needed)

    def path(run):
        return run_dir(root, *run)

    # any order but one: a frozen run after its learned source. So the others are one list (two
    # processes sharing it never wait on each other's last seed of a kind), then frozen's.
    later = [(kind, seed) for kind in kinds if frozen(kind) for seed in range(seeds)]
    first = [(kind, seed) for kind in kinds for seed in range(seeds) if (kind, seed) not in later]
    made = dict(zip(first + later, made_free_first(first, path, make) + made_free_first(later, path, make)))
    return {kind: [made[kind, seed] for seed in range(seeds)] for kind in kinds}


def stale(report, directory):
    """True when the run in directory was trained again after report was made from it: its checkpoint is
    the newer (a kept run trained anew on a machine that had lost its checkpoint gives numbers a little
    apart, so what was made from the old weights is made again; a kept run with no checkpoint is read)."""
    try:
        return (directory / CKPT_NAME).stat().st_mtime_ns > report.stat().st_mtime_ns
    except OSError:
        return False


def scored(directory, max_iters, name="eval"):
    """The results kept in a finished run's <name>.json ({} when it has none from that step, or it is
    stale: from weights trained again since)."""
    try:
        if stale(directory / f"{name}.json", directory):
            return {}
        report = json.loads((directory / f"{name}.json").read_text())
        return report["results"] if report["iter_num"] == max_iters else {}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def evaluated(directory, max_iters, tasks, data_dir="data", extra=(), name="eval"):
    """tools/evaluate.py's results for tasks on a finished run, scored once and kept in its
    <name>.json (scored again when that file is from another step of the run or lacks a task);
    data_dir: where the run's dataset is (the held-out tasks' text and train counts); extra: more
    of tools/evaluate.py's arguments (another held-out dataset: then another name)."""
    results = scored(directory, max_iters, name)
    if set(tasks) - set(results):
        run_tool("evaluate", "--ckpt", str(directory), "--tasks", ",".join(tasks), "--data_dir", str(data_dir),
                 *extra, "--out", str(directory / f"{name}.json"), "--force",  # the study's own run: its file
                 failed=f"scoring {', '.join(tasks)} on {directory} failed (its error is above)")
        results = scored(directory, max_iters, name)
    return results


def run_tool(name, *args, failed):
    """python -m tools.<name> args as its own process (stdout dropped: its results are its files),
    from anywhere; its failure is the one-line error `failed`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    if subprocess.run([sys.executable, "-m", f"tools.{name}", *args], env=env, stdout=subprocess.DEVNULL).returncode:
        raise UserError(failed)


def cell_report(root, cell, kind, seed):
    """Where one model's tools/extend.py report for one grid cell is kept."""
    return root / "extensions" / cell[-1] / f"{kind}-seed{seed}.json"


def extend(directory, kind, seed, cell, root, data_dir, extra=()):
    """tools/extend.py on one model for one grid cell, or its kept report: the model's row; extra: more
    of tools/extend.py's arguments (the same for every model of the cell)."""
    report = cell_report(root, cell, kind, seed)
    m, rows, steps, name = cell
    with claimed(report):
        if not report.exists() or stale(report, directory):
            print(f"== {kind}, seed {seed}: adding {m} words, table rows {rows}, {steps} adaptation steps", flush=True)
            run_tool("extend", "--ckpt", str(directory), "--new_tokens", str(m), "--new_rows", rows, "--adapt_steps",
                     str(steps), "--name", report.stem, "--results_dir", str(report.parent), "--data_dir", data_dir, *extra,
                     "--force",  # a stale report of the study's own, written before reports carried a digest
                     failed=f"tools/extend.py failed for {name} on {directory} (its error is above); run again: "
                            "finished cells are kept")
    return json.loads(report.read_text())["runs"][0]


def probe_tasks(override):
    """The probes scored on a run; override: the echo probe with each string at a spare id of its
    own bytes too (the Kronecker input's)."""
    return [*PROBES, *(["echo_override"] if override else [])]


def probed(directory, max_iters, override=False):
    """True when a finished run's probes are all kept in its eval.json (no checkpoint needed)."""
    return set(probe_tasks(override)) <= set(scored(directory, max_iters))


def probe_run(directory, max_iters, override=False):
    """The spelling, echo and layered probes of a finished run (evaluated; override: probe_tasks)."""
    results = evaluated(directory, max_iters, probe_tasks(override))
    spelling = results["spelling"]
    echo = {"echo_rate": results["echo"]["echo_rate"], "echo_rate_sampled": results["echo"]["echo_rate_sampled"]}
    if override:
        echo |= {"echo_rate_override": results["echo_override"]["echo_rate"],
                 "echo_rate_override_sampled": results["echo_override"]["echo_rate_sampled"]}
    return {"spelling_top1": spelling["top1_agreement"], "spelling_kl": spelling["kl"], **echo,
            "spelling_by_category": {c: g["top1_agreement"] for c, g in spelling["by_category"].items()},
            "layers": {c: g["cosine_by_layer"] for c, g in results["layers"]["by_category"].items()}}
