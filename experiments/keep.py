"""The long experiments' finished work, kept in the checkout between machines.

A machine here may be lent for one session only, and the next one start from a clean clone with
no out-* directories: hours of finished runs would be trained again. What the experiments read
from a finished run is small (config.json, log.jsonl, eval.json and its answers; the extension
grid's reports), so `save` copies every file of a finished run but its checkpoint, and every
report beside the runs, to results/runs/<runs dir>/ (committed with the results), and `restore`
puts them back where they are missing. A restored run is read, not trained again; where an
experiment still needs its checkpoint (the source of a frozen run not yet trained, a model to
extend or score), experiments/runs.py trains it again from scratch: the same seed and settings
give the same numbers on the same machine.

    python -m experiments.keep save       # dev/queue.sh: at its start (restore) and every few minutes
    python -m experiments.keep restore
"""

from tablefree.common import interrupt_quietly
interrupt_quietly(__name__, "keep.py")  # is one line, not a traceback

import json
import sys
from pathlib import Path

from experiments.runs import ROOT, finished
from tablefree.common import CKPT_NAME, ArgumentParser, UserError, user_errors, write_atomic

RUNS_DIRS = ("out-compare", "out-depth", "out-depth-width", "out-extension", "out-fairness", "out-regime",  # the queue's
             "out-scaling", "out-transfer")  # experiments' runs
KEPT = ROOT / "results" / "runs"
LARGEST = 4 << 20  # bytes: a checkpoint or an export is not kept, whatever its name; a source table is


def finished_run(folder):
    """True for a run directory whose log holds its final evaluation; False for any other folder."""
    try:
        max_iters = json.loads((folder / "config.json").read_text())["settings"]["max_iters"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return finished(folder, max_iters)


def keepable(root):
    """The files under root worth keeping, relative to it: a finished run's (not an unfinished
    one's: it resumes from its checkpoint or starts again) and every report outside a run."""
    files, wanted = [], {}  # wanted: folder -> are its files kept (not a run, or a finished one); its log read once
    skipped = (".tmp", ".lock", ".writing")  # a file being written; runs.claimed's and common.writing's locks
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix not in skipped):
        run = path.parent
        if run not in wanted:
            is_run = (run / "config.json").exists() or (run / "log.jsonl").exists()
            wanted[run] = not is_run or finished_run(run)
        try:
            if not wanted[run] or path.name == CKPT_NAME or path.stat().st_size > LARGEST:
                continue
        except FileNotFoundError:  # replaced or removed since the listing
            continue
        files.append(path.relative_to(root))
    return files


def copy(source, target):
    """source's bytes to target (atomically); True when target changed."""
    data = source.read_bytes()
    if target.exists() and target.read_bytes() == data:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, data)
    return True


def save(checkout, kept):
    """Every keepable file of the runs dirs under checkout into kept: how many changed."""
    return sum(copy(checkout / name / f, kept / name / f) for name in RUNS_DIRS if (checkout / name).is_dir()
               for f in keepable(checkout / name))


def restore(checkout, kept):
    """Every kept file back under checkout where it is missing (never over a file there): how many."""
    missing = [f.relative_to(kept) for f in sorted(kept.rglob("*")) if f.is_file()
               and not (checkout / f.relative_to(kept)).exists()] if kept.is_dir() else []
    return sum(copy(kept / f, checkout / f) for f in missing)


def main(argv=None):
    p = ArgumentParser(prog="python -m experiments.keep", description=__doc__.split("\n\n")[0])
    p.add_argument("verb", choices=("save", "restore"))
    p.add_argument("--checkout", default=".", help="where the out-* runs dirs are (default: here)")
    p.add_argument("--kept", default=str(KEPT), help="where the kept files go (default: results/runs)")
    with user_errors("keep.py"):
        args = p.parse_args(sys.argv[1:] if argv is None else argv)
        for flag, folder in (("--checkout", args.checkout), ("--kept", args.kept)):
            if not Path(folder).is_dir() and (flag == "--checkout" or args.verb == "restore"):
                raise UserError(f"{flag} {folder} is not a folder; give the checkout (default: here) and the kept "
                                f"runs (default: results/runs) as they are")
        n = (save if args.verb == "save" else restore)(Path(args.checkout), Path(args.kept))
    print(f"{args.verb}: {n} file(s)")


if __name__ == "__main__":
    main()
