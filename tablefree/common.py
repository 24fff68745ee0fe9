"""What every script shares: the one kind of user error, printed as one line
`<script>: error: <problem>; <fix>` with exit status 1 and never a traceback; and outputs written
so that nothing already on disk is lost: no error, crash or full disk ever leaves half a file or
half a folder (atomic, fsynced replaces of files and of whole folders; logs appended one line at
a time), and no command writes over a run or a dataset it did not make (check_output)."""

import argparse
import ctypes
import dataclasses
import errno
import fcntl
import fnmatch
import math
import os
import re
import shutil
import signal
import sys
import threading
import zlib
from contextlib import contextmanager, nullcontext, suppress
from pathlib import Path


class UserError(Exception):
    """A problem with what the user asked for or gave us (a setting, a file, a checkpoint).

    Its message names the problem and the fix in one line; scripts print it as
    `<script>: error: <message>` and exit with status 1, never with a traceback."""


def interrupt_quietly(module, script):
    """What every script does first: until user_errors begins, Ctrl-C ends it with one line naming
    script, exit status 1, where module (the caller's __name__) is "__main__". Only imports run
    before user_errors (torch's take a second or more), so nothing needs flushing: the process ends
    at once (os._exit), since an exception raised inside a C extension's import can come back as
    that import's own ImportError and traceback (numpy's, under torch's)."""
    def stop(signum, frame):
        os.write(2, f"{script}: interrupted while starting; nothing was written\n".encode())
        os._exit(1)
    if module == "__main__":
        signal.signal(signal.SIGINT, stop)


INTERRUPTED = "every file it writes is replaced whole or not at all, so what was there is intact; run it again"


@contextmanager
def user_errors(script, interrupted=INTERRUPTED):
    """Turn a UserError raised inside the block into the script's one-line error and exit 1, and
    Ctrl-C into one line saying what it left (`interrupted`), exit 1: never a traceback.

    Under torchrun every rank meets the same error; only rank 0 prints it."""
    if threading.current_thread() is threading.main_thread():  # Ctrl-C is KeyboardInterrupt again (interrupt_quietly)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    except UserError as e:
        sys.exit(f"{script}: error: {e}" if os.environ.get("RANK", "0") == "0" else 1)
    except KeyboardInterrupt:
        sys.exit(f"{script}: interrupted; {interrupted}" if os.environ.get("RANK", "0") == "0" else 1)


@contextmanager
def reader_may_leave():
    """Stop quietly, exit status 1, when the reader of stdout goes away (`python sample.py | head`)."""
    try:
        yield
        sys.stdout.flush()  # what is still buffered meets a closed pipe here, not in the exit's own flush
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        sys.exit(1)


def require(ok, name, value, rule):
    """The one-line error `name must be rule, not value` unless ok: every range check uses it."""
    if not ok:
        raise UserError(f"{name} must be {rule}, not {value!r}")


def plain_name(name, flag, makes):
    """name, if it is one file or folder name (it stays inside its folder); else the one-line error.
    makes: what it names, for the message ('<out_dir>/<name>/')."""
    if not name.strip() or name in (".", "..") or any(c in name for c in "/\\\0"):
        raise UserError(f"{flag} must be a plain name (it makes {makes}), not {name!r}: no '/', '\\', '.' or '..'")
    return name


def require_utf8(text, flag):
    """Refuse command-line text that is not UTF-8: its bytes arrive as lone surrogates ('\\udce9' for
    0xe9), which a tokenizer would silently replace."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise UserError(f"{flag} is not UTF-8 text (near character {e.start}); give UTF-8 text") from None


def path_problem(text):
    """Why text cannot name a file or folder ('' when it can): empty (never the current folder), a
    symlink loop on its way, or a link to nothing."""
    if not text.strip():
        return "is empty"
    try:
        os.stat(text)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "is or passes through a symlink loop"
        if os.path.islink(text):
            return f"is a link to nothing ({os.readlink(text)})"
    return ""


# the flags that name a file or a folder, in every script: ArgumentParser checks their shape
PATH_FLAGS = {"ckpt", "out", "out_dir", "start_file", "data", "data_dir", "counts_from", "text", "verify",
              "results_dir", "runs_dir", "gguf", "check", "tokenizer_from", "hub_data_files", "input", "checkout",
              "kept", "runs"}


def path_arg(text):
    problem = path_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"{text!r} {problem}; give a real path")
    return text


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are UserErrors: one line, no usage block (which --help prints); a flag
    of PATH_FLAGS is refused before any work when path_problem finds one."""

    def add_argument(self, *names, **kwargs):
        kind = {"type": path_arg} if names[-1].lstrip("-") in PATH_FLAGS and "type" not in kwargs else {}
        return super().add_argument(*names, **kwargs, **kind)

    def error(self, message):
        raise UserError(f"{message} (see {self.prog} --help)")


