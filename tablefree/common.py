"""What every script shares: the one kind of user error, printed as one line
`<script>: error: <problem>; <fix>` with exit status 1 and never a traceback, and files written
so that no error, crash or full disk ever leaves half of one (atomic, fsynced replaces; logs
appended one line at a time)."""

import argparse
import os
import sys
from contextlib import contextmanager, suppress
from pathlib import Path


class UserError(Exception):
    """A problem with what the user asked for or gave us (a setting, a file, a checkpoint).

    Its message names the problem and the fix in one line; scripts print it as
    `<script>: error: <message>` and exit with status 1, never with a traceback."""


@contextmanager
def user_errors(script):
    """Turn a UserError raised inside the block into the script's one-line error and exit 1.

    Under torchrun every rank meets the same error; only rank 0 prints it."""
    try:
        yield
    except UserError as e:
        sys.exit(f"{script}: error: {e}" if os.environ.get("RANK", "0") == "0" else 1)


def require(ok, name, value, rule):
    """The one-line error `name must be rule, not value` unless ok: every range check uses it."""
    if not ok:
        raise UserError(f"{name} must be {rule}, not {value!r}")


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are UserErrors: one line, no usage block (which --help prints)."""

    def error(self, message):
        raise UserError(f"{message} (see {self.prog} --help)")


def write_atomic(path, contents):
    """Replace path with contents (str, bytes, or a function that writes to a binary file) so
    that a reader or a crash sees the old file or the whole new one, never half of it.

    The new bytes are fsynced before the rename and the rename before returning; if anything
    fails (a full disk, a read-only directory) the temporary file goes and the old file stays."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            if callable(contents):
                contents(f)
            else:
                f.write(contents.encode("utf-8") if isinstance(contents, str) else contents)
            f.flush()
            os.fsync(f.fileno())  # the bytes are on disk before the rename makes them the file
        os.replace(tmp, path)
        fsync_directory(path.parent)  # and the rename itself survives a crash
    except Exception as e:
        with suppress(OSError):
            tmp.unlink(missing_ok=True)
        error = e if isinstance(e, OSError) else e.__context__  # torch.save wraps a failed write
        if not isinstance(error, OSError):
            raise
        raise UserError(f"cannot write {path} ({error.strerror}); the previous version is intact: "
                        f"free some disk space or choose another directory, then run again") from None


def fsync_directory(directory):
    handle = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def append_line(path, line):
    """Append one line to a text file (a log), as one write."""
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
    except OSError as e:
        raise UserError(f"cannot append to {path} ({e.strerror}); free some disk space, "
                        f"then resume the run") from None


def writable_output(out):
    """Refuse an output path that cannot be written before any scoring, not after it."""
    parent = out.parent if str(out.parent) else Path(".")
    if out.is_dir() or not parent.is_dir() or not os.access(parent, os.W_OK):
        raise UserError(f"cannot write the results to {out}; give --out a file in a writable folder")
    return out
