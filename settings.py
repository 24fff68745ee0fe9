"""Run settings from config files and the command line, checked against train.py's defaults.

    python train.py config/shakespeare.py --input=affine --max_iters 500

Arguments are applied left to right: a path ending in .py is a config file of plain
assignments; `--key=value` and `--key value` set one setting. Nothing is exec'd: config
files are parsed with `ast` and may use only literals, arithmetic, and names assigned
earlier; command-line values are parsed as literals. Every value must have the type of its
default (an int is accepted for a float); unknown keys are errors that suggest the nearest key.
"""

import ast
import difflib
import operator
from contextlib import nullcontext

import torch

OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
             ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow, ast.Mod: operator.mod}


class SettingsError(Exception):
    """A bad config file or override; scripts print it as one line."""


def evaluate(node, names):
    """The value of a literal expression: constants, + - * / // ** %, unary minus, known names."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = evaluate(node.operand, names)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        return OPERATORS[type(node.op)](evaluate(node.left, names), evaluate(node.right, names))
    raise SettingsError(f"line {node.lineno}: only literals, arithmetic and earlier settings are allowed, not {ast.unparse(node)!r}")


def require_known(key, defaults):
    if key not in defaults:
        near = difflib.get_close_matches(key, defaults, n=1)
        raise SettingsError(f"unknown setting {key!r}" + (f"; did you mean {near[0]!r}?" if near else ""))


def check(key, value, defaults):
    """value converted to the type of defaults[key], or a SettingsError."""
    require_known(key, defaults)
    expected = type(defaults[key])
    if expected is float and type(value) is int:
        return float(value)
    if type(value) is not expected:
        raise SettingsError(f"{key} must be {expected.__name__}, got {value!r} ({type(value).__name__})")
    return value


def read_config_file(path, settings, defaults):
    """Apply a config file's assignments to settings (a dict, updated in place)."""
    try:
        tree = ast.parse(open(path).read(), filename=path)
    except OSError as e:
        raise SettingsError(f"cannot read config file {path}: {e.strerror}") from None
    except SyntaxError as e:
        raise SettingsError(f"{path} line {e.lineno}: syntax error") from None
    for statement in tree.body:
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # a docstring
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name)):
            raise SettingsError(f"{path} line {statement.lineno}: config files hold only `name = value` lines")
        key = statement.targets[0].id
        try:
            settings[key] = check(key, evaluate(statement.value, settings), defaults)
        except SettingsError as e:
            raise SettingsError(f"{path}: {e}") from None


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


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def pick_device(name):
    """'auto' is cuda, then mps, then cpu; any other name ('cpu', 'cuda:1', 'mps') is kept if it exists here."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    if (name.startswith("cuda") and not torch.cuda.is_available()) or (name == "mps" and not torch.backends.mps.is_available()):
        raise SettingsError(f"device {name!r} is not available on this machine; use 'cpu' or 'auto'")
    return name


def pick_dtype(name, device):
    """(resolved name, dtype, autocast context) for a dtype name on a device.

    'auto' is bfloat16 on GPUs that support it (float16 on older ones), float32 elsewhere: on
    a CPU, float32 matmuls are what the tests and the quick start are measured with."""
    device_type = device.split(":")[0]
    if name == "auto":
        name = ("bfloat16" if torch.cuda.is_bf16_supported() else "float16") if device_type == "cuda" else "float32"
    if name not in DTYPES:
        raise SettingsError(f"dtype must be 'auto' or one of {', '.join(DTYPES)}, not {name!r}")
    dtype = DTYPES[name]
    return name, dtype, nullcontext() if dtype == torch.float32 else torch.autocast(device_type, dtype=dtype)


def resolve(defaults, argv):
    """The settings dict: defaults, then each config file and --key=value / --key value in order."""
    settings = dict(defaults)
    args = list(argv)
    while args:
        arg = args.pop(0)
        if not arg.startswith("--"):
            if not arg.endswith(".py"):
                raise SettingsError(f"unexpected argument {arg!r}; give config files (*.py) and --key=value")
            read_config_file(arg, settings, defaults)
            continue
        key, has_value, text = arg[2:].partition("=")
        if not has_value:
            if not args:
                raise SettingsError(f"--{key} needs a value: --{key}=VALUE or --{key} VALUE")
            text = args.pop(0)
        require_known(key, defaults)
        settings[key] = check(key, parse_value(text, defaults[key]), defaults)
    return settings
