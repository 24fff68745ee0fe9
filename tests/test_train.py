"""train.py and sample.py end to end on a tiny prepared corpus, on CPU. Run: python -m pytest tests/test_train.py"""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import sample
import train
from conftest import TINY
from model import GPT, INPUTS, GPTConfig, param_counts
from tablefree.checkpoint import build_model, load_checkpoint
from tablefree.common import UserError
from tablefree.configurator import MODEL_KEYS, resolve
from tablefree.rundir import read_log

ROOT = Path(__file__).resolve().parent.parent
def run(data_dir, out_dir, *argv):
    """train.py in this process; returns its log records."""
    train.train(resolve(train.DEFAULTS, ["--data_dir", str(data_dir), "--dataset=tiny", f"--out_dir={out_dir}", *TINY, *argv]))
    return [json.loads(line) for line in (Path(out_dir) / "log.jsonl").read_text().splitlines()]


def weights(out_dir):
    return load_checkpoint(out_dir)["model"]


@pytest.mark.parametrize("kind", INPUTS)
def test_a_few_steps_lower_the_loss(data_dir, tmp_path, kind):
    source = tmp_path / "source.pt"  # what 'frozen' derives its codes from: any 300 x d table
    torch.save(torch.randn(300, 40, generator=torch.Generator().manual_seed(0)), source)
    frozen = [f"--codes_from={source}"] if kind == "frozen" else []
    log = run(data_dir, tmp_path / "run", f"--input={kind}", *frozen, "--max_iters=25", "--lr_decay_iters=25",
              "--eval_interval=25")
    evals = [r for r in log if "val_loss" in r]
    assert [r["iter"] for r in evals] == [0, 25]
    assert evals[-1]["val_loss"] < evals[0]["val_loss"] - 1.0, evals
    assert evals[-1]["val_bpb"] > 0 and [r["iter"] for r in log if "loss" in r] == list(range(1, 26))
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    input_params = {"learned": 300 * 32, "kronecker": 256 * 16 * 32}.get(kind, 0)  # the table or the projection
    assert config["model"]["input"] == kind and config["params"]["input"] == input_params
    assert (config["settings"]["device"], config["settings"]["dtype"]) == ("cpu", "float32")  # "auto" resolved


def test_resume_continues_exactly(data_dir, tmp_path):
    common = ["--input=affine", "--dropout=0.1", "--lr_decay_iters=16", "--eval_interval=4"]
    straight = run(data_dir, tmp_path / "a", *common, "--max_iters=16")
    run(data_dir, tmp_path / "b", *common, "--max_iters=8")
    (tmp_path / "b" / "log.jsonl").open("a").write(json.dumps({"iter": 9, "loss": 0.0}) + "\n")  # logged after the checkpoint
    resumed = run(data_dir, tmp_path / "b", *common, "--max_iters=16", "--init_from=resume")
    assert [r["loss"] for r in resumed if "loss" in r] == [r["loss"] for r in straight if "loss" in r]  # bit for bit
    assert [r.get("val_loss") for r in resumed] == [r.get("val_loss") for r in straight]
    a, b = weights(tmp_path / "a"), weights(tmp_path / "b")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert load_checkpoint(tmp_path / "b")["iter_num"] == 16


