"""The shared checkpoint loader refuses what it cannot trust. Run: python -m pytest tests/test_checkpoint.py"""

import os

import pytest
import torch

from model import GPT, GPTConfig
from tablefree.checkpoint import build_model, load_checkpoint, model_state, save_checkpoint
from tablefree.common import UserError


class RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):  # unpickling this would create the marker file
        return (os.system, (f"touch {self.marker}",))


def saved_model(tmp_path):
    model = GPT(GPTConfig(vocab_size=40, block_size=8, n_layer=1, n_head=2, n_embd=16, input="affine"))
    save_checkpoint({**model_state(model), "tokenizer": {"info": {}, "ranks": ""}}, tmp_path)
    return model


def test_round_trip_and_atomic_write(tmp_path):
    model = saved_model(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]  # no temporary file left behind
    loaded = build_model(load_checkpoint(tmp_path))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values()))


def test_a_pickle_that_runs_code_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    torch.save({"model": RunsCode(marker), "model_config": {}, "tokenizer": {}}, tmp_path / "ckpt.pt")
    with pytest.raises(UserError, match="not a loadable checkpoint"):
        load_checkpoint(tmp_path)
    assert not marker.exists()


def test_truncated_and_foreign_checkpoints_are_clear_errors(tmp_path):
    saved_model(tmp_path)
    data = (tmp_path / "ckpt.pt").read_bytes()
    (tmp_path / "ckpt.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError, match="corrupt, truncated or unsafe"):
        load_checkpoint(tmp_path)
    torch.save({"weights": torch.zeros(1)}, tmp_path / "other.pt")
    with pytest.raises(UserError, match="not a tablefree checkpoint"):
        load_checkpoint(tmp_path / "other.pt")
    with pytest.raises(UserError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "empty_dir")


def test_weights_that_do_not_fit_the_config_are_a_clear_error(tmp_path):
    saved_model(tmp_path)
    ckpt = load_checkpoint(tmp_path)
    ckpt["model_config"]["n_embd"] = 32
    with pytest.raises(UserError, match="do not fit its model config"):
        build_model(ckpt)
