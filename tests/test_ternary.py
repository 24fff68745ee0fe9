"""The ternary body (BitNet b1.58), its 2-bit export and integer inference. Run: python -m pytest tests/test_ternary.py"""

from dataclasses import asdict

import pytest
import torch
from torch.nn import functional as F

import sample
import train
from conftest import TINY
from model import GPT, BitLinear, GPTConfig, TernaryProduct, absmax_int8, absmean_ternary
from tablefree.checkpoint import load_checkpoint
from tablefree.checksum import described, tensors_sha256, weights_id
from tablefree.common import UserError
from tablefree.configurator import resolve
from tablefree.packed import inference_model, packed_ternary
from tablefree.rundir import read_log
from tablefree.ternary import PackedTernaryLinear, pack_ternary, unpack_ternary
from tools import export


def test_quantisers_on_hand_computed_cases():
    w_t, gamma = absmean_ternary(torch.tensor([[0.5, -1.5], [0.0, 3.0]]))
    assert gamma.item() == 1.25  # (0.5 + 1.5 + 0 + 3) / 4
    assert w_t.tolist() == [[0, -1], [0, 1]]  # 0.4, -1.2, 0, 2.4 rounded, then clipped to [-1, 1]
    x_q, scale = absmax_int8(torch.tensor([[1.0, -2.0, 0.5], [0.1, 0.0, 0.0]]))
    assert scale[:, 0].tolist() == pytest.approx([63.5, 1270.0])  # 127 / max |x| per token
    assert x_q.tolist() == [[64, -127, 32], [127, 0, 0]]  # 63.5 rounds to even, 31.75 to 32
    zeros, gamma = absmean_ternary(torch.zeros(3, 3))
    assert gamma.item() == pytest.approx(1e-5) and zeros.abs().sum() == 0


def test_ternary_product_is_the_integer_product_with_a_straight_through_gradient():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 48, generator=g, requires_grad=True)
    w = (torch.randn(24, 48, generator=g) * 0.02).requires_grad_()
    y = TernaryProduct.apply(x, w)
    x_q, scale = absmax_int8(x.detach())
    w_t, gamma = absmean_ternary(w.detach())
    integer = x_q.long() @ w_t.long().T  # int64: the reference sums
    assert torch.equal(y.detach(), integer.float() * (gamma / scale))
    y.square().sum().backward()
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    ste = F.linear(x2 + (x_q / scale - x2).detach(), w2 + (w_t * gamma - w2).detach())  # BitNet's formulation
    ste.square().sum().backward()
    assert torch.allclose(x.grad, x2.grad, atol=1e-5) and torch.allclose(w.grad, w2.grad, atol=1e-4)


