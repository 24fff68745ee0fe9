"""A study's report files: where they go and whose they are (results_files, checked before the first
run), and the report, its numbers and its figure written marked as the command's (common.mark).
"""

import re
import subprocess
from pathlib import Path

from experiments.runs import ROOT
from tablefree.common import UserError, check_output, plain_name, write_atomic
from tablefree.reports import figure_png, json_report, keep_edited, markdown, write_together


def results_files(folder, name, study, argv=(), overwrite=False):
    """<folder>/<name>.md, .json and .png, checked before the first run rather than after the last:
    a file there is replaced only when the study (its module's name) wrote it (common.mark), and,
    unless overwrite, only when this very command line did (`python -m experiments.<study> argv`), it
    is not one of the repository's committed results (git tracks it) and it is as the study wrote it
    (reports.edited: not changed by the user since)."""
    folder = Path(folder)
    plain_name(name, "--name", "<results_dir>/<name>.md, .json and .png")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot write to --results_dir {folder}: {e.strerror}") from None
    files = [check_output(folder / f"{name}{ext}", "--results_dir or --name", ours=f"python -m experiments.{study}")
             for ext in (".md", ".json", ".png")]
    command = " ".join([f"python -m experiments.{study}", *(a for a in argv if a != "--overwrite")])
    for path in files[:2] if not overwrite else []:
        if path.exists() and committed(path):
            raise UserError(f"{path} is one of the repository's committed results; give --results_dir another "
                            f"folder, or --overwrite to replace it")
        theirs = (marked_command(path) or "").replace(" --overwrite", "") if path.exists() else command
        if theirs != command:
            raise UserError(f"{path} is the report of `{theirs}`, another command line; give --results_dir another "
                            f"folder, or --overwrite to replace it")
    for path in files if not overwrite else []:  # check_output found each ours above
        keep_edited(path, "--results_dir or --name", f"python -m experiments.{study}", "--overwrite")
    return files


def marked_command(path):
    """The command line whose mark a report of ours starts with (common.mark), or None."""
    head = Path(path).read_text(errors="replace")[:4096]
    found = re.match(r'(?:<!-- written by |\{\s*"written_by": ")tablefree: (.*?)(?: -->|")', head)
    return found.group(1) if found else None


def committed(path):
    """True when git tracks path in this checkout (a result the repository holds); False without git."""
    try:
        inside = Path(path).resolve().relative_to(ROOT)
    except ValueError:
        return False
    done = subprocess.run(["git", "ls-files", "--error-unmatch", str(inside)], cwd=ROOT, capture_output=True)
    return done.returncode == 0


def write_results(md, js, command, table, data, **dumps):
    """A study's report (Markdown) and its numbers (JSON: json.dumps with dumps), each marked as command's,
    written together or not at all."""
    write_together({md: markdown(command, table), js: json_report(command, {"command": command, **data}, **dumps)})


def save_figure(fig, axes, path, command):
    """Each of axes with its legend and a light grid, then fig written to path (write_figure)."""
    for ax in axes:
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    write_figure(fig, path, command)


def write_figure(fig, path, command):
    """fig as a PNG at path, atomically, marked as command's."""
    write_atomic(path, figure_png(fig, command))
