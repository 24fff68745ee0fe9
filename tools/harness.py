"""Score a checkpoint with the real LM Evaluation Harness (lm-eval 0.4), offline, on evaluate.py's data.

    python -m tools.evaluate --ckpt out/ --harness --tasks hellaswag,piqa,arc_easy,arc_challenge,lambada

What happens: the checkpoint is exported to transformers (hf.py, into <run>/hf), and each task's
rows -- the very rows evaluate.py scores, from the same source (scoring.benchmark_requests) -- are
written in the hub's schema to <run>/harness/<task>.jsonl. Beside each goes a task definition,
tablefree_<task>.yaml, that *includes the harness's own YAML* for the task (prompt, choices,
preprocessing, metrics: lm_eval/tasks/hellaswag/hellaswag.yaml and so on) and changes only
where the data comes from: dataset_path json, data_files = our file. Then lm_eval's own
simple_evaluate scores the exported model with its HF backend (HFLM) in float32.

The folder stays, so the standard command line reproduces the numbers without this file:

    lm_eval --model hf --model_args pretrained=out/hf,dtype=float32 --device cpu \\
        --include_path out/harness --tasks tablefree_hellaswag,tablefree_piqa,...

Documents with a choice longer than the model's window are left out of both (the harness
asserts on them; scoring.benchmark_requests counts them as `skipped`). ARC: the harness scores its
test split, the offline bundle holds only validation (tasks.py), so with --data bundle both
tools score ARC's validation split.
"""

import json
import logging
import os
from pathlib import Path

from tablefree.common import UserError, check_output, pick_device, replace_folder
from tools.hf import export_hf
from tools.tasks import TASKS

PREFIX = "tablefree_"


def write_task(name, rows, split, folder, final):
    """<folder>/<name>.jsonl and <folder>/tablefree_<name>.yaml, the harness's task on these rows;
    the YAML names the rows where they will be, in the folder `final`."""
    import lm_eval.tasks

    data = folder / f"{name}.jsonl"
    data.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    own = Path(lm_eval.tasks.__file__).parent / TASKS[name].harness
    # JSON is YAML; `include` takes every key of the harness's file, the keys below win
    spec = {"include": str(own), "task": PREFIX + name, "tag": [], "dataset_path": "json", "dataset_name": None,
            "dataset_kwargs": {"data_files": {split: str(final.resolve() / data.name)}},
            "training_split": None, "validation_split": None, "test_split": split, "fewshot_split": None}
    (folder / f"{PREFIX}{name}.yaml").write_text(json.dumps(spec, indent=2) + "\n")


def harness_results(raw, names):
    """evaluate.py's result shape ({task: {n, acc, acc_stderr, ...}}) from simple_evaluate's output."""
    def number(value):  # the harness writes "N/A" for the stderr of a single document
        return value if isinstance(value, (int, float)) else float("nan")

    out = {}
    for name in names:
        r = raw["results"][PREFIX + name]
        out[name] = {"n": raw["n-samples"][PREFIX + name]["effective"]}
        for ours, theirs in (("acc", "acc"), ("acc_norm", "acc_norm"), ("ppl", "perplexity")):
            if f"{theirs},none" in r:
                out[name][ours] = number(r[f"{theirs},none"])
            if ours != "ppl" and f"{theirs}_stderr,none" in r:
                out[name][f"{ours}_stderr"] = number(r[f"{theirs}_stderr,none"])
    return out


def run_harness(ckpt, model, path, tasks, args):
    """Export, write the task folder, run lm_eval; return (results by task, the lm_eval command).

    tasks: {name: (rows, info)}, the rows evaluate.py scores (scoring.benchmark_requests) and their
    split, source and skipped count, which the results carry as evaluate.py's do."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # the rows are local files: never ask the hub
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # HFLM warns once per request it truncates from the left (tens of thousands here); evaluate.py
    # truncates the same way, silently
    logging.getLogger("lm_eval.models.huggingface").setLevel(logging.ERROR)
    try:
        import lm_eval
        from lm_eval.tasks import TaskManager
    except ImportError:
        raise UserError("--harness needs lm-eval: pip install -r requirements-extras.txt") from None
    run = path.parent
    hf_dir, written = export_hf(model, ckpt, run / "hf", "--ckpt")  # beside the checkpoint --ckpt names
    folder = check_output(run / "harness", "--ckpt", own=("*.jsonl", f"{PREFIX}*.yaml"))
    replace_folder(folder, lambda tmp: [write_task(name, rows, info["split"], tmp, folder)
                                        for name, (rows, info) in tasks.items()])
    names = [PREFIX + n for n in tasks]
    remote = ",trust_remote_code=True" if "trust_remote_code" in written else ""  # tablefree's own modelling file
    model_args = f"pretrained={hf_dir},dtype=float32{remote}"
    device = pick_device(args.device)
    command = (f"lm_eval --model hf --model_args {model_args} --device {device} --batch_size {args.batch_size} "
               f"--include_path {folder} --tasks {','.join(names)}")
    raw = lm_eval.simple_evaluate(model="hf", model_args=model_args, tasks=names, batch_size=args.batch_size,
                                  device=device, task_manager=TaskManager(include_path=str(folder), include_defaults=False))
    scores = harness_results(raw, tasks)
    return {name: {**info, **scores[name]} for name, (_, info) in tasks.items()}, command