def pick_device(name):
    """'auto' is cuda, then mps, then cpu; another name ('cpu', 'cuda:1', 'mps') if it exists."""
    import torch
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    try:
        kind = torch.device(name).type
    except (RuntimeError, ValueError):
        raise UserError(f"device {name!r} is not a device name; use 'auto', 'cpu', 'cuda', 'cuda:1' or 'mps'") from None
    missing_cuda = kind == "cuda" and not torch.cuda.is_available()
    missing_mps = kind == "mps" and not torch.backends.mps.is_available()
    if missing_cuda or missing_mps or kind not in ("cpu", "cuda", "mps"):
        raise UserError(f"device {name!r} is not available on this machine; use 'cpu' or 'auto'")
    return name


DTYPES = ("float32", "bfloat16", "float16")  # the dtype setting's names: torch's own


def pick_dtype(name, device):
    """(resolved name, torch dtype, autocast context) for a dtype name on a device.

    'auto' is bfloat16 on GPUs that support it (float16 on older ones), float32 elsewhere: on
    a CPU, float32 matmuls are what the tests and the quick start are measured with."""
    import torch
    device_type = device.split(":")[0]
    if name == "auto":
        name = "float32" if device_type != "cuda" else "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    if name not in DTYPES:
        raise UserError(f"dtype must be 'auto' or one of {', '.join(DTYPES)}, not {name!r}")
    dtype = getattr(torch, name)
    autocast = nullcontext() if dtype == torch.float32 else torch.autocast(device_type, dtype=dtype)
    return name, dtype, autocast


def three(x):
    """x with 3 significant digits, trailing zeros kept: 112, 27.0, 5.60, 0.0120."""
    return f"{x:.{max(0, 2 - math.floor(math.log10(abs(x))))}f}" if x else "0"


def duration(hours):
    """Hours, or minutes or seconds for short runs: 92.6 h, 14.0 min."""
    if hours >= 1:
        return f"{three(hours)} h"
    return f"{three(60 * hours)} min" if hours >= 1 / 60 else f"{three(3600 * hours)} s"


def write_atomic(path, contents):
    """Replace path with contents (str, bytes, or a function that writes to a binary file) so
    that a reader or a crash sees the old file or the whole new one, never half of it."""
    with replacing(path) as tmp, open(tmp, "wb") as f:
        if callable(contents):
            contents(f)
        else:
            f.write(contents.encode("utf-8") if isinstance(contents, str) else contents)


