"""The papers' headline configs: the papers' parameter counts, fair controls, and cost comments
that are the dry run's own output.

    python -m pytest tests/test_configs.py            # counts and the dry run's counting lines
    python -m pytest tests/test_configs.py -m slow    # and each config's whole dry run (the probes)
"""

import re
import shlex
import subprocess
import sys

import numpy as np
import pytest
import torch

import train
from conftest import ROOT
from tablefree.configurator import check_settings, resolve
from tablefree.cost import describe_cost, estimate_cost

# run name -> (what the paper states, tolerance, why ours differs by up to that much)
PAPER_COUNTS = {
    "kronecker_124m": (124e6, 0.03, "GPT-2 124M class: our own untied head and the 3.1M projection, no position table"),
    "tied_124m": (124e6, 0.01, "nanoGPT's 124M counts a 1,024 x 768 position table and biases we do not have"),
    "binary_1p7b": (1.711e9, 0.005, "the paper's 1.711B; our depth is a whole number of our blocks"),
    "affine_1p7b": (1.711e9, 0.005, "as binary_1p7b"),
    "learned_1p7b": (1.711e9 + 100.7e6, 0.005, "1.711B plus the 100.7M table the fixed codes remove"),
    "frozen_270m": (100e6, 0.02, "the paper's 'about 100M': Gemma's body with the code head's projection and bias"),
    "learned_270m": (268e6, 0.005, "Gemma 3 270M's 268.1M: its body and its one tied table"),
}
GEMMA_BODY = 268_098_176 - 262_144 * 640  # Gemma 3 270M's published config, less its 262,144 x 640 table
GEMMA_RUNS = ("frozen_270m", "learned_270m", "frozen_270m_ternary", "learned_270m_ternary")
# each group's runs differ only in these settings: their input (and out_dir), nothing the comparison needs equal
GROUPS = {("learned", "binary", "affine"): {"input", "out_dir"},
          ("kronecker_124m", "tied_124m"): {"input", "pos_dim", "tie_weights", "out_dir"},
          ("learned_1p7b", "binary_1p7b", "affine_1p7b"): {"input", "out_dir"},
          GEMMA_RUNS: {"input", "tie_weights", "head", "code_dim", "codes_from", "body", "out_dir"}}
CONFIGS = sorted({name for group in GROUPS for name in group})


def settings_of(name):
    return check_settings(resolve(train.DEFAULTS, [str(ROOT / "config" / f"{name}.py")]))


def cost_of(name, activations=False):
    s = settings_of(name)
    return estimate_cost(s, s.vocab_size, activations)


@pytest.mark.parametrize("name", PAPER_COUNTS)
def test_parameter_count_is_the_papers(name):
    stated, tolerance, _ = PAPER_COUNTS[name]
    assert cost_of(name)["params"]["trainable"] == pytest.approx(stated, rel=tolerance)


def test_the_tables_are_the_papers():
    """What a learned table adds: 67.1M (12.5% of the learned baseline) at the 32-layer shape,
    100.7M at the 1.7B shape, Gemma's tied 168M of 268M at its shape (less the code head's)."""
    def trainable(name):
        return cost_of(name)["params"]["trainable"]
    assert trainable("learned") - trainable("binary") == 65_536 * 1024
    assert (trainable("learned") - trainable("binary")) / trainable("learned") == pytest.approx(0.125, abs=0.0005)
    assert trainable("learned_1p7b") - trainable("binary_1p7b") == 65_536 * 1536 == pytest.approx(100.7e6, abs=0.05e6)
    code_head = 640 * 512 + 262_144  # the code head's projection and bias
    assert trainable("learned_270m") - trainable("frozen_270m") == 262_144 * 640 - code_head
    assert trainable("learned_270m") / trainable("frozen_270m") == pytest.approx(2.6, abs=0.06)  # the paper's 2.6x


@pytest.mark.parametrize("name", GEMMA_RUNS)
def test_the_gemma_shaped_body_has_gemmas_parameters(name):
    # our GELU MLP of 3,072 has the gated 2,048's weights; LayerNorm and per-head differences remain
    assert cost_of(name)["params"]["body"] == pytest.approx(GEMMA_BODY, rel=0.005)


