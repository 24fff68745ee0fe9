"""The shared checkpoint loader refuses what it cannot trust. Run: python -m pytest tests/test_checkpoint.py"""

import os

import pytest
import torch

from conftest import flip_tensor_byte
from model import GPT, GPTConfig
from tablefree.checkpoint import build_model, load_checkpoint
from tablefree.common import UserError, model_state, save_checkpoint, state_crc32


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
    with pytest.raises(UserError, match="it is corrupt or truncated"):
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


def test_a_flipped_byte_inside_a_tensor_is_a_one_line_error_naming_the_file(tmp_path):
    model = saved_model(tmp_path)
    flip_tensor_byte(tmp_path / "ckpt.pt")
    raw = torch.load(tmp_path / "ckpt.pt", weights_only=True)  # torch itself loads it without a word
    assert not all(torch.equal(a, raw["model"][k]) for k, a in model.state_dict().items())
    with pytest.raises(UserError) as error:
        load_checkpoint(tmp_path)
    assert str(error.value).startswith(f"{tmp_path / 'ckpt.pt'} is damaged") and "crc32 differs" in str(error.value)


def test_the_checksum_covers_every_tensor_and_where_it_sits(tmp_path):
    state = {"model": {"a": torch.arange(6.0)}, "optimizer": {"state": {0: {"exp_avg": torch.zeros(2, 3)}}}}
    crc = state_crc32(state)
    assert crc == state_crc32({**state})  # a function of the contents only
    state["optimizer"]["state"][0]["exp_avg"][1, 2] = 1e-30  # the optimizer's state counts too
    assert state_crc32(state) != crc
    moved = {"model": {"b": torch.arange(6.0)}, "optimizer": {"state": {0: {"exp_avg": torch.zeros(2, 3)}}}}
    reshaped = {"model": {"a": torch.arange(6.0).reshape(2, 3)}, "optimizer": moved["optimizer"]}
    assert len({crc, state_crc32(moved), state_crc32(reshaped)}) == 3  # the name and the shape count


def test_non_finite_weights_are_refused_and_an_old_checkpoint_without_a_checksum_loads(tmp_path):
    model = GPT(GPTConfig(vocab_size=40, block_size=8, n_layer=1, n_head=2, n_embd=16, input="affine"))
    state = model_state(model)
    state["model"]["h.0.mlp.c_fc.weight"][3, 4] = float("nan")
    (tmp_path / "nan").mkdir()
    save_checkpoint({**state, "tokenizer": {}}, tmp_path / "nan")  # whole and checksummed, but nan
    with pytest.raises(UserError, match=r"nan/ckpt.pt holds non-finite weights \(in h.0.mlp.c_fc.weight\)"):
        load_checkpoint(tmp_path / "nan")
    state["model"]["h.0.mlp.c_fc.weight"][3, 4] = 0.5
    (tmp_path / "old").mkdir()
    torch.save({**state, "tokenizer": {}}, tmp_path / "old" / "ckpt.pt")  # no crc32: from before checksums
    assert torch.equal(load_checkpoint(tmp_path / "old")["model"]["h.0.mlp.c_fc.weight"][3, 4], torch.tensor(0.5))


@pytest.mark.parametrize("change", ["settings", "tokenizer", "covers"])
def test_the_checksum_covers_the_settings_and_the_tokenizer_too(tmp_path, change):
    """issue 54: a value changed anywhere in the pickle (a setting, the stored tokenizer; or the mark
    that says what the crc covers) is refused, not sampled from; a checkpoint from before the
    checksum covered everything (its tensors' crc32 only) still loads."""
    saved_model(tmp_path)
    raw = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    if change == "settings":
        raw["settings"] = {**raw.get("settings", {}), "rope_base": 10001.0}
    elif change == "tokenizer":
        raw["tokenizer"] = {**raw["tokenizer"], "eot_id": 1}
    else:
        raw["crc32_covers"] = "tensors"
    torch.save(raw, tmp_path / "ckpt.pt")
    with pytest.raises(UserError, match="is damaged: its .*are not the ones it was saved with"):
        load_checkpoint(tmp_path)
    del raw["crc32_covers"]
    raw["crc32"] = state_crc32(raw, everything=False)  # as saved before 2026-12-04
    torch.save(raw, tmp_path / "ckpt.pt")
    assert "crc32" not in load_checkpoint(tmp_path)


def test_a_packed_export_that_lost_its_sha256_is_refused_and_an_older_one_warned(tmp_path, capsys):
    """A file written with a sha256 always carries it: one without it but with the mark of its kind
    (sha256_covers) is refused, naming the export that makes it anew; a file from before sha256s loads with
    one warning line."""
    from test_runtime import packed_model
    contents = packed_model("binary")
    assert "sha256" in contents and "sha256_covers" in contents
    stripped = {k: v for k, v in contents.items() if k != "sha256"}
    torch.save(stripped, tmp_path / "stripped.pt")
    with pytest.raises(UserError, match="stripped.pt has lost the sha256 it was written with.*export it again"):
        load_checkpoint(tmp_path / "stripped.pt")
    older = {k: v for k, v in stripped.items() if k != "sha256_covers"}
    torch.save(older, tmp_path / "older.pt")
    assert load_checkpoint(tmp_path / "older.pt")["ternary"]
    assert capsys.readouterr().err.startswith(f"warning: {tmp_path / 'older.pt'} is a packed export from before its sha256")
