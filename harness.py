"""Score a checkpoint with the real LM Evaluation Harness (lm-eval 0.4), offline, on eval.py's data.

    python eval.py --ckpt out/ --harness --tasks hellaswag,piqa,arc_easy,arc_challenge,lambada

What happens: the checkpoint is exported to transformers (hf.py, into <run>/hf), and each task's
rows -- the very rows eval.py scores, from the same source (tasks.load_rows) -- are written in
the hub's schema to <run>/harness/<task>.jsonl. Beside each goes a task definition,
tablefree_<task>.yaml, that *includes the harness's own YAML* for the task (prompt, choices,
preprocessing, metrics: lm_eval/tasks/hellaswag/hellaswag.yaml and so on) and changes only
where the data comes from: dataset_path json, data_files = our file. Then lm_eval's own
simple_evaluate scores the exported model with its HF backend (HFLM) in float32.

The folder stays, so the standard command line reproduces the numbers without this file:

    lm_eval --model hf --model_args pretrained=out/hf,dtype=float32 --device cpu \\
        --include_path out/harness --tasks tablefree_hellaswag,tablefree_piqa,...

One difference by design: the harness scores ARC on its test split and the offline bundle
holds only validation (tasks.py), so with --data bundle both tools score ARC's validation split.
"""

import json
import os
import sys
from pathlib import Path

from hf import export_hf
from settings import UserError
from tasks import TASKS, load_rows

PREFIX = "tablefree_"


def write_task(name, rows, split, folder):
    """<folder>/<name>.jsonl and <folder>/tablefree_<name>.yaml, the harness's task on these rows."""
    import lm_eval.tasks

    data = folder / f"{name}.jsonl"
    data.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    own = Path(lm_eval.tasks.__file__).parent / TASKS[name].harness
    # JSON is YAML; `include` takes every key of the harness's file, the keys below win
    spec = {"include": str(own), "task": PREFIX + name, "tag": [], "dataset_path": "json", "dataset_name": None,
            "dataset_kwargs": {"data_files": {split: str(data.resolve())}},
            "training_split": None, "validation_split": None, "test_split": split, "fewshot_split": None}
    (folder / f"{PREFIX}{name}.yaml").write_text(json.dumps(spec, indent=2) + "\n")


def harness_results(raw, names):
    """eval.py's result shape ({task: {n, acc, acc_stderr, ...}}) from simple_evaluate's output."""
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


def run_harness(ckpt, model, path, names, args):
    """Export, write the task folder, run lm_eval; return (results by task, the lm_eval command)."""
    unknown = [n for n in names if n not in TASKS]
    if unknown:
        raise UserError(f"--harness scores only {', '.join(TASKS)}, not {', '.join(unknown)}; "
                        f"score the others without --harness")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # the rows are local files: never ask the hub
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import lm_eval
        from lm_eval.tasks import TaskManager
    except ImportError:
        raise UserError("--harness needs lm-eval: pip install -r requirements-extras.txt") from None
    run = path.parent
    hf_dir = export_hf(model, ckpt, run / "hf")
    folder = run / "harness"
    folder.mkdir(exist_ok=True)
    for name in names:
        rows, split, where = load_rows(name, args.data, Path(args.data_dir) / "_sources", args.limit)
        print(f"{name}: {len(rows)} documents ({split} split) from {where}", file=sys.stderr)
        write_task(name, rows, split, folder)
    tasks = [PREFIX + n for n in names]
    model_args = f"pretrained={hf_dir},dtype=float32"
    command = (f"lm_eval --model hf --model_args {model_args} --device {args.device if args.device != 'auto' else 'cpu'} "
               f"--batch_size {args.batch_size} --include_path {folder} --tasks {','.join(tasks)}")
    raw = lm_eval.simple_evaluate(model="hf", model_args=model_args, tasks=tasks, batch_size=args.batch_size,
                                  device="cpu" if args.device == "auto" else args.device,
                                  task_manager=TaskManager(include_path=str(folder), include_defaults=False))
    return harness_results(raw, names), command