@pytest.mark.parametrize("group", GROUPS)
def test_runs_and_controls_differ_only_in_their_input(group):
    runs = {name: vars(settings_of(name)) for name in group}
    first = runs[group[0]]
    for name, settings in runs.items():
        differ = {key for key in settings if settings[key] != first[key]}
        assert differ <= GROUPS[group], (name, differ - GROUPS[group])


def quoted_cost(name):
    """The lines of a config's docstring under 'Estimated cost, from `... --dry_run=True`:'."""
    doc = (ROOT / "config" / f"{name}.py").read_text().split('"""')[1]
    block = doc.split("--dry_run=True`:\n")[1]
    return [line.strip() for line in block.splitlines() if line.strip()]


@pytest.mark.parametrize("name", CONFIGS)
def test_cost_comment_counts_are_the_dry_runs(name):
    quoted = quoted_cost(name)
    assert len(quoted) == 4
    counted = describe_cost(cost_of(name)).splitlines()
    for prefix in ("parameters:", "compute:", "wall time"):  # the lines that need no measuring
        assert [line for line in quoted if line.startswith(prefix)] == [line for line in counted if line.startswith(prefix)]


@pytest.mark.slow
@pytest.mark.parametrize("name", CONFIGS)
def test_cost_comment_is_the_dry_runs_output(name):
    done = subprocess.run([sys.executable, "train.py", f"config/{name}.py", "--dry_run=True"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    printed = [line for line in done.stdout.splitlines()[1:] if not line.startswith("  ")]
    assert quoted_cost(name) == printed


def prepare_flags():
    """{dataset name: the prepare.py arguments} of every `python prepare.py ...` line in the configs' docstrings."""
    import prepare
    lines = {}
    for path in sorted((ROOT / "config").glob("*.py")):
        for flags in re.findall(r"python prepare\.py([^#&\n]*)", path.read_text()):
            args = prepare.parse_args(shlex.split(flags))
            lines[args.name or args.dataset] = args
    return lines


def random_words(n_words, seed=0):
    """Text of n_words random lowercase words, 100 a line: enough distinct pairs for any BPE size."""
    rng = np.random.default_rng(seed)
    letters = rng.integers(97, 123, size=(n_words, 9), dtype=np.uint8)
    lengths = rng.integers(3, 10, size=n_words)
    words = [row[:k].tobytes().decode() for row, k in zip(letters, lengths)]
    return "\n".join(" ".join(words[i:i + 100]) for i in range(0, n_words, 100))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "config").glob("*.py")))
def test_every_config_passes_the_constant_code_check_on_the_data_its_prepare_line_writes(name, tmp_path):
    """issue 44: each config's fixed code enters no token of its own data as a constant vector. The
    data: random words (the BPE's size needs text, not meaning) prepared with the tokenizer settings
    of the config's prepare line; a fine-tuning config's data takes its source run's (the quick start's)
    tokenizer. A config whose input has no fixed code (learned, kronecker: GPT-2's tokenizer) has nothing to check.
    About 3 minutes for all, most of it the 262,144-token BPE."""
    import prepare
    from codes import constant_ids
    from model import make_input
    from tablefree.configurator import model_config
    from tablefree.data import read_meta, refuse_constant_codes

    s = settings_of(name)
    if s.init_from != "scratch":  # fine-tuning: the quick start's model, its data in the model's tokens
        s, args = settings_of("shakespeare"), prepare_flags()["shakespeare"]
    else:
        args = prepare_flags()[s.dataset]
    if s.input in ("learned", "kronecker"):
        return
    (tmp_path / "words.txt").write_text(random_words(2_000_000 if args.vocab_size > 100_000 else 500_000))
    prepare.prepare(prepare.parse_args(["--input", str(tmp_path / "words.txt"), "--name", "sample", "--out_dir",
                                        str(tmp_path), "--tokenizer", args.tokenizer, "--vocab_size",
                                        str(args.vocab_size), "--quiet"]))
    meta = read_meta(tmp_path / "sample")
    config = model_config(s, meta["vocab_size"])
    table = torch.randn(meta["vocab_size"], config.n_embd) if config.input == "frozen" else None  # a learned run's
    wte = make_input(config, source=table)
    constant = constant_ids(wte.code, meta["vocab_size"])
    assert set(constant.tolist()) <= set(meta["tokenizer"]["reserved_ids"])
    refuse_constant_codes(constant, tmp_path / "sample", meta, config.input)  # raises if any occurs
