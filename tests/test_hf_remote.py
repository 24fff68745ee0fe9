"""The remote-code Hugging Face folder (tools/hf.py, tools/modeling_tablefree.py): every input x head x
body loads with trust_remote_code and computes our logits and greedy tokens; a save_pretrained round
trip; a process that has never seen this repository loads it. Run: python -m pytest tests/test_hf_remote.py"""

import json
import subprocess
import sys
from dataclasses import asdict

import pytest
import torch

from model import GPT, GPTConfig
from tablefree.data import read_meta, tokenizer_state
from tablefree.packed import inference_model, packed_ternary
from tablefree.tokenizer import load_encoding
from tablefree.common import UserError
from tools import export
from tools.hf import export_hf, verify

transformers = pytest.importorskip("transformers", reason="the folder is read by transformers: requirements-extras.txt")
KINDS = [(name, head, body) for name in ("learned", "binary", "affine", "kronecker", "frozen")
         for head in ("untied", "tied", "codes") for body in ("float", "ternary")
         if (head != "tied" or name == "learned") and (head != "codes" or name == "frozen")]
PROMPT = [5, 17, 99, 3, 250, 42]


def trained_like(data_dir, name, head, body):
    """(our model, its checkpoint stub): random weights well away from their init, V = 300 (the tiny
    corpus's tokenizer); what a ternary body exports is its packed file, so ours is that file's model."""
    torch.manual_seed(0)
    directory = data_dir / "tiny"
    meta = read_meta(directory)
    vocab = [bytes([97 + i % 26]) * (1 + i // 26) for i in range(300)]
    config = GPTConfig(vocab_size=300, n_layer=2, n_head=2, n_embd=32, block_size=64, input=name, body=body,
                       head="codes" if head == "codes" else "untied", tie_weights=head == "tied", code_dim=24,
                       codes_from="random" if name == "frozen" else "", pos_dim=8,
                       lift="interleave" if name == "affine" else "tile", code_values="pm1" if name == "binary" else "01")
    model = GPT(config, vocab=vocab, source=torch.randn(300, 40) if name == "frozen" else None)
    for p in model.parameters():
        p.data += 0.05 * torch.randn_like(p)
    ckpt = {"model_config": asdict(config), "tokenizer": tokenizer_state(meta["tokenizer"], directory / "tokenizer.tiktoken"),
            "model": model.state_dict(), "iter_num": 7}
    ours = inference_model(packed_ternary(model, ckpt)) if body == "ternary" else model
    return ours.eval(), model.eval(), ckpt


def our_greedy(model, steps):
    with torch.no_grad():
        return [t.item() for t in model.generate(torch.tensor([PROMPT]), steps, temperature=0)]


@pytest.mark.parametrize("name, head, body", KINDS)
def test_the_folder_computes_our_logits_and_greedy_tokens(data_dir, tmp_path, name, head, body):
    ours, model, ckpt = trained_like(data_dir, name, head, body)
    folder, said = export_hf(model, ckpt, tmp_path / "hf", remote=True)
    assert "trust_remote_code" in said
    loaded = transformers.AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        theirs, mine = loaded(ids).logits, ours(ids, all_positions=True)[0]
    assert (theirs - mine).abs().max() < 1e-4, (theirs - mine).abs().max()
    out = loaded.generate(ids, max_new_tokens=32, do_sample=False, use_cache=True, eos_token_id=None, pad_token_id=0)
    assert out[0, len(PROMPT):].tolist() == our_greedy(ours, 32)
    loaded.save_pretrained(tmp_path / "again")  # transformers' own writer: the same model comes back
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "again", trust_remote_code=True).eval()
    with torch.no_grad():
        assert torch.equal(again(ids).logits, theirs)


def test_the_paper_model_folder_keeps_codes_as_bits_and_the_body_at_2_bits(data_dir, tmp_path):
    _, model, ckpt = trained_like(data_dir, "frozen", "codes", "ternary")
    folder, _ = export_hf(model, ckpt, tmp_path / "hf")  # no flag: GPT-NeoX cannot hold it
    from safetensors.torch import load_file
    weights = load_file(folder / "model.safetensors")
    assert weights["wte.packed"].dtype == torch.uint8 and weights["wte.packed"].shape == (300, 3)  # 24 bits
    assert weights["h.0.mlp.c_fc.packed"].dtype == torch.uint8 and weights["h.0.mlp.c_fc.packed"].shape == (128, 8)
    assert not any(k.endswith("c_fc.weight") for k in weights)  # no float copy of a ternary weight
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"]["AutoModelForCausalLM"] == "modeling_tablefree.TablefreeForCausalLM"
    card = (folder / "README.md").read_text()
    assert "trust_remote_code=True" in card and "head `codes`" in card and "arXiv:2605.09751" in card


def test_a_process_that_never_saw_this_repository_loads_and_generates(data_dir, tmp_path):
    """The folder is all it needs: run from an empty folder in isolated mode (no PYTHONPATH, not
    the checkout), it generates, and no module of ours was imported."""
    ours, model, ckpt = trained_like(data_dir, "frozen", "codes", "ternary")
    folder, _ = export_hf(model, ckpt, tmp_path / "hf")
    code = ("import sys, torch; from transformers import AutoModelForCausalLM, AutoTokenizer; "
            f"m = AutoModelForCausalLM.from_pretrained({str(folder)!r}, trust_remote_code=True); "
            f"t = AutoTokenizer.from_pretrained({str(folder)!r}, trust_remote_code=True); "
            "print(t.encode('The crown of the king is gold.')); "
            f"out = m.generate(torch.tensor([{PROMPT}]), max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0); "
            "print(out[0, 6:].tolist()); "
            "print(sorted(n for n in sys.modules if n.split('.')[0] in ('model', 'codes', 'tablefree', 'tools')))")
    (tmp_path / "empty").mkdir()
    done = subprocess.run([sys.executable, "-I", "-c", code], cwd=tmp_path / "empty", capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    encoded, tokens, ours_imported = done.stdout.strip().splitlines()[-3:]
    assert json.loads(tokens) == our_greedy(ours, 8) and ours_imported == "[]"
    assert json.loads(encoded) == load_encoding(ckpt["tokenizer"]).encode_ordinary("The crown of the king is gold.")


@pytest.mark.parametrize("kind", ["frozen+codes", "binary+ternary"])
def test_the_real_harness_scores_a_remote_code_folder_as_our_scorer(data_dir, tmp_path, kind):
    """lm-eval's hf model with trust_remote_code on the folder --harness exports, against our scorer
    on the same documents: the frozen code-head model, and a ternary one (ours on its packed file,
    which the folder holds)."""
    pytest.importorskip("lm_eval", reason="the harness comparison needs lm-eval: pip install -r requirements-dev.txt")
    import train
    from conftest import TINY
    from tablefree.configurator import resolve
    from test_eval import write_jsonl_folder
    from tools import evaluate, export

    def trained(name, *extra):
        train.train(resolve(train.DEFAULTS, ["--data_dir", str(data_dir), "--dataset=tiny", f"--out_dir={tmp_path / name}",
                                             *TINY, "--max_iters=20", "--eval_interval=20", "--lr_decay_iters=20", *extra]))
        return tmp_path / name
    if kind == "frozen+codes":
        source = trained("learned", "--input=learned", "--tie_weights=True")
        run = trained("run", "--input=frozen", "--head=codes", f"--codes_from={source}")
        scored = run
    else:
        run = trained("run", "--input=binary", "--body=ternary")
        export.main(["--ckpt", str(run)])
        scored = run / "model.ternary.pt"
    tasks, folder = "hellaswag,lambada", write_jsonl_folder(tmp_path / "tasks")
    common = ["--tasks", tasks, "--data", str(folder), "--device", "cpu"]
    ours = evaluate.evaluate(evaluate.parse_args(["--ckpt", str(scored), *common, "--out", str(tmp_path / "o.json")]))
    theirs = evaluate.evaluate(evaluate.parse_args(["--ckpt", str(run), *common, "--harness", "--out",
                                                    str(tmp_path / "t.json")]))
    assert "trust_remote_code=True" in theirs["lm_eval_command"]
    for task in tasks.split(","):
        assert theirs["results"][task]["n"] == ours["results"][task]["n"]
        for metric in ("acc", "acc_norm"):
            assert theirs["results"][task].get(metric) == ours["results"][task].get(metric), (task, metric)
    assert theirs["results"]["lambada"]["ppl"] == pytest.approx(ours["results"]["lambada"]["ppl"], rel=1e-4)


def test_a_changed_file_is_refused_at_load_and_found_by_verify(data_dir, tmp_path, capsys):
    """issue 65: tablefree.json's sha256 of every file. An edited config.json (rope_base 13 loaded and ran)
    stops the remote-code model's from_pretrained in one line (a folder without tablefree.json loads with a
    warning that nothing was checked); `tools.export --verify` finds it, and a flipped weight byte in a GPT-NeoX folder (which loads without our code), and says so when all is well."""
    _, model, ckpt = trained_like(data_dir, "binary", "untied", "float")
    folder, _ = export_hf(model, ckpt, tmp_path / "hf", remote=True)
    export.main(["--verify", str(folder)])
    assert capsys.readouterr().out == f"{folder}: all 8 files are the ones tools.export wrote (sha256 in tablefree.json)\n"
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "rope_base": 13.0}))
    with pytest.raises(ValueError, match="config.json is not the file tools.export wrote"):
        transformers.AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
    with pytest.raises(UserError, match="is not as tools.export wrote it: config.json changed or missing, nothing added"):
        verify(folder)
    bare, _ = export_hf(model, ckpt, tmp_path / "bare", remote=True)
    (bare / "tokenizer.json").rename(tmp_path / "tokenizer.json")
    with pytest.raises(ValueError, match=r"bare/tokenizer.json is missing, which tablefree.json lists: the folder was "
                                         r"changed; export it again"):
        transformers.AutoModelForCausalLM.from_pretrained(bare, trust_remote_code=True)
    (tmp_path / "tokenizer.json").rename(bare / "tokenizer.json")
    (bare / "tablefree.json").unlink()  # its config.json names it: refused
    with pytest.raises(ValueError, match=r"bare/tablefree.json is missing, which config.json says lists the sha256 "
                                         r"of every file: the folder was changed; export it again"):
        transformers.AutoModelForCausalLM.from_pretrained(bare, trust_remote_code=True)
    config = json.loads((bare / "config.json").read_text())
    (bare / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k != "manifest"}))  # an older one
    with pytest.warns(UserWarning, match=r"bare has no tablefree.json, so its files are not checked"):
        loaded = transformers.AutoModelForCausalLM.from_pretrained(bare, trust_remote_code=True)
    loaded.save_pretrained(tmp_path / "mine")  # a model the user saved: its config claims no manifest
    assert "manifest" not in json.loads((tmp_path / "mine" / "config.json").read_text())
    with pytest.warns(UserWarning, match=r"mine has no tablefree.json"):
        transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "mine", trust_remote_code=True)
    neox, _ = export_hf(model, ckpt, tmp_path / "neox")
    weights = bytearray((neox / "model.safetensors").read_bytes())
    weights[-3] ^= 0x01
    (neox / "model.safetensors").write_bytes(bytes(weights))
    (neox / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit) as error:
        export.main(["--verify", str(neox)])
    assert "model.safetensors changed or missing, notes.txt added; export it again" in str(error.value)