@contextmanager
def replacing(path):
    """A temporary path beside `path` for a writer that opens files itself (gguf's); when the
    block ends it becomes path atomically, or, if anything failed, it goes and path stays.

    The new bytes are fsynced before the rename and the rename before returning; a failed write
    (a full disk, a read-only directory) is a UserError. The temporary name is this process's own, so
    two processes writing one file at once (the queue's lanes) never rename each other's away."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())  # the bytes are on disk before the rename makes them the file
        os.replace(tmp, path)
        fsync_directory(path.parent)  # and the rename itself survives a crash
    except Exception as e:
        with suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise write_failed(path, e) from None


def write_failed(path, e):
    """The one-line error for a write to path that failed with e (an OSError, or the error of a
    library that caught one: torch.save's); e itself when it is no such failure."""
    if isinstance(e, UserError):  # a refusal of the writer's own (raised while handling an OSError or not)
        return e
    error = e if isinstance(e, OSError) else e.__context__
    if not isinstance(error, OSError):
        return e
    read = error.filename and not str(Path(os.fsdecode(error.filename)).resolve()).startswith(str(Path(path).resolve()))
    if read:  # an input the writer read (a folder given as a file, a file gone), not what it writes
        return UserError(f"cannot read {error.filename} ({error.strerror or error}); nothing was written: give a "
                         f"readable file there, then run again")
    kept = "the previous version is intact" if Path(path).exists() else "nothing was left half-written"
    fix = f"{FIXES[error.errno]} or " if error.errno in FIXES else ""
    return UserError(f"cannot write {path} ({error.strerror or error}); {kept}: {fix}choose another directory, then "
                     f"run again")


# what to do about a write that failed, by its errno (None: a library's own short write, numpy's)
FIXES = {errno.ENOSPC: "free some disk space", errno.EDQUOT: "free some of your disk quota",
         errno.EFBIG: "raise the file-size limit (ulimit -f)", errno.EACCES: "make the folder writable",
         None: "free some disk space (or raise the file-size limit, ulimit -f)"}


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
        raise UserError(f"cannot append to {path} ({e.strerror}); {FIXES.get(e.errno, 'look at the folder')}, then "
                        f"resume the run") from None


@contextmanager
def writing(path, command, make_parent=None):
    """This process as the one writer of path (a run folder, a dataset, an export) while the block runs:
    an flock on .<name>.writing beside path's real path, taken before anything there is read or written
    and let go (the file removed) as the block ends, or by the kernel however the process ends. Another
    holder is refused in one line naming its pid. make_parent: the flag naming path, to create its folder."""
    real = Path(os.path.realpath(path))
    lock = real.parent / f".{real.name}.writing"
    if make_parent:
        try:
            real.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"cannot write to {make_parent} {path}: {e.strerror}; choose a writable {make_parent}") from None
    if not real.parent.is_dir() or not os.access(real.parent, os.W_OK):
        yield
        return
    fd = held_lock(lock, path, command)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)  # for the refusal of the next one
        yield
    finally:
        with suppress(OSError):
            os.unlink(lock)  # still held: one that opened it meanwhile sees it gone (held_lock) and tries again
        os.close(fd)


def held_lock(lock, path, command):
    """An open descriptor of the file lock, flock-ed by this process: the file the name lock names when the
    lock was taken (a holder removes it as it lets go, so a lock on a removed file is tried again)."""
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            what = f"{lock} is not a file: remove it" if os.path.isdir(lock) else "give a path in a writable folder"
            raise UserError(f"cannot write {path} ({e.strerror}); {what}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 20, 0).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            raise UserError(f"{path} is being written by another {command} (process {holder}); wait for it to "
                            f"finish or stop it, or give this one another path") from None
        with suppress(OSError):
            if os.fstat(fd).st_ino == os.stat(lock).st_ino:
                return fd
        os.close(fd)  # the holder let go and removed the file between our open and our lock


# Files that hold work no command may destroy unless it made them itself: a run's and a dataset's,
# and the ones whose presence makes a folder one (MARKS).
RUN_FILES = ("ckpt.pt", "log.jsonl", "config.json")
DATASET_FILES = ("meta.json", "tokenizer.tiktoken", "train*.bin", "val*.bin", "counts.npy")
MARKS = {"ckpt.pt": "a run", "log.jsonl": "a run", "meta.json": "a dataset"}


def mark(command):
    """What every report of `command` starts with, where no person types: a Markdown report's first
    line, a JSON report's first key, a PNG's first text chunk (check_output replaces only ours)."""
    return f"tablefree: {command}"


def written_by(path, ours):
    """Whether the file at path starts with ours: magic bytes, a pattern of its first 4 KB, a command
    whose mark a report of path's kind starts with, or a tuple of those (any one). A command's mark
    ends where the command does: "tools.evaluatex" is not "tools.evaluate"'s."""
    with open(path, "rb") as f:
        head = f.read(4096)
    suffix = Path(path).suffix.lower()
    start = {".md": rb"<!-- written by ", ".json": rb'\{\s*"written_by": "', ".jsonl": rb'\{"written_by": "',
             ".png": rb"\x89PNG\r\n\x1a\n.{25}.{4}tEXtSoftware\x00"}.get(suffix)

    def starts(one):
        if isinstance(one, bytes):
            return head.startswith(one)
        if isinstance(one, re.Pattern):
            return one.match(head) is not None
        found = start is not None and re.match(start + re.escape(mark(one).encode()), head, re.S)
        if not found:
            return False
        after = head[found.end():found.end() + 1]
        if suffix == ".png":  # the text chunk's data: its length at bytes 33-37, from byte 41
            return found.end() == 41 + int.from_bytes(head[33:37], "big") or after == b" "
        return after in (b" ", b'"')  # the command's arguments, or the mark's end (' -->', '"')
    return any(map(starts, ours if isinstance(ours, tuple) else (ours,)))


