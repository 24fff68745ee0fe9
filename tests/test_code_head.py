"""The frozen code head (head='codes'): logits = z C^T / sqrt(D) + b. Run: python -m pytest tests/test_code_head.py"""

import math

import pytest
import torch

import model as model_module
import sample
import train
from codes import sign_pca
from conftest import TINY
from model import GPT, GPTConfig, param_counts
from tablefree.checkpoint import build_model, load_checkpoint
from tablefree.configurator import resolve
from tablefree.rundir import read_log
from tools import export

SHAPE = dict(vocab_size=300, n_layer=2, n_head=2, n_embd=64, block_size=16, input="frozen", codes_from="random",
             code_dim=48)


def code_head_model():
    torch.manual_seed(0)
    source = torch.randn(300, 80)
    model = GPT(GPTConfig(**SHAPE, head="codes"), source=source).eval()
    model.lm_head.bias.data.normal_()  # a trained bias is not zero
    return model, source


def test_logits_equal_a_float64_reference(monkeypatch):
    monkeypatch.setattr(model_module, "CODE_CHUNK", 7)  # 300 rows in chunks of 7: the last one short
    model, source = code_head_model()
    captured = {}
    model.ln_f.register_forward_hook(lambda module, args, out: captured.update(h=out))
    idx = torch.randint(0, 300, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(idx, all_positions=True)[0]  # (2, 16, 300)
    C = 2 * sign_pca(source, 48)[0].double() - 1  # (V, D) +-1, from the source, not from the model's bits
    z = captured["h"].double() @ model.lm_head.proj.weight.double().T  # (2, 16, D)
    expected = z @ C.T / math.sqrt(48) + model.lm_head.bias.double()
    assert torch.allclose(logits.double(), expected, atol=1e-5)


def test_no_vocabulary_sized_trainable_matrix():
    model, _ = code_head_model()
    V, n_embd = 300, 64
    assert not [name for name, p in model.named_parameters() if p.dim() == 2 and V in p.shape]
    counts = param_counts(model)
    assert counts["head"] == n_embd * 48 + V and counts["input"] == 0
    assert counts["trainable"] == counts["body"] + counts["head"]
    tied = GPT(GPTConfig(**{**SHAPE, "input": "learned", "codes_from": ""}, tie_weights=True))
    assert [n for n, p in tied.named_parameters() if V in p.shape] == ["wte.weight"]  # one table, in and out
    with pytest.raises(ValueError, match="'codes' reads back the frozen input's codes"):
        GPTConfig(**{**SHAPE, "input": "binary", "codes_from": ""}, head="codes")


def test_train_resume_finetune_sample_and_exports(data_dir, tmp_path):
    common = ["--data_dir", str(data_dir), "--dataset=tiny", *TINY, "--eval_interval=20", "--lr_decay_iters=40"]
    train.train(resolve(train.DEFAULTS, [*common, "--input=learned", "--tie_weights=True", "--max_iters=20",
                                         f"--out_dir={tmp_path / 'learned'}"]))
    frozen = [*common, "--input=frozen", "--head=codes", f"--codes_from={tmp_path / 'learned'}"]
    train.train(resolve(train.DEFAULTS, [*frozen, "--max_iters=20", f"--out_dir={tmp_path / 'frozen'}"]))
    train.main([*common, "--init_from=resume", "--max_iters=40", f"--out_dir={tmp_path / 'frozen'}"])
    evals = [r["val_loss"] for r in read_log(tmp_path / "frozen" / "log.jsonl") if "val_loss" in r]
    assert len(evals) == 3 and evals[-1] < evals[0] - 1.0  # it learns, through the resume
    ckpt = load_checkpoint(tmp_path / "frozen")
    assert ckpt["iter_num"] == 40 and ckpt["model_config"]["head"] == "codes"
    train.main([*common, f"--init_from={tmp_path / 'frozen'}", "--max_iters=5", "--eval_interval=5",
                f"--out_dir={tmp_path / 'tuned'}"])
    assert load_checkpoint(tmp_path / "tuned")["model_config"]["head"] == "codes"  # the architecture comes along
    model = build_model(ckpt)
    assert torch.equal(model.wte.packed, load_checkpoint(tmp_path / "frozen")["model"]["wte.packed"])
    greedy = sample.sample(sample.parse_args(["--ckpt", str(tmp_path / "frozen"), "--temperature", "0",
                                              "--max_new_tokens", "12", "--num_samples", "1"]))
    assert len(greedy[0]) == 12
    with pytest.raises(SystemExit, match="head='codes'.*export --format ternary"):
        export.main(["--ckpt", str(tmp_path / "frozen"), "--format", "gguf"])
    export.main(["--ckpt", str(tmp_path / "frozen"), "--format", "hf"])  # GPT-NeoX cannot: our own modelling file
    assert (tmp_path / "frozen" / "hf" / "modeling_tablefree.py").exists()
