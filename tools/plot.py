"""A picture of runs' losses: each run's validation loss at every evaluation and its training loss
at every log line, against the step, read from the log.jsonl train.py writes.

    python -m tools.plot out/                          # -> out/loss.png
    python -m tools.plot out/ out-learned/ out-frozen/ # several runs in one picture, in the first one's folder
    python -m tools.plot out-compare/cpu/*-seed0 --out seed0.png

matplotlib is an optional requirement (requirements-extras.txt).
"""

from tablefree.common import interrupt_quietly
interrupt_quietly(__name__, "plot.py")  # is one line, not a traceback

import math
import sys
from pathlib import Path

from tablefree.common import ArgumentParser, UserError, reader_may_leave, user_errors, write_atomic
from tablefree.reports import check_report, figure_png, pyplot
from tablefree.rundir import read_log

COMMAND = "python -m tools.plot"  # the mark its figures carry (common.mark)


def curves(records):
    """{'train': (steps, losses), 'val': (steps, losses)} of one run's log records: a finite number
    each (a damaged record, its loss text, NaN or infinite, is left out: damaged() counts them)."""
    keys = {"train": "loss", "val": "val_loss"}
    return {name: ([r["iter"] for r in records if drawable(r, key)], [r[key] for r in records if drawable(r, key)])
            for name, key in keys.items()}


def drawable(record, key):
    value = record.get(key)
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def damaged(records):
    """How many records hold a loss that is not a finite number."""
    return sum(any(key in r and not drawable(r, key) for key in ("loss", "val_loss")) for r in records)


def plot(runs, out):
    """Draw every run's curves (runs: {label: log records}) into the PNG file out."""
    plt = pyplot()
    if plt is None:
        raise UserError("matplotlib is not installed; pip install -r requirements-extras.txt")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, records in runs.items():
        run = curves(records)
        line, = ax.plot(*run["val"], marker="o", markersize=3, label=label)
        ax.plot(*run["train"], color=line.get_color(), alpha=0.35, linewidth=1)
    ax.set(xlabel="step", ylabel="loss (nats per token)", title="validation (points) and training (faint) loss")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    write_atomic(out, figure_png(fig, COMMAND, bbox_inches="tight"))
    plt.close(fig)


def main(argv=None):
    p = ArgumentParser(prog="python -m tools.plot", description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="run directories (each with the log.jsonl train.py wrote)")
    p.add_argument("--out", help="the PNG file to write (default: loss.png in the first run's folder)")
    p.add_argument("--force", action="store_true", help="replace --out even where it was changed since this "
                   "command wrote it")
    with reader_may_leave(), user_errors("plot.py"):  # a closed pipe: quietly
        args = p.parse_args(argv)
        runs = {}
        for run in map(Path, args.runs):
            if not (run / "log.jsonl").is_file():
                raise UserError(f"{run} has no log.jsonl; give run directories train.py wrote")
            runs[str(run)] = read_log(run / "log.jsonl")
            bad = damaged(runs[str(run)])
            if bad:  # as read_log drops a line that is not JSON: left out, counted, said
                print(f"warning: {run}/log.jsonl: left out {bad} record(s) whose loss is not a finite number",
                      file=sys.stderr)
        empty = [run for run, records in runs.items() if not any(steps for steps, _ in curves(records).values())]
        if empty:
            raise UserError(f"{empty[0]}/log.jsonl holds no loss yet (no log line, no evaluation); plot it after "
                            f"its first log_interval steps")
        out = check_report(args.out or Path(args.runs[0]) / "loss.png", "--out", COMMAND, args.force)
        if out.suffix.lower() != ".png":
            raise UserError(f"--out {out} is not a .png path; tools.plot writes PNG images: give --out a name "
                            f"ending in .png")
        plot(runs, out)
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
