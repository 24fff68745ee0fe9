"""Run settings: read from config files and the command line (parsed, never exec'd), then
checked (each number's range, each choice, the model they describe) before any work.

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
import io
import tokenize
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace

from model import GPTConfig
from tablefree.common import UserError, path_problem, require


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
        tree = ast.parse(open(path, encoding="utf-8").read(), filename=path)
    except OSError as e:
        raise UserError(f"cannot read config file {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise UserError(f"config file {path} is not UTF-8 (near byte {e.start}); save it as UTF-8") from None
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


def script_settings(script):
    """The settings of a script whose settings are `name = literal` lines at its top (train.py):
    {name: value} for every top-level assignment of an int, float, bool or str literal, read
    from the source, so that a tool can know train.py's defaults without importing it."""
    settings = {}
    for node in ast.parse(Path(script).read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                continue  # a computed value (DEFAULTS = ...), not a setting
            if type(value) in (int, float, bool, str):
                settings[node.targets[0].id] = value
    return settings


# ---- the checks: train.py and the experiments run them before any work ----

MODEL_KEYS = tuple(f.name for f in fields(GPTConfig) if f.name != "vocab_size")  # V: from the data

# the lowest value each numeric setting may take (GPTConfig checks the combinations)
AT_LEAST = {**dict.fromkeys(("eval_interval", "eval_iters", "log_interval", "batch_size",
                             "gradient_accumulation_steps", "block_size", "n_layer", "n_head", "n_embd", "pos_dim",
                             "code_dim"), 1),
            **dict.fromkeys(("mlp_width", "code_seed", "extra_bits", "max_iters", "warmup_iters", "lr_decay_iters",
                             "seed", "learning_rate", "min_lr", "weight_decay", "beta1", "beta2", "grad_clip",
                             "peak_flops", "vocab_size", "input_lr_scale"), 0)}
# the highest, so that an impossible size is a line before any work, not the allocator's traceback after it
AT_MOST = {**dict.fromkeys(("block_size", "batch_size", "gradient_accumulation_steps", "eval_iters", "mlp_width"),
                           1 << 20),
           **dict.fromkeys(("n_layer", "n_head"), 4096), "n_embd": 1 << 16, "pos_dim": 256, "code_dim": 1 << 16,
           **dict.fromkeys(("max_iters", "warmup_iters", "lr_decay_iters", "eval_interval", "log_interval"), 1 << 40)}
MICRO_BATCH_TOKENS = 1 << 24  # batch_size x block_size: 16.8M tokens, far past any GPU's memory
CHOICES = {"nonfinite": ("stop", "skip")}  # init_from: 'scratch', 'resume' or a checkpoint (checked when read)


def check_settings(settings):
    """The settings dict as a namespace (s.batch_size), after checking every value's range."""
    s = SimpleNamespace(**settings)
    for key, low in AT_LEAST.items():
        require(getattr(s, key) >= low, key, getattr(s, key), f"at least {low}")
    for key, high in AT_MOST.items():
        require(getattr(s, key) <= high, key, getattr(s, key), f"at most {high:,}")
    require(s.batch_size * s.block_size <= MICRO_BATCH_TOKENS, "batch_size x block_size",
            s.batch_size * s.block_size, f"at most {MICRO_BATCH_TOKENS:,} tokens a micro-batch")
    for key in ("beta1", "beta2"):
        require(getattr(s, key) < 1, key, getattr(s, key), "below 1")
    for key in ("seed", "code_seed"):  # torch's generators take 64-bit seeds
        require(getattr(s, key) < 1 << 63, key, getattr(s, key), "below 2^63")
    require(0 <= s.dropout < 1, "dropout", s.dropout, "in [0, 1)")
    require(s.rope_base > 0, "rope_base", s.rope_base, "above 0")
    require(s.min_lr <= s.learning_rate, "min_lr", s.min_lr, f"at most learning_rate ({s.learning_rate:g}): the "
            f"schedule decays from learning_rate down to min_lr")
    require(s.dataset.strip(), "dataset", s.dataset, "a dataset's name")
    for key in ("out_dir", "data_dir", "init_from", *(["codes_from"] if s.codes_from else [])):
        problem = path_problem(getattr(s, key))
        require(not problem, key, getattr(s, key), f"a real path (it {problem})")
    out, data = Path(s.out_dir).resolve(), Path(s.data_dir).resolve()
    if out == data or data / s.dataset in out.parents or data / "_sources" in (out, *out.parents):  # prepare.py's
        raise UserError(f"out_dir {s.out_dir} is data_dir {s.data_dir} or inside its dataset or its sources' cache, "
                        f"where prepare.py writes; give the run a folder of its own (--out_dir=out-mine)")
    for key, choices in CHOICES.items():
        require(getattr(s, key) in choices, key, getattr(s, key), " or ".join(map(repr, choices)))
    model_config(s, vocab_size=2)  # the model settings, checked before any work (V comes later)
    return s


def model_config(s, vocab_size):
    """GPTConfig from the model settings; what it refuses is a one-line error."""
    try:
        return GPTConfig(vocab_size=vocab_size, **{key: getattr(s, key) for key in MODEL_KEYS})
    except ValueError as e:
        raise UserError(str(e)) from None