def test_resume_without_the_config_continues_the_same_run(data_dir, tmp_path, capsys):
    """`python train.py --init_from=resume --out_dir=<run>`: batch, schedule and evaluation come from
    the checkpoint, so it continues exactly as resuming with the whole config does."""
    recipe = ["--data_dir", str(data_dir), "--dataset=tiny", *TINY, "--input=affine", "--dropout=0.1",
              "--lr_decay_iters=16", "--eval_interval=4"]
    for name in ("repeated", "bare"):
        train.main([*recipe, f"--out_dir={tmp_path / name}", "--max_iters=8"])
    train.main([*recipe, f"--out_dir={tmp_path / 'repeated'}", "--max_iters=16", "--init_from=resume"])
    capsys.readouterr()
    train.main([f"--out_dir={tmp_path / 'bare'}", f"--data_dir={data_dir}", "--device=cpu", "--max_iters=16",
                "--init_from=resume"])  # compile=False, too, from the checkpoint
    assert "resuming with max_iters 16 instead of the run's 8" in capsys.readouterr().out
    timing = ("ms", "tok_s", "mfu", "elapsed_s")
    logs = [[{k: v for k, v in r.items() if k not in timing} for r in read_log(tmp_path / name / "log.jsonl")]
            for name in ("repeated", "bare")]
    assert logs[0] == logs[1] and logs[0][-1]["iter"] == 16  # every loss, bit for bit
    a, b = weights(tmp_path / "repeated"), weights(tmp_path / "bare")
    assert all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(SystemExit, match="is at step 16, past max_iters=12; give --max_iters=16 or more"):
        train.main([f"--out_dir={tmp_path / 'bare'}", f"--data_dir={data_dir}", "--max_iters=12", "--init_from=resume"])


def test_resume_refuses_a_different_model(data_dir, tmp_path):
    run(data_dir, tmp_path, "--input=binary", "--max_iters=2", "--eval_interval=2")
    with pytest.raises(UserError, match="trained with input='binary', not 'learned'"):
        run(data_dir, tmp_path, "--input=learned", "--max_iters=4", "--init_from=resume")


def test_torchrun_two_ranks_match_one_process(data_dir, tmp_path):
    common = ["--data_dir", str(data_dir), "--dataset=tiny", *TINY, "--input=binary", "--max_iters=4",
              "--lr_decay_iters=4", "--eval_interval=4"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ddp = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=29533",
                          "train.py", *common, f"--out_dir={tmp_path / 'ddp'}", "--tensorboard=True"], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    assert ddp.returncode == 0, ddp.stderr[-2000:]
    assert len(list((tmp_path / "ddp" / "tb").glob("events.out.tfevents.*"))) == 1  # rank 0 alone writes trackers
    run(data_dir, tmp_path / "single", *common[3:])
    log = [json.loads(line) for line in (tmp_path / "ddp" / "log.jsonl").read_text().splitlines()]
    rank0, rank1 = log[-1]["rank_checksums"]
    assert rank0 == rank1  # both ranks hold identical weights
    single_log = [json.loads(line) for line in (tmp_path / "single" / "log.jsonl").read_text().splitlines()]
    evals = [[(r["train_loss"], r["val_loss"]) for r in lg if "val_loss" in r] for lg in (log, single_log)]
    assert len(evals[0]) == 2 and evals[0][0] == evals[1][0]  # step 0: the same batches, the same weights
    assert evals[0][1] == pytest.approx(evals[1][1], rel=1e-5)  # step 4: weights equal to float tolerance
    single, distributed = weights(tmp_path / "single"), weights(tmp_path / "ddp")
    for k in single:  # the same global batch: equal to float tolerance (all-reduce sums in another order)
        assert torch.allclose(single[k], distributed[k], atol=1e-5), k


def test_torchrun_with_fewer_evaluation_batches_than_ranks_ends(data_dir, tmp_path):
    """eval_iters=1 on 2 ranks: rank 1 scores no batch; it must not leave rank 0 waiting (it once hung forever)."""
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=29535",
                           "train.py", "--data_dir", str(data_dir), "--dataset=tiny", *TINY, "--max_iters=2",
                           "--eval_interval=1", "--eval_iters=1", "--gradient_accumulation_steps=2",
                           f"--out_dir={tmp_path / 'ddp'}"], cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert [r["iter"] for r in map(json.loads, (tmp_path / "ddp" / "log.jsonl").read_text().splitlines())
            if "val_loss" in r] == [0, 1, 2]


