"""How every script reports a bad input: one exception class, UserError, printed as one line
`<script>: error: <problem>; <fix>` with exit status 1, never a traceback."""

import argparse
import os
import sys
from contextlib import contextmanager


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
