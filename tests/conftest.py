"""Shared fixtures: a tiny prepared corpus and tiny-model training settings."""

import pytest

import prepare

TINY = ["--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=32", "--batch_size=8", "--gradient_accumulation_steps=2",
        "--learning_rate=3e-3", "--warmup_iters=2", "--min_lr=3e-4", "--eval_iters=4", "--log_interval=1",
        "--device=cpu", "--compile=False"]


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    text = root / "tiny.txt"
    text.write_text("".join(f"The {w} of the king is {v}, and the queen's {w} is {v} too.\n"
                            for w in ("crown", "horse", "sword", "castle") for v in ("gold", "grey", "old", "bright")) * 40)
    prepare.prepare(prepare.parse_args(["--input", str(text), "--name", "tiny", "--out_dir", str(root), "--vocab_size", "300", "--quiet"]))
    return root
