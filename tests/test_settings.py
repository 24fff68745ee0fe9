"""Config files and command-line overrides. Run: python -m pytest tests/test_settings.py"""

import pytest
import torch

import train
from conftest import ROOT
from tablefree.common import UserError, pick_device, pick_dtype
from tablefree.configurator import resolve, script_settings
from tablefree.device import measured_on

DEFAULTS = {"input": "binary", "n_layer": 12, "learning_rate": 6e-4, "compile": True, "max_iters": 5000}


def test_both_override_forms_and_types():
    s = resolve(DEFAULTS, ["--input=affine", "--n_layer", "4", "--learning_rate=1e-3", "--compile", "false"])
    assert s == {"input": "affine", "n_layer": 4, "learning_rate": 1e-3, "compile": False, "max_iters": 5000}
    assert resolve(DEFAULTS, ["--learning_rate", "1"])["learning_rate"] == 1.0  # an int is fine for a float
    assert type(resolve(DEFAULTS, ["--learning_rate", "1"])["learning_rate"]) is float
    assert resolve(DEFAULTS, ["--compile=True"])["compile"] is True


@pytest.mark.parametrize("argv, message", [
    (["--n_layers=4"], "unknown setting 'n_layers'; did you mean 'n_layer'?"),
    (["--n_layer=4.5"], "n_layer must be int, got 4.5"),
    (["--n_layer=four"], "n_layer must be int, got 'four'"),
    (["--compile=yes"], "compile must be bool"),
    (["--max_iters"], "--max_iters needs a value"),
    (["train.txt"], "unexpected argument 'train.txt'"),
    (["--learning_rate=__import__('os').system('echo hacked')"], "learning_rate must be float"),
])
def test_bad_overrides_are_clear_errors(argv, message):
    with pytest.raises(UserError, match=message.replace("?", r"\?").replace("(", r"\(").replace(")", r"\)")):
        resolve(DEFAULTS, argv)


def test_config_files_are_parsed_not_executed(tmp_path):
    good = tmp_path / "good.py"
    good.write_text('"""doc"""\nn_layer = 6\nmax_iters = 32_425\ninput = "learned"\nlearning_rate = -1e-3\n')
    s = resolve(DEFAULTS, [str(good), "--n_layer=8"])  # later arguments win
    assert s["max_iters"] == 32425 and s["input"] == "learned" and s["n_layer"] == 8 and s["learning_rate"] == -1e-3
    marker = tmp_path / "ran"
    evil = tmp_path / "evil.py"
    evil.write_text(f"n_layer = __import__('pathlib').Path({str(marker)!r}).touch()\n")
    with pytest.raises(UserError, match="line 1: n_layer must be a literal value, not"):
        resolve(DEFAULTS, [str(evil)])
    assert not marker.exists()
    arithmetic = tmp_path / "arithmetic.py"
    arithmetic.write_text("n_layer = 4\nmax_iters = n_layer * 100\n")
    with pytest.raises(UserError, match="line 2: max_iters must be a literal value, not 'n_layer \\* 100'"):
        resolve(DEFAULTS, [str(arithmetic)])
    typo = tmp_path / "typo.py"
    typo.write_text("n_layer = 2\nlearnig_rate = 1e-3\n")
    with pytest.raises(UserError, match="typo.py: unknown setting 'learnig_rate'; did you mean 'learning_rate'"):
        resolve(DEFAULTS, [str(typo)])
    statement = tmp_path / "statement.py"
    statement.write_text("import os\n")
    with pytest.raises(UserError, match="line 1: config files hold only `name = value` lines"):
        resolve(DEFAULTS, [str(statement)])
    with pytest.raises(UserError, match="cannot read config file"):
        resolve(DEFAULTS, [str(tmp_path / "missing.py")])


def test_device_and_dtype_choices():
    assert pick_device("cpu") == "cpu"
    if not torch.cuda.is_available() and not torch.backends.mps.is_available():
        assert pick_device("auto") == "cpu"
    name, dtype, autocast = pick_dtype("auto", "cpu")
    assert name == "float32" and dtype == torch.float32
    with autocast:  # float32 needs no autocast: matmuls stay float32
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32
    _, dtype, autocast = pick_dtype("bfloat16", "cpu")
    with autocast:
        assert dtype == torch.bfloat16 and (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    with pytest.raises(UserError, match="dtype must be 'auto' or one of float32, bfloat16, float16, not 'int8'"):
        pick_dtype("int8", "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="device 'cuda:1' is not available on this machine; use 'cpu' or 'auto'"):
            pick_device("cuda:1")


def test_a_results_file_says_where_it_was_measured():
    info = {"cpu": "AMD EPYC", "threads": 1, "gpu": None, "torch": "2.13.0+cpu", "date": "2026-12-02 15:00 UTC"}
    assert measured_on("python -m experiments.scaling", info) == \
        "`python -m experiments.scaling` on AMD EPYC (1 thread), torch 2.13.0+cpu, finished 2026-12-02 15:00 UTC."
    assert measured_on("c", {**info, "threads": 16, "gpu": "NVIDIA H200"}).startswith("`c` on AMD EPYC (16 threads), GPU: NVIDIA H200,")


def test_train_py_defaults_read_from_its_source():
    """The experiments know train.py's settings without importing it: the same dict it builds."""
    assert script_settings(ROOT / "train.py") == train.DEFAULTS and train.DEFAULTS["input"] == "binary"