def test_torchrun_reports_a_bad_input_once(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=29534",
                           "train.py", "config/binary.py", f"--data_dir={tmp_path}", "--device=cpu", "--compile=False"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode != 0
    assert done.stderr.count("train.py: error:") == 1, done.stderr[-3000:]
    assert "prepare the data first: python prepare.py --dataset fineweb-edu --vocab_size 65536" in done.stderr


@pytest.mark.parametrize("kind", ["affine", "kronecker"])
def test_compiled_loss_and_gradient_equal_eager(kind):
    torch.manual_seed(0)
    vocab = [f"tok{t}".encode() for t in range(300)]
    model = GPT(GPTConfig(vocab_size=300, block_size=32, n_layer=2, n_head=2, n_embd=32, input=kind), vocab)
    idx = torch.randint(0, 300, (4, 32))
    params = list(model.parameters())  # for kronecker these include the input projection
    eager = model(idx, idx)[1]
    eager_grads = torch.autograd.grad(eager, params)
    compiled = torch.compile(model)(idx, idx)[1]
    compiled_grads = torch.autograd.grad(compiled, params)
    assert torch.allclose(eager, compiled, atol=1e-5) and eager.item() > 0
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(eager_grads, compiled_grads))


def test_checkpoint_from_train_loads_in_sample(data_dir, tmp_path):
    run(data_dir, tmp_path, "--input=affine", "--code_seed=7", "--max_iters=3", "--eval_interval=3")
    ckpt = load_checkpoint(str(tmp_path) + "/")  # `--ckpt out/`: a directory with a trailing slash
    assert ckpt["model_config"]["code_seed"] == 7 and build_model(ckpt).wte.A.shape == (9, 9)
    outputs = []
    for cache in ([], ["--no_cache"]):
        printed = io.StringIO()
        args = sample.parse_args(["--ckpt", str(tmp_path) + "/", "--start", "The crown", "--temperature", "0",
                                  "--num_samples", "1", "--max_new_tokens", "12", "--device", "cpu", *cache])
        tokens = sample.sample(args, printed)
        assert printed.getvalue().startswith("The crown") and len(tokens[0]) > 0
        outputs.append(tokens)
    assert outputs[0] == outputs[1]  # KV cache and full recompute choose the same tokens


def test_missing_data_and_checkpoint_are_one_line_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit:
        train.main(["--data_dir", str(tmp_path), "--dataset=nothing", "--device=cpu"])
    assert "meta.json not found; prepare the data first: python prepare.py" in str(exit.value)
    with pytest.raises(SystemExit) as exit:
        sample.main(["--ckpt", str(tmp_path)])
    assert "no checkpoint at" in str(exit.value)


def test_model_settings_are_gptconfigs_fields():
    assert set(MODEL_KEYS) == {f for f in GPTConfig.__dataclass_fields__ if f != "vocab_size"}
    assert "rope_base" in MODEL_KEYS and all(k in train.DEFAULTS for k in MODEL_KEYS)


def test_paper_configs_differ_only_in_the_input():
    configs = {name: resolve(train.DEFAULTS, [str(ROOT / "config" / f"{name}.py")]) for name in ("learned", "binary", "affine")}
    for name, s in configs.items():
        assert s["input"] == name and s["out_dir"] == f"out-{name}"
        others = {k: v for k, v in s.items() if k not in ("input", "out_dir")}
        assert others == {k: v for k, v in configs["binary"].items() if k not in ("input", "out_dir")}
    s = configs["binary"]
    assert (s["n_layer"], s["n_head"], s["n_embd"], s["block_size"], s["tie_weights"]) == (32, 32, 1024, 1024, False)
    tokens = s["max_iters"] * s["gradient_accumulation_steps"] * s["batch_size"] * s["block_size"]
    assert 16.5e9 < tokens < 17.5e9
    with torch.device("meta"):
        model = GPT(GPTConfig(vocab_size=65536, **{k: s[k] for k in MODEL_KEYS}))
    assert param_counts(model)["trainable"] == 469_828_608  # + 67,108,864 for 'learned'
    assert resolve(train.DEFAULTS, [str(ROOT / "config" / "shakespeare.py")])["n_embd"] % 10 == 0  # K = 10 for V = 1024


