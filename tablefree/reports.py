"""What the studies and tools report, marked as theirs and sealed: a Markdown report, a JSON report
(or JSON lines) and a PNG figure, each starting with its command's mark (common.mark), so a later run
replaces only its own, and each carrying the sha256 of its own bytes (its digest), so a later run
sees a user's edit and keeps it (check_report) rather than replacing it without a word.

The digest is the sha256 of the file with the digest's 64 hex digits written as zeros: one rule for
every text format, wherever the digest sits (a JSON report's second key, a Markdown report's last
line). A PNG's is a text chunk just before its end, over every byte before that chunk."""

import hashlib
import io
import json
import re
import struct
import zlib
from contextlib import ExitStack
from pathlib import Path

from tablefree.common import UserError, check_output, mark, replacing

ZEROS = b"0" * 64
DIGEST = re.compile(rb'digest(?:": "| )sha256:([0-9a-f]{64})')  # a JSON key's value, a Markdown comment's
PNG_DIGEST = b"tEXtdigest\x00sha256:"  # a text chunk's type, keyword and the digest's start
PNG_CHUNK = 4 + len(PNG_DIGEST) + 64 + 4  # its length field, type and data (the digest), crc32
PNG_END = 12  # the IEND chunk every PNG ends with


def sealed(text):
    """text (its digest written as zeros) as bytes with the digest filled in."""
    data = text.encode("utf-8")
    found = DIGEST.search(data)
    return data[:found.start(1)] + hashlib.sha256(data).hexdigest().encode() + data[found.end(1):]


def markdown(command, text):
    return sealed(f"<!-- written by {mark(command)} -->\n{text.rstrip()}\n\n"
                  f"<!-- digest sha256:{ZEROS.decode()} -->\n")


def markdown_body(text):
    """The lines of a Markdown report of ours (markdown's text) between its mark and its digest."""
    return [line for line in text.splitlines()[1:] if not DIGEST.search(line.encode())]


def json_report(command, data, indent=2, lines=(), **dumps):
    """The report as JSON (data after our mark and the digest); with lines (JSON lines, as text),
    the report is their first line (indent None) and the digest covers them all."""
    head = json.dumps({"written_by": mark(command), "digest": f"sha256:{ZEROS.decode()}", **data},
                      indent=indent, **dumps)
    return sealed("".join([head + ("\n" if lines else ""), *lines]))


def figure_png(fig, command, **savefig):
    """fig as PNG bytes (savefig's settings), our mark its first text chunk and its digest its last."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, metadata={"Software": mark(command)}, **savefig)
    data = buf.getvalue()
    body = data[:-PNG_END]
    digest = PNG_DIGEST + hashlib.sha256(body).hexdigest().encode()
    chunk = struct.pack(">I", len(digest) - 4) + digest + struct.pack(">I", zlib.crc32(digest))
    return body + chunk + data[-PNG_END:]


def edited(path):
    """Why the report at path is not as we wrote it, or None when it is: its digest no longer matches
    its bytes, or it carries none (written before reports were sealed, 2026-12-06, or edited away)."""
    data = Path(path).read_bytes()
    if data.startswith(b"\x89PNG"):
        chunk, body = data[-PNG_END - PNG_CHUNK:-PNG_END], data[:-PNG_END - PNG_CHUNK]
        found = chunk[4:4 + len(PNG_DIGEST)] == PNG_DIGEST and chunk[4 + len(PNG_DIGEST):-4]
        zeroed = body
    else:
        match = DIGEST.search(data)
        found = match and match.group(1)
        zeroed = match and data[:match.start(1)] + ZEROS + data[match.end(1):]
    if not found:
        return "it carries no digest: written before reports were sealed, or edited"
    return None if hashlib.sha256(zeroed).hexdigest().encode() == found else "its digest no longer matches"


def check_report(path, flag, ours, replace, replace_flag="--force"):
    """check_output's path for a report of ours (written_by `ours`), refusing besides a report the user
    may have changed since we wrote it (keep_edited), unless replace (replace_flag given)."""
    path = check_output(path, flag, ours=ours)
    if not replace:
        keep_edited(path, flag, ours, replace_flag)
    return path


def keep_edited(path, flag, ours, replace_flag):
    """The one-line refusal of a report at path that is not as `ours` wrote it (edited), naming the
    flag that would replace it; nothing when there is none or it is as written."""
    why = path.is_file() and edited(path)
    if why:
        raise UserError(f"{path} may have been changed since `{ours}` wrote it ({why}); give {flag} another path "
                        f"to keep it, or {replace_flag} to replace it")


def write_together(files):
    """Each of files ({path: bytes}) replaced whole, and all of them or none: a report's Markdown and
    its JSON never disagree. Every new file is written beside its path first (common.replacing), and
    they are renamed into place only once all are written (a full disk, a file-size limit)."""
    with ExitStack() as stack:
        for path, data in files.items():
            with open(stack.enter_context(replacing(path)), "wb") as f:
                f.write(data)


def pyplot():
    """matplotlib.pyplot drawing to files, or None (and a note) when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install -r requirements-extras.txt)")
        return None
    return plt
