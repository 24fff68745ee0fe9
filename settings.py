"""Run settings from config files and the command line, the device and dtype rules, and the one
kind of user error every script reports.

    python train.py config/shakespeare.py --input=affine --max_iters 500

Arguments are applied left to right: a path ending in .py is a config file of plain
`name = value` assignments; `--key=value` and `--key value` set one setting. Nothing is
exec'd: values in config files and on the command line are Python literals read with
`ast.literal_eval` (a string setting takes the command-line text as it is). Every value must
have the type of its default (an int is accepted for a float); an unknown key is an error that
suggests the nearest key.
"""

import ast
import difflib
import sys
from contextlib import contextmanager, nullcontext


class UserError(Exception):
    """A problem with what the user asked for or gave us (a setting, a file, a checkpoint).

    Its message names the problem and the fix in one line; scripts print it as
    `<script>: error: <message>` and exit with status 1, never with a traceback."""


@contextmanager
def user_errors(script):
    """Turn a UserError raised inside the block into the script's one-line error and exit 1."""
    try:
        yield
    except UserError as e:
        sys.exit(f"{script}: error: {e}")


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


def read_config_file(path, settings, defaults):
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


def resolve(defaults, argv):
    """The settings dict: defaults, then each config file and --key=value / --key value in order."""
    settings = dict(defaults)
    args = list(argv)
    while args:
        arg = args.pop(0)
        if not arg.startswith("--"):
            if not arg.endswith(".py"):
                raise UserError(f"unexpected argument {arg!r}; give config files (*.py) "
                                f"and --key=value")
            read_config_file(arg, settings, defaults)
            continue
        key, has_value, text = arg[2:].partition("=")
        if not has_value:
            if not args:
                raise UserError(f"--{key} needs a value: --{key}=VALUE or --{key} VALUE")
            text = args.pop(0)
        settings[key] = check(key, parse_value(text, defaults.get(key)), defaults)
    return settings


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