def test_the_input_learning_rate_follows_the_schedule_at_its_multiple(data_dir, tmp_path):
    log = run(data_dir, tmp_path / "run", "--input=learned", "--input_lr_scale=0.5", "--max_iters=3", "--eval_interval=3")
    groups = load_checkpoint(tmp_path / "run")["optimizer"]["param_groups"]
    last_lr = [r["lr"] for r in log if "lr" in r][-1]
    assert [g.get("lr_scale") for g in groups] == [None, None, 0.5]
    assert [float(g["lr"]) for g in groups] == pytest.approx([last_lr, last_lr, 0.5 * last_lr], rel=1e-6)


@pytest.mark.parametrize("kind", ["learned", "kronecker", "binary"])
def test_each_evaluation_logs_the_inputs_and_the_heads_norms(data_dir, tmp_path, kind):
    from conftest import reference_kronecker_code
    log = run(data_dir, tmp_path / "run", f"--input={kind}", "--max_iters=2", "--eval_interval=2")
    norms = [r["norms"] for r in log if "val_loss" in r][-1]
    weights = load_checkpoint(tmp_path / "run")["model"]
    if kind == "learned":  # by hand: the table's rows
        inputs = weights["wte.weight"].norm(dim=-1)
    elif kind == "kronecker":  # the dense definition: W kappa(t) for every token
        kappa = reference_kronecker_code(weights["wte.token_bytes"], weights["wte.lengths"])  # (V, D)
        inputs = (kappa @ weights["wte.cells"]).norm(dim=-1)
        projection = weights["wte.cells"].norm(dim=-1)
        assert norms["projection"] == pytest.approx({"mean": projection.mean().item(), "std": projection.std().item()}, rel=1e-5)
    else:  # the tiled 0/1 bits of each id: sqrt(copies x ones)
        bits = torch.tensor([[int(b) for b in format(t, "09b")] for t in range(300)]).float()
        inputs = (bits.sum(dim=-1) * (32 // 9) + bits[:, :32 % 9].sum(dim=-1)).sqrt()
    head = weights["lm_head.weight"].norm(dim=-1)
    assert norms["input"] == pytest.approx({"mean": inputs.mean().item(), "std": inputs.std().item()}, rel=1e-5)
    assert norms["head"] == pytest.approx({"mean": head.mean().item(), "std": head.std().item()}, rel=1e-5)


def test_two_nodes_on_one_machine_match_one_process_and_resume_across_them(data_dir, tmp_path):
    """issue 54: torchrun across nodes, as docs/training.md says: two launchers (--nnodes=2,
    --node_rank=0 and 1) on localhost with gloo. The dataset is on every node and the run folder
    shared (rank 0 writes it; every rank resumes from it). The losses are one process's, to float
    tolerance, and a run stopped at step 4 resumes across both nodes to step 8."""
    common = ["--data_dir", str(data_dir), "--dataset=tiny", *TINY, "--input=binary", "--lr_decay_iters=8",
              "--eval_interval=4", f"--out_dir={tmp_path / 'nodes'}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def two_nodes(*extra, port):
        launchers = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node_rank={rank}",
                                       "--nproc_per_node=1", "--master_addr=127.0.0.1", f"--master_port={port}",
                                       "train.py", *common, *extra], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
        for launcher in launchers:
            out, err = launcher.communicate(timeout=600)
            assert launcher.returncode == 0, err[-2000:]

    two_nodes("--max_iters=4", port=29541)
    two_nodes("--max_iters=8", "--init_from=resume", port=29542)
    run(data_dir, tmp_path / "single", *common[3:-1], "--max_iters=8")
    logs = [[json.loads(line) for line in (tmp_path / name / "log.jsonl").read_text().splitlines()]
            for name in ("nodes", "single")]
    evals = [[(r["iter"], r["val_loss"]) for r in log if "val_loss" in r] for log in logs]
    assert [i for i, _ in evals[0]] == [i for i, _ in evals[1]] == [0, 4, 8]
    assert [v for _, v in evals[0]] == pytest.approx([v for _, v in evals[1]], rel=1e-5)
    rank0, rank1 = [r for r in logs[0] if "rank_checksums" in r][-1]["rank_checksums"]
    assert rank0 == rank1
    single, nodes = weights(tmp_path / "single"), weights(tmp_path / "nodes")
    for k in single:
        assert torch.allclose(single[k], nodes[k], atol=1e-5), k


def test_a_nan_validation_loss_stops_the_run_and_keeps_the_last_checkpoint(data_dir, tmp_path, monkeypatch):
    """train.py's require_finite_val: a validation loss that is not finite ends the run in one line before
    the checkpoint of that step is saved, so the last good one stays byte for byte."""
    out = tmp_path / "run"
    real, calls = train.evaluate, []

    def evaluate(*args):
        losses = real(*args)
        calls.append(losses)
        return {**losses, "val": float("nan")} if len(calls) == 3 else losses  # steps 0, 2, then 4

    monkeypatch.setattr(train, "evaluate", evaluate)
    with pytest.raises(UserError, match=r"^validation loss is nan at step 4; not saved \(.*ckpt.pt keeps the last "
                                        r"good step\): lower learning_rate"):
        run(data_dir, out, "--max_iters=6", "--eval_interval=2")
    ckpt = torch.load(out / "ckpt.pt", weights_only=True)
    assert ckpt["iter_num"] == 2 and len(calls) == 3  # saved at step 2; nothing after the nan
    assert [r["iter"] for r in read_log(out / "log.jsonl") if "val_loss" in r] == [0, 2, 4]  # the nan is logged


def test_a_folder_is_a_run_only_by_our_mark(data_dir, tmp_path):
    """A new run refuses a folder of the user's own files (unless --overwrite) and another command's
    folder (always), each in one line with every file as it was; a run of ours stopped before its first
    log line is known by its config.json's mark."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text('{"my": "settings"}')
    with pytest.raises(UserError, match=r"holds files train.py did not write \(config.json\); choose another "
                                        r"--out_dir, or write the run among them with --overwrite=True"):
        run(data_dir, mine, "--max_iters=2", "--eval_interval=2")
    assert [p.name for p in mine.iterdir()] == ["config.json"] and "my" in (mine / "config.json").read_text()
    for marker, work in (("tablefree.json", "a Hugging Face export"), ("meta.json", "a prepared dataset")):
        theirs = tmp_path / marker
        theirs.mkdir()
        (theirs / marker).write_text("{}")
        (theirs / "config.json").write_text("{}")
        with pytest.raises(UserError, match=f"holds {work} .*which --overwrite never replaces"):
            run(data_dir, theirs, "--max_iters=2", "--eval_interval=2", "--overwrite=True")
        assert sorted(p.name for p in theirs.iterdir()) == sorted(["config.json", marker])
    run(data_dir, mine, "--max_iters=2", "--eval_interval=2", "--overwrite=True")  # the fix it names works
    assert (mine / "ckpt.pt").exists()
    (mine / "ckpt.pt").unlink()
    (mine / "log.jsonl").unlink()  # as a run stopped before its first log line leaves it: its config.json
    with pytest.raises(UserError, match="already holds a run; continue it with --init_from=resume"):
        run(data_dir, mine, "--max_iters=2", "--eval_interval=2")


def test_a_resume_with_nothing_left_to_train_keeps_the_recipe(data_dir, tmp_path):
    """config.json changes only with a checkpoint trained under it: a resume past max_iters with another
    learning rate trains nothing and rewrites nothing."""
    run(data_dir, tmp_path, "--max_iters=4", "--eval_interval=2")
    before = {name: (tmp_path / name).read_bytes() for name in ("config.json", "log.jsonl", "ckpt.pt")}
    run(data_dir, tmp_path, "--max_iters=4", "--eval_interval=2", "--init_from=resume", "--learning_rate=1e-3")
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
