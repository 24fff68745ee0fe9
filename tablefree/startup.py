"""What every script does first (prepare, train, sample and the tools): until the script's own handling
of Ctrl-C begins (common.user_errors), Ctrl-C ends it with one line and exit status 1, not the traceback
of an import half done (torch takes a second or more to load, and nothing has been written yet)."""

import signal
import sys


def interrupt_quietly(module, script):
    """Ctrl-C from now until user_errors: one line naming script; where module (the caller's __name__) is
    "__main__" only, so importing a script (the tests do) changes nothing."""
    if module == "__main__":
        signal.signal(signal.SIGINT, lambda signum, frame: sys.exit(f"{script}: interrupted while starting; nothing was written"))