def holds_work(folder):
    """'a run' or 'a dataset' when folder is one (by the files train.py and prepare.py write), else None."""
    return next((work for name, work in MARKS.items() if (Path(folder) / name).exists()), None)


def refuse_to_overwrite(out, overwrite):
    """A new run's out_dir: new, empty, or a run of train.py's (which --overwrite replaces); a folder of
    the user's own files only with --overwrite; never another command's folder (a dataset, an export),
    whatever --overwrite says. A folder is a run by its files (ckpt.pt, log.jsonl) or by the mark on
    its config.json (a run stopped before its first log line)."""
    out = Path(out)
    work = holds_work(out) or ("a Hugging Face export (tools.export's tablefree.json)"
                               if (out / "tablefree.json").is_file() else None)
    if work == "a dataset":
        work = "a prepared dataset (prepare.py's meta.json)"
    if work and work != "a run":
        raise UserError(f"{out} holds {work}, which --overwrite never replaces; choose another --out_dir "
                        f"for the run")
    config = out / "config.json"
    if work is None and config.is_file() and written_by(config, "python train.py"):
        work = "a run"  # stopped before it logged a line
    if work == "a run" and not overwrite:
        raise UserError(f"{out} already holds a run; continue it with --init_from=resume, "
                        f"choose another --out_dir, or replace it with --overwrite=True")
    held = sorted(p.name for p in out.iterdir()) if work is None and out.is_dir() else []
    if held and not overwrite:
        raise UserError(f"{out} holds files train.py did not write ({', '.join(held[:3])}"
                        f"{', ...' if len(held) > 3 else ''}); choose another --out_dir, or write the run among "
                        f"them with --overwrite=True")


