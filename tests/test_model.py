"""The GPT and its input interfaces. Run: python -m pytest tests/test_model.py"""

import math

import pytest
import torch
from torch.nn import functional as F

from conftest import reference_codebook, reference_lift
from model import GPT, INPUTS, GPTConfig, apply_rotary, param_counts


VOCAB = [bytes([97 + t % 26]) * (1 + t // 26) for t in range(50)]  # a, b, ..., z, aa, bb, ...: 50 tokens


def tiny(kind, **kw):
    torch.manual_seed(0)
    config = dict(vocab_size=50, block_size=16, n_layer=2, n_head=2, n_embd=32, input=kind)
    config = GPTConfig(**{**config, **source_name(kind), **kw})
    source = torch.randn(config.vocab_size, 48) if kind == "frozen" else None  # what frozen codes derive from
    return GPT(config, VOCAB, source)


def source_name(kind):
    return {"codes_from": "a random table"} if kind == "frozen" else {}


def test_fixed_inputs_equal_the_lifted_codebook():
    for kind in ("binary", "affine"):
        for lift in ("tile", "interleave"):
            model = tiny(kind, lift=lift, n_embd=40)
            A, b = (model.wte.A, model.wte.b) if kind == "affine" else (None, None)
            lifted = reference_codebook(50, A, b).float() @ reference_lift(6, 40, lift).T  # (V, n_embd) = R c
            idx = torch.randint(0, 50, (3, 16))
            assert torch.equal(model.wte(idx), lifted[idx])
    pm1 = tiny("binary", code_values="pm1")
    assert set(pm1.wte(torch.arange(50)[None]).unique().tolist()) == {-1.0, 1.0}


@pytest.mark.parametrize("kind", ["binary", "affine", "frozen"])
def test_fixed_inputs_have_no_parameters_and_get_no_gradient(kind):
    model = tiny(kind)
    assert list(model.wte.parameters()) == []
    idx = torch.randint(0, 50, (2, 16))
    _, loss = model(idx, idx)
    loss.backward()
    assert all(b.grad is None and not b.requires_grad for b in model.wte.buffers())
    assert param_counts(model)["input"] == 0
    assert all(p.grad is not None for p in model.parameters())  # the rest of the model learns


def test_affine_code_is_saved_with_the_model():
    model = tiny("affine", code_seed=1)
    assert set(model.wte.state_dict()) == {"A", "b"}
    other = tiny("affine", code_seed=2)
    idx = torch.arange(50)[None]
    assert not torch.equal(model.wte(idx), other.wte(idx))
    other.load_state_dict(model.state_dict())
    assert torch.equal(model.wte(idx), other.wte(idx))


@pytest.mark.parametrize("kind", INPUTS)
def test_each_variant_overfits_one_batch(kind):
    model = tiny(kind)
    idx = torch.randint(0, 50, (4, 16), generator=torch.Generator().manual_seed(1))
    x, y = idx[:, :-1], idx[:, 1:]
    opt = model.configure_optimizers(0.0, 3e-3, (0.9, 0.95), "cpu")
    for _ in range(150):
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.05, f"{kind} reached only {loss.item():.3f}"


def test_learned_minus_fixed_is_exactly_the_table():
    shape = dict(vocab_size=65536, n_embd=1024, n_layer=32, n_head=32, block_size=1024)
    with torch.device("meta"):  # no memory, no init cost
        counts = {kind: param_counts(GPT(GPTConfig(input=kind, **shape, **source_name(kind)))) for kind in INPUTS}
    assert counts["learned"]["trainable"] - counts["binary"]["trainable"] == 65536 * 1024 == 67_108_864
    assert counts["affine"]["trainable"] == counts["binary"]["trainable"]
    assert counts["learned"]["input"] == 67_108_864 and counts["affine"]["input_fixed"] == 16 * 16 + 16
    assert counts["binary"]["head"] == 67_108_864  # the head stays a trainable, untied V x n_embd
    assert counts["binary"]["body"] == 32 * (12 * 1024 ** 2 + 2 * 1024) + 1024  # blocks + ln_f, no bias


@pytest.mark.parametrize("kind", INPUTS)
def test_out_of_range_ids_are_refused(kind):
    model = tiny(kind)
    for bad in (50, 63, 64, -1):  # 50..63 fit in K=6 bits but are not tokens; 64 would alias 0
        with pytest.raises(ValueError, match=f"token id {bad} is outside the vocabulary"):
            model(torch.tensor([[1, bad]]))


def test_config_errors_are_clear():
    with pytest.raises(ValueError, match="tie_weights needs a trainable input table"):
        GPTConfig(input="binary", tie_weights=True)
    with pytest.raises(ValueError, match="unknown input 'table'"):
        GPTConfig(input="table")
    with pytest.raises(ValueError, match="narrower than the 16-bit code"):
        GPTConfig(input="binary", vocab_size=65536, n_embd=8, n_head=1)
    with pytest.raises(ValueError, match="unknown code values"):
        GPTConfig(input="affine", code_values="bipolar")
    tied = tiny("learned", tie_weights=True)
    assert tied.lm_head.weight is tied.wte.weight
    assert tiny("learned").lm_head.weight is not tiny("learned").wte.weight  # untied by default


def test_attention_matches_a_slow_reference():
    model = tiny("binary").eval()
    attn = model.h[0].attn
    x = torch.randn(2, 16, 32)
    rope = model.rotary(0, 16)
    q, k, v = attn.c_attn(x).split(32, dim=2)
    q, k, v = (t.view(2, 16, 2, 16).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
    q, k = apply_rotary(q, rope), apply_rotary(k, rope)
    scores = q @ k.transpose(-1, -2) / math.sqrt(16)  # (B, nh, T, T)
    scores = scores.masked_fill(torch.ones(16, 16).triu(1).bool(), float("-inf"))
    y = (F.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(2, 16, 32)
    assert torch.allclose(attn(x, rope), attn.c_proj(y), atol=1e-5)


def test_rotary_scores_depend_only_on_relative_position():
    model = tiny("binary")
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)

    def score(i, j):
        return (apply_rotary(q, model.rotary(i, 1)) * apply_rotary(k, model.rotary(j, 1))).sum()

    assert torch.allclose(score(5, 2), score(12, 9), atol=1e-5)
    assert not torch.allclose(score(5, 2), score(5, 3), atol=1e-3)


@pytest.mark.parametrize("kind", INPUTS)
def test_kv_cache_generation_equals_full_recompute(kind):
    model = tiny(kind).eval()
    prompt = torch.randint(0, 50, (3, 5), generator=torch.Generator().manual_seed(2))
    cached = torch.cat(list(model.generate(prompt, 40, temperature=0)), dim=1)  # the window (16) fills twice
    full = torch.cat(list(model.generate(prompt, 40, temperature=0, use_cache=False)), dim=1)
    assert cached.shape == (3, 40) and torch.equal(cached, full)
    seq, start = prompt, 0  # the documented windows, by hand: restart at the last 8 when 17 would be needed
    for _ in range(40):
        if seq.size(1) - start > 16:
            start = seq.size(1) - 8
        with torch.no_grad():
            seq = torch.cat((seq, model(seq[:, start:])[0][:, -1].argmax(-1, keepdim=True)), dim=1)
    assert torch.equal(seq[:, 5:], cached)
    # cached logits at every step equal the full forward's
    cache = model.new_cache()
    model(prompt, cache=cache)
    logits_step, _ = model(cached[:, :1], cache=cache)
    logits_full, _ = model(torch.cat((prompt, cached[:, :1]), dim=1))
    assert torch.allclose(logits_step, logits_full, atol=1e-5)


def test_generation_runs_past_the_window():
    model = tiny("affine").eval()
    out = list(model.generate(torch.zeros(1, 3, dtype=torch.long), 40, temperature=1.0, top_k=5))
    assert len(out) == 40 and all(t.shape == (1, 1) for t in out)


def test_weight_decay_goes_to_matrices_only():
    model = tiny("learned", bias=True)
    decay, no_decay = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu").param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() == 2 for p in decay["params"]) and all(p.dim() == 1 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    assert any(p is model.wte.weight for p in decay["params"])  # the learned table is a matrix too


@pytest.mark.parametrize("kind", ["learned", "kronecker", "binary"])
def test_the_input_gets_its_own_learning_rate_and_nothing_else_changes(kind):
    def one_step(scale):
        torch.manual_seed(0)
        model = tiny(kind)
        optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu", input_lr_scale=scale)
        for group in optimizer.param_groups:  # as train.py sets it every step
            group["lr"] = 1e-3 * group.get("lr_scale", 1.0)
        x = torch.randint(0, model.config.vocab_size, (2, 8), generator=torch.Generator().manual_seed(1))
        model(x, x)[1].backward()
        optimizer.step()
        return model, optimizer
    base, base_opt = one_step(1.0)
    scaled, opt = one_step(0.25)
    assert len(base_opt.param_groups) == 2  # the default keeps nanoGPT's two groups: runs stay bit for bit
    own = [p for p in scaled.wte.parameters() if p.requires_grad]
    assert len(opt.param_groups) == (3 if own else 2)
    if own:
        assert opt.param_groups[2]["lr"] == 0.25e-3 and opt.param_groups[2]["params"] == own
    torch.manual_seed(0)
    start = dict(tiny(kind).named_parameters())
    for (name, p), q in zip(scaled.named_parameters(), base.parameters()):
        if name.startswith("wte."):  # AdamW's step is linear in lr (decay and update): a quarter as far
            assert torch.allclose(p - start[name], 0.25 * (q - start[name]), rtol=1e-3, atol=1e-8), name  # float32 ulps
        else:
            assert torch.equal(p, q), name  # every other weight took exactly the same step


def test_layernorm_cannot_tell_the_two_constant_binary_codes_apart():
    """docs/inputs.md: with V = 2^K, ids 0 and V - 1 (every bit 0, every bit 1) are constant vectors,
    which each block's first LayerNorm maps to zero, so the model cannot tell them apart (±1 values
    do not help); a learned table keeps them apart. If the norms change, this test says the docs must."""
    logits = {}
    for kind, values in (("binary", "01"), ("binary", "pm1"), ("learned", "01")):
        torch.manual_seed(0)
        model = GPT(GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2, n_embd=32, input=kind,
                              code_values=values))
        ids = torch.randint(1, 63, (2, 16))
        ids[:, [0, 7]] = 0
        other = ids.masked_fill(ids == 0, 63)  # the same text with the all-ones token in place of id 0
        logits[kind, values] = [model(x, all_positions=True)[0] for x in (ids, other)]
    for same in (("binary", "01"), ("binary", "pm1")):
        torch.testing.assert_close(*logits[same], rtol=0, atol=1e-4)  # float rounding only
    assert (logits["learned", "01"][0] - logits["learned", "01"][1]).abs().max() > 1e-2


def deep_gradient_norm(kind, first_ids, vocab_size=1024, scale=4.0):
    """The gradient norm of a 32-layer model (the papers' depth, n_embd 32) whose body matrices are
    `scale` times their initial size (a trained model's are larger), on rows starting with first_ids."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=vocab_size, block_size=8, n_layer=32, n_head=2, n_embd=32, input=kind))
    with torch.no_grad():
        for name, p in model.h.named_parameters():
            if p.dim() == 2:
                p.mul_(scale)
    ids = torch.randint(1, vocab_size - 2, (len(first_ids), 8), generator=torch.Generator().manual_seed(1))
    ids[:, 0] = torch.as_tensor(first_ids)
    model(ids[:, :-1], ids[:, 1:])[1].backward()
    return torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None]).item()


@pytest.mark.parametrize("kind", ["binary", "affine"])
def test_rows_starting_with_any_token_keep_the_gradient_finite_at_32_layers(kind):
    """issue 44: the trained BPE leaves reserved_ids (0 and 2^K - 1) unused and the affine map fixes
    them, so every id a tokenizer of prepare.py produces, end-of-text included, has a code that is not
    constant, and rows starting with any of them train at the papers' depth; a row starting with a
    reserved id (the old place of end-of-text) overflows the gradient."""
    from codes import constant_ids
    from tablefree.tokenizer import reserved_ids

    model = GPT(GPTConfig(vocab_size=1024, n_layer=1, n_head=2, n_embd=32, input=kind))
    assert constant_ids(model.wte.code, 1024).tolist() == reserved_ids(1024) == [0, 1023]
    used = [t for t in range(1024) if t not in reserved_ids(1024)]  # bytes, merges, end-of-text (1022)
    assert math.isfinite(deep_gradient_norm(kind, used))
    assert not math.isfinite(deep_gradient_norm(kind, [5, 1023]))
