"""tablefree/reports.py: every report of ours carries the sha256 of its own bytes, so a command run again
keeps a report the user edited (refused in one line naming the file and the flag that replaces it) and
replaces an untouched one."""

import hashlib
import json
import subprocess
import sys

import pytest

from conftest import ROOT
from tablefree.common import UserError, written_by
from tablefree.reports import check_report, edited, figure_png, json_report, markdown, pyplot
from tools import plot

COMMAND = "python -m tools.plot"


def test_the_digest_is_the_sha256_of_the_file_with_zeros_in_its_place():
    """Known bytes: the digest recomputed here by hand, outside the module's own search."""
    text = markdown(COMMAND, "# a report\n\n| a | b |\n")
    head, digest = text.rsplit(b"sha256:", 1)
    digest, tail = digest[:64], digest[64:]
    assert tail == b" -->\n" and hashlib.sha256(head + b"sha256:" + b"0" * 64 + tail).hexdigest().encode() == digest
    report = json.loads(json_report(COMMAND, {"loss": 1.5}))
    assert list(report) == ["written_by", "digest", "loss"] and report["loss"] == 1.5


@pytest.mark.parametrize("suffix", [".md", ".json", ".jsonl", ".png"])
def test_an_edit_anywhere_is_seen_and_the_untouched_file_is_ours(tmp_path, suffix):
    if suffix == ".png":
        plt = pyplot() or pytest.skip("matplotlib is not installed")
        fig, ax = plt.subplots()
        ax.plot([1, 2], [3, 4])
        data = figure_png(fig, COMMAND)
        plt.close(fig)
    elif suffix == ".jsonl":
        data = json_report(COMMAND, {}, indent=None, lines=['{"task": "val", "n": 1}\n', '{"task": "val", "n": 2}\n'])
    else:
        data = markdown(COMMAND, "| a | 1 |") if suffix == ".md" else json_report(COMMAND, {"a": 1})
    path = tmp_path / f"report{suffix}"
    path.write_bytes(data)
    assert written_by(path, COMMAND) and edited(path) is None
    for at in (len(data) // 3, len(data) // 2, len(data) - 20):  # head, middle, the digest's own line
        changed = bytearray(data)
        changed[at] ^= 1
        path.write_bytes(bytes(changed))
        assert edited(path) in ("its digest no longer matches", "it carries no digest: written before reports "
                                "were sealed, or edited"), at


def test_a_report_without_a_digest_is_not_taken_for_ours_unchanged(tmp_path):
    """Written before 2026-12-06, or its digest line deleted: which, nothing shows, so it is kept."""
    path = tmp_path / "old.md"
    path.write_bytes(markdown(COMMAND, "| a | 1 |").rsplit(b"\n\n<!-- digest", 1)[0])
    assert written_by(path, COMMAND) and edited(path) == ("it carries no digest: written before reports were "
                                                          "sealed, or edited")


def test_an_edited_report_is_kept_unless_replaced_on_purpose(tmp_path):
    path = tmp_path / "r.json"
    path.write_bytes(json_report(COMMAND, {"a": 1}))
    assert check_report(path, "--out", COMMAND, False) == path  # untouched: ours to replace
    path.write_bytes(path.read_bytes().replace(b'"a": 1', b'"a": 2'))
    with pytest.raises(UserError, match=r"r.json may have been changed since `python -m tools.plot` wrote it \(its "
                                        r"digest no longer matches\); give --out another path to keep it, or --force "
                                        r"to replace it"):
        check_report(path, "--out", COMMAND, False)
    assert check_report(path, "--out", COMMAND, True) == path


def test_plot_keeps_a_picture_the_user_changed(tmp_path, capsys):
    """The command itself: refused in one line naming --force, the picture untouched; --force replaces it."""
    pytest.importorskip("matplotlib")
    run = tmp_path / "a"
    run.mkdir()
    (run / "log.jsonl").write_text('{"iter": 0, "train_loss": 7.0, "val_loss": 6.9}\n{"iter": 10, "loss": 5.5}\n')
    plot.main([str(run)])
    png = run / "loss.png"
    plot.main([str(run)])  # our own, untouched: replaced
    ours = png.read_bytes()
    mine = ours[:len(ours) // 2] + bytes([ours[len(ours) // 2] ^ 1]) + ours[len(ours) // 2 + 1:]  # a pixel
    png.write_bytes(mine)
    with pytest.raises(SystemExit) as exit:
        plot.main([str(run)])
    assert str(exit.value) == (f"plot.py: error: {png} may have been changed since `{COMMAND}` wrote it (its digest "
                               f"no longer matches); give --out another path to keep it, or --force to replace it")
    assert png.read_bytes() == mine
    plot.main([str(run), "--force"])
    assert edited(png) is None


def test_a_reports_files_are_written_together_or_not_at_all(tmp_path):
    """Under a file-size limit the Markdown (written first) fits and the JSON does not: neither is replaced,
    and no temporary file is left (as tools.extend, the studies, bench and evaluate write theirs)."""
    code = ("import resource, sys\n"
            "from tablefree.reports import write_together\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
            "write_together({sys.argv[1]: b'new report', sys.argv[2]: b'x' * 10000})\n")
    md, js = tmp_path / "r.md", tmp_path / "r.json"
    md.write_bytes(b"old report")
    js.write_bytes(b"old numbers")
    done = subprocess.run([sys.executable, "-c", code, str(md), str(js)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 1 and "File too large" in done.stderr, done.stderr
    assert (md.read_bytes(), js.read_bytes()) == (b"old report", b"old numbers")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "r.md"]
