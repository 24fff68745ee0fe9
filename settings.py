"""How the scripts talk to the user and the disk: run settings from config files and the
command line, the device and dtype rules, the one kind of user error every script reports, and
atomic file writes (so that no error, crash or full disk ever leaves half a file).

    python train.py config/shakespeare.py --input=affine --max_iters 500

Arguments are applied left to right: a path ending in .py is a config file of plain
`name = value` assignments; `--key=value` and `--key value` set one setting. Nothing is
exec'd: values in config files and on the command line are Python literals read with
`ast.literal_eval` (a string setting takes the command-line text as it is). Every value must
have the type of its default (an int is accepted for a float); an unknown key is an error that
suggests the nearest key.
"""

import argparse
import ast
import difflib
import io
import os
import sys
import tokenize
from contextlib import contextmanager, nullcontext, suppress
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


def require(ok, name, value, rule):
    """The one-line error `name must be rule, not value` unless ok: every range check uses it."""
    if not ok:
        raise UserError(f"{name} must be {rule}, not {value!r}")


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are UserErrors: one line, no usage block (which --help prints)."""

    def error(self, message):
        raise UserError(f"{message} (see {self.prog} --help)")


def check(key, value, defaults):
    """value converted to the type of defaults[key]; a UserError for an unknown key or type."""
    if key not in defaults:
        near = difflib.get_close_matches(key, defaults, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise UserError(f"unknown setting {key!r}{hint}")
    expected = type(defaults[key])
    if expected is float and type(value) is int:
        return float(value)
    if type(value) is not expected:
        raise UserError(f"{key} must be {expected.__name__}, got {value!r} ({type(value).__name__})")
    return value


def read_config_file(path, settings, defaults, given=None):
    """Apply a config file's `name = literal` lines to settings (a dict, updated in place)."""
    try:
        tree = ast.parse(open(path).read(), filename=path)
    except OSError as e:
        raise UserError(f"cannot read config file {path}: {e.strerror}") from None
    except SyntaxError as e:
        raise UserError(f"{path} line {e.lineno}: syntax error") from None
    for statement in tree.body:
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # a docstring
        is_assignment = isinstance(statement, ast.Assign) and len(statement.targets) == 1
        if not (is_assignment and isinstance(statement.targets[0], ast.Name)):
            raise UserError(f"{path} line {statement.lineno}: config files hold only "
                            f"`name = value` lines")
        key = statement.targets[0].id
        try:
            value = ast.literal_eval(statement.value)  # 3e-4, -1, "binary", True; never a call
        except ValueError:
            raise UserError(f"{path} line {statement.lineno}: {key} must be a literal value, "
                            f"not {ast.unparse(statement.value)!r}") from None
        try:
            settings[key] = check(key, value, defaults)
        except UserError as e:
            raise UserError(f"{path}: {e}") from None
        if given is not None:
            given.add(key)


def parse_value(text, default):
    """A command-line value: the text itself for string settings, else a Python literal."""
    if isinstance(default, str):
        return text  # --input affine, --out_dir out-small
    if isinstance(default, bool) and text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # not a literal: check() reports it with the expected type


def resolve(defaults, argv, given=None):
    """The settings dict: defaults, then each config file and --key=value / --key value in order.

    The keys that a config file or the command line set are added to the set `given`, if one
    is passed (train.py uses them to tell a setting asked for from a default)."""
    settings = dict(defaults)
    args = list(argv)
    while args:
        arg = args.pop(0)
        if not arg.startswith("--"):
            if not arg.endswith(".py"):
                raise UserError(f"unexpected argument {arg!r}; give config files (*.py) "
                                f"and --key=value")
            read_config_file(arg, settings, defaults, given)
            continue
        key, has_value, text = arg[2:].partition("=")
        if not has_value:
            if not args:
                raise UserError(f"--{key} needs a value: --{key}=VALUE or --{key} VALUE")
            text = args.pop(0)
        settings[key] = check(key, parse_value(text, defaults.get(key)), defaults)
        if given is not None:
            given.add(key)
    return settings


def settings_help(script, defaults):
    """--help for a script whose settings are commented assignments at its top (train.py).

    Each line is read from the script's own source, `--key=default  comment`, so the comments
    there are the only copy of what each setting means; comment lines between them are headings."""
    source = Path(script).read_text()
    comments = {t.start[0]: t.string.lstrip("#").strip() for t in
                tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.COMMENT}
    assigned = {node.lineno: node.targets[0].id for node in ast.parse(source).body
                if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) in defaults}
    lines = []
    for number in range(min(assigned), max(assigned) + 1):
        if number in assigned:
            key = assigned[number]
            lines.append((f"  --{key}={defaults[key]!r}".ljust(33) + " " + comments.get(number, "")).rstrip())
        elif number in comments and not comments[number].startswith("---"):
            lines.append(comments[number])
    return "\n".join(lines)


# The device and dtype rules need torch; it is imported inside them so that prepare.py, which
# uses only UserError from this file, starts without loading torch (2 s here).

def pick_device(name):
    """'auto' is cuda, then mps, then cpu; another name ('cpu', 'cuda:1', 'mps') if it exists."""
    import torch
    if name == "auto":
        if torch.cuda.is_available():
            return "cuda"
        return "mps" if torch.backends.mps.is_available() else "cpu"
    missing_cuda = name.startswith("cuda") and not torch.cuda.is_available()
    missing_mps = name == "mps" and not torch.backends.mps.is_available()
    if missing_cuda or missing_mps:
        raise UserError(f"device {name!r} is not available on this machine; use 'cpu' or 'auto'")
    return name


GPU_PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12,
                 "L4": 121e12, "RTX 4090": 165e12, "RTX 3090": 71e12, "V100": 125e12}  # dense FLOP/s


def peak_flops_of(device_type, configured):
    """One device's peak FLOP/s for MFU: the configured value, else the table above for known GPUs."""
    import torch
    if configured or device_type != "cuda":
        return configured
    name = torch.cuda.get_device_name()
    return next((flops for key, flops in GPU_PEAK_BF16.items() if key in name), 0.0)


def pick_dtype(name, device):
    """(resolved name, dtype, autocast context) for a dtype name on a device.

    'auto' is bfloat16 on GPUs that support it (float16 on older ones), float32 elsewhere: on
    a CPU, float32 matmuls are what the tests and the quick start are measured with."""
    import torch
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    device_type = device.split(":")[0]
    if name == "auto":
        if device_type == "cuda":
            name = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
        else:
            name = "float32"
    if name not in dtypes:
        raise UserError(f"dtype must be 'auto' or one of {', '.join(dtypes)}, not {name!r}")
    dtype = dtypes[name]
    autocast = nullcontext() if dtype == torch.float32 else torch.autocast(device_type, dtype=dtype)
    return name, dtype, autocast