def test_pack_unpack_round_trip_at_two_bits():
    for fan_in in (1, 3, 4, 5, 9, 160):
        w_t = torch.randint(-1, 2, (7, fan_in), dtype=torch.int8)
        packed = pack_ternary(w_t)
        assert packed.dtype == torch.uint8 and packed.shape == (7, -(-fan_in // 4))
        assert torch.equal(unpack_ternary(packed, fan_in), w_t)
    assert pack_ternary(torch.tensor([[1, -1, 0, 1]])).item() == 0b01_00_10_01  # first weight lowest
    with pytest.raises(ValueError, match="unused code 11"):
        unpack_ternary(torch.tensor([[0b11]], dtype=torch.uint8), 1)


def trained_ternary(kind="binary", steps=40):
    torch.manual_seed(0)
    kind, _, head = kind.partition("+")  # frozen+codes: the frozen input with its code head
    config = GPTConfig(vocab_size=300, n_layer=2, n_head=2, n_embd=64, block_size=48, input=kind, body="ternary",
                       head=head or "untied", code_dim=48, codes_from="random" if kind == "frozen" else "")
    model = GPT(config, source=torch.randn(300, 80) if kind == "frozen" else None)
    optimizer = model.configure_optimizers(0.0, 3e-3, (0.9, 0.95), "cpu")
    idx = torch.randint(0, 300, (4, 33), generator=torch.Generator().manual_seed(1))
    for _ in range(steps):
        _, loss = model(idx[:, :-1], idx[:, 1:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval(), {"model_config": asdict(config), "tokenizer": {}}


@pytest.mark.parametrize("kind", ["binary", "affine", "learned", "frozen+codes"])
def test_export_decodes_the_training_models_tokens(kind):
    model, ckpt = trained_ternary(kind)
    contents = packed_ternary(model, ckpt)
    packed = inference_model(contents).eval()
    if kind == "frozen+codes":  # the one code table, stored and read as bits: (V, D / 8) bytes, never a float table
        assert contents["model"]["wte.packed"].dtype == torch.uint8 and contents["model"]["wte.packed"].shape == (300, 6)
        assert torch.equal(packed.wte.packed, model.wte.packed)
        assert not [n for n, t in [*packed.named_parameters(), *packed.named_buffers()] if t.dim() == 2
                    and t.is_floating_point() and t.shape[0] == 300]
    layers = [m for m in packed.modules() if isinstance(m, PackedTernaryLinear)]
    assert len(layers) == 2 * 4 and not any(isinstance(m, BitLinear) for m in packed.modules())
    assert all(m.ternary().dtype == torch.int8 for m in layers)  # no float copy of the body
    prompt = torch.tensor([[5, 17, 99, 3, 250]])
    with torch.no_grad():
        theirs, ours = packed(prompt, all_positions=True)[0], model(prompt, all_positions=True)[0]
    assert (theirs - ours).abs().max() < 5e-2  # the head (and a learned table) stored in float16
    greedy = torch.cat(list(model.generate(prompt, 60, temperature=0)), dim=1)  # KV cache, window restarts
    assert torch.equal(torch.cat(list(packed.generate(prompt, 60, temperature=0)), dim=1), greedy)
    for name, p in model.named_parameters():  # round what the export rounds: then every logit is equal
        if p.dim() >= 2 and "h." not in name:
            p.data = p.data.half().float()
    with torch.no_grad():
        assert torch.equal(packed(prompt, all_positions=True)[0], model(prompt, all_positions=True)[0])


def test_train_export_sample_end_to_end(data_dir, tmp_path):
    run = tmp_path / "run"
    train.train(resolve(train.DEFAULTS, ["--data_dir", str(data_dir), "--dataset=tiny", f"--out_dir={run}", *TINY,
                                         "--body=ternary", "--max_iters=30", "--eval_interval=30", "--lr_decay_iters=30"]))
    evals = [r for r in read_log(run / "log.jsonl") if "val_loss" in r]
    assert evals[-1]["val_loss"] < evals[0]["val_loss"] - 1.0  # a ternary body learns
    export.main(["--ckpt", str(run)])
    path = run / "model.ternary.pt"
    body = sum(p.numel() for n, p in inference_model(load_checkpoint(run)).named_parameters() if n.startswith("h.") and p.dim() == 2)
    assert path.stat().st_size < (run / "ckpt.pt").stat().st_size / 8 and path.stat().st_size > body / 4
    ours = sample.sample(sample.parse_args(["--ckpt", str(run), "--temperature", "0", "--max_new_tokens", "20",
                                            "--num_samples", "1"]))
    theirs = sample.sample(sample.parse_args(["--ckpt", str(path), "--temperature", "0", "--max_new_tokens", "20",
                                              "--num_samples", "1"]))
    assert theirs == ours and len(ours[0]) == 20  # greedy: the same 20 tokens from the checkpoint and the export
    assert weights_id(load_checkpoint(path)) == weights_id(load_checkpoint(run))  # so a GGUF of either checks with both


def test_corrupt_or_foreign_exports_are_one_line_errors(tmp_path):
    model, ckpt = trained_ternary(steps=1)
    contents = packed_ternary(model, ckpt)
    torch.save(contents, tmp_path / "good.pt")
    (tmp_path / "torn.pt").write_bytes((tmp_path / "good.pt").read_bytes()[:5000])
    with pytest.raises(UserError, match="it is corrupt or truncated"):
        load_checkpoint(tmp_path / "torn.pt")
    bad = {**contents, "ternary": {**contents["ternary"]}}
    layer = bad["ternary"]["h.0.mlp.c_fc"]
    bad["ternary"]["h.0.mlp.c_fc"] = {**layer, "packed": layer["packed"] | 0b11}
    torch.save(bad, tmp_path / "flipped.pt")
    with pytest.raises(UserError, match="flipped.pt is damaged.*sha256 differs"):  # not the weights it was written with
        load_checkpoint(tmp_path / "flipped.pt")
    bad["sha256"] = tensors_sha256(bad["model"], bad["ternary"], described(bad))  # damaged before its checksum was taken
    with pytest.raises(UserError, match="unused code 11; the file is corrupt"):
        inference_model(bad)
    for edited in ({"model_config": {**contents["model_config"], "rope_base": 13.0}},  # issue 65: both ran, otherwise
                   {"tokenizer": {**contents["tokenizer"], "ranks": "IHRoZQ== 0\n"}}):  # " the" as token 0
        torch.save({**contents, **edited}, tmp_path / "edited.pt")
        with pytest.raises(UserError, match="edited.pt is damaged: the packed file's weights, config or tokenizer"):
            load_checkpoint(tmp_path / "edited.pt")
    other = {**contents, "model_config": {**contents["model_config"], "n_embd": 32}}
    with pytest.raises(UserError, match="do not fit its model config"):
        inference_model(other)
    float_model = GPT(GPTConfig(vocab_size=300, n_layer=1, n_head=2, n_embd=32, block_size=8))
    with pytest.raises(UserError, match="only a ternary body packs to 2 bits"):
        packed_ternary(float_model, ckpt)
