"""experiments/adaptation.py's pieces that need no long runs: the spelling pairs, the statistics and
the report (the study itself trains 60 runs: python -m experiments.adaptation). Run: python -m pytest tests/test_adaptation.py"""

import math

import prepare
from experiments import adaptation


def test_spelling_pairs_are_the_training_texts_words_letter_by_letter(tmp_path):
    text = tmp_path / "plays.txt"
    text.write_text("ROMEO:\nThe rose, the ROSE and a rose; thee thou art.\n" * 50 + "A held-out tail.\n" * 30)
    prepare.prepare(prepare.parse_args(["--input", str(text), "--name", "shakespeare", "--out_dir", str(tmp_path),
                                        "--vocab_size", "260", "--quiet"]))
    pairs = adaptation.spelling_pairs(tmp_path)
    words = [p["prompt"][len("spell: "):-1] for p in pairs]
    assert words == sorted(set(words)) and {"and", "art", "rose", "the", "thee", "thou"} <= set(words)
    assert not {"a", "ROSE", "romeo", "endoftext"} & set(words)  # too short, upper case, the documents' ends
    assert all(p["response"] == " ".join(w) for p, w in zip(pairs, words)) and pairs[words.index("rose")]["response"] == "r o s e"


def runs_of(kjv_after, spelling):
    """Three seeds' numbers for one input, the KJV result and spelling as given."""
    return [{"pretrain_bpb": 2.3, "kjv_before": 3.0, "kjv_after": a, "kjv_scratch": 2.6, "spelling_exact": s}
            for a, s in zip(kjv_after, spelling)]


def test_summary_gaps_and_report():
    runs = {"learned": runs_of([2.10, 2.12, 2.14], [0.5, 0.6, 0.7]), "binary": runs_of([2.20, 2.20, 2.20], [0.1, 0.1, 0.1])}
    summary = adaptation.summarize(runs)
    assert math.isclose(summary["learned"]["kjv_after"], 2.12) and math.isclose(summary["learned"]["kjv_after_std"], 0.02)
    assert math.isclose(summary["learned"]["kjv_gain"], 0.48)  # scratch minus after: what pretraining bought
    g = summary["binary"]["vs_learned"]["spelling_exact"]
    assert math.isclose(g["gap"], -0.5) and math.isclose(g["stderr"], 0.1 / math.sqrt(3))
    assert g["exceeds_seed_variation"] and "vs_learned" not in summary["learned"]
    table = adaptation.report("python -m experiments.adaptation", {"cpu": "x", "threads": 2, "gpu": None, "torch": "t",
                                                                  "date": "d"}, summary, 941)
    assert "| binary | 3 | 2.3000 ± 0.0000 | 3.0000 ± 0.0000 | 2.2000 ± 0.0000 |" in table
    assert "- binary, spelling exact match: -0.5000 (standard error 0.0577); exceeds seed variation" in table
    assert "941 held-out words" in table