def check_output(path, flag, own=None, ours=None, marked=None):
    """path, if a command may write it; else the one-line error naming the problem and `flag`.

    own=None: path is one file the command replaces. Refused: a folder; a file a run or a dataset
    needs (a checkpoint, a log, a config.json in a run's folder); any file in a dataset's folder; a
    file in a missing or read-only folder; an existing file that does not start
    with `ours` (written_by: a format's magic bytes, or the command whose mark its reports start
    with), which is the user's or another command's. own: path is a folder the command replaces
    whole, and own the names (fnmatch patterns) of the files it writes there. Refused besides: a
    file; a folder holding any other file (a run, a dataset, the user's own); with marked = (a file
    name, a command), a folder holding anything whose file of that name the command did not write
    (written_by): a folder is ours by our mark, never by its file names."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise UserError(f"cannot write {path}: {parent} is not a writable folder; give {flag} in one")
    if own is None:
        if path.is_dir():
            raise UserError(f"{path} is a folder; give {flag} a file path")
        work = holds_work(parent)
        if work == "a dataset":  # it holds what prepare.py writes, nothing else: prepare --force replaces it whole
            raise UserError(f"{parent} is a dataset's folder, which holds only what prepare.py writes; give {flag} "
                            f"a file elsewhere")
        if path.exists() and (path.name in MARKS or work and any(fnmatch.fnmatch(path.name, n) for n in RUN_FILES)):
            raise UserError(f"{path} belongs to {work or 'a run or a dataset'} and writing there would destroy it; "
                            f"give {flag} another file")
        if ours is not None and path.is_file() and not written_by(path, ours):
            raise UserError(f"{path} exists and this command did not write it; give {flag} a new path, or move that "
                            f"file away first")
        return path
    if path.is_file():
        raise UserError(f"{path} is a file; give {flag} a folder")
    if path.is_dir():
        held = sorted(p.name for p in path.iterdir())
        others = [name for name in held if not any(fnmatch.fnmatch(name, n) for n in own)]
        if held and marked and not others and not ((path / marked[0]).is_file() and written_by(path / marked[0], marked[1])):
            raise UserError(f"{path} holds files this command did not write ({', '.join(held[:3])}"
                            f"{', ...' if len(held) > 3 else ''}: no {marked[0]} of {marked[1]}'s); give {flag} another "
                            f"folder, or move that one away to let it be written")
        if others:
            what = holds_work(path) or "files this command did not write"
            raise UserError(f"{path} holds {what} ({', '.join(others[:3])}{', ...' if len(others) > 3 else ''}) "
                            f"that replacing it would destroy; give {flag} another folder")
    return path


def replace_folder(path, build):
    """Make the folder path anew, whole or not at all: build(tmp) writes it beside path, then the two
    are exchanged in one atomic rename (Linux's renameat2; two renames elsewhere), so a reader or a
    crash sees the old folder or the new one, never a mixture and never neither. A link to a folder is
    written through: its target is made anew, the link stays."""
    path = Path(os.path.realpath(path))
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)  # left by an interrupted run: never a finished folder
    tmp.mkdir()
    try:
        build(tmp)
        for f in tmp.rglob("*"):
            if f.is_file():
                with open(f, "rb") as handle:
                    os.fsync(handle.fileno())  # on disk before the exchange makes them the folder
        fsync_directory(tmp)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise (write_failed(path, e) if isinstance(e, Exception) else e) from None
    if path.exists() and _exchange(tmp, path):
        shutil.rmtree(tmp)  # the old folder, now under the temporary name
    else:
        old = path.with_name(path.name + ".old")
        if path.exists():
            os.rename(path, old)
        os.rename(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    fsync_directory(path.parent)


def _exchange(a, b):
    """Swap two paths atomically with renameat2(RENAME_EXCHANGE); False where the system has no such call."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    AT_FDCWD, RENAME_EXCHANGE = -100, 2
    if renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    error = ctypes.get_errno()
    if error in (errno.ENOSYS, errno.EINVAL):  # a kernel or filesystem without it
        return False
    raise OSError(error, os.strerror(error), str(b))


# ---- checkpoints: written whole, with the crc32 of everything in them ----

CKPT_NAME = "ckpt.pt"


def save_checkpoint(state, out_dir):
    """Write state to out_dir/ckpt.pt atomically (the old file stays until the new one is whole),
    with the crc32 of everything in it (state_crc32), marked as covering everything."""
    import torch
    state = {**{k: v for k, v in state.items() if k not in ("crc32", "crc32_covers")}, "crc32_covers": "everything"}
    state["crc32"] = state_crc32(state)
    write_atomic(Path(out_dir) / CKPT_NAME, lambda f: torch.save(state, f))


def model_state(model):
    """The model half of a checkpoint: raw weights (never a compile or DDP wrapper) and config."""
    return {"model": model.state_dict(), "model_config": dataclasses.asdict(model.config)}


def state_crc32(state, everything=True):
    """crc32 of a checkpoint: every tensor (weights, optimizer state, ...) with its path, dtype and
    shape, and (everything) every other value with its path and repr (the settings, the tokenizer,
    the step), in the dicts' order (torch.load keeps it). About 2 GB/s on one core: 2.8 s for the papers'
    32-layer shape with AdamW, 5.6 GB (dev/checksum_cost.py). everything=False: the tensors alone (to 2026-12-04)."""
    import torch
    crc = 0
    for path, value in leaves_of(state):
        if isinstance(value, torch.Tensor):
            crc = zlib.crc32(f"{path} {value.dtype} {tuple(value.shape)}".encode(), crc)
            crc = zlib.crc32(raw_bytes(value), crc)
        elif everything:
            crc = zlib.crc32(f"{path}={value!r}".encode(), crc)
    return crc


def raw_bytes(tensor):
    """A tensor's bytes as stored (uint8, a view where it can be), whatever its dtype."""
    import torch
    return tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()


def leaves_of(value, path=""):
    """(path, value) for every tensor and every other leaf in nested dicts and lists, depth first."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from leaves_of(item, f"{path}/{key}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from leaves_of(item, f"{path}/{index}")
    else:
        yield path, value
