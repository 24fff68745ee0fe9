"""experiments/engines.py and the paper section's paired runs (issue 56): what they count and how they
alternate, with a stand-in for llama-bench (the real one is built by dev/build_llama_bench.sh; the
figures it gives are the benchmark's, results/BENCHMARKS.md, never a test's).
Run: python -m pytest tests/test_engines.py"""

import json
import statistics
import sys

import pytest

from experiments import bench_paper, engines
from tablefree import runtime
from tablefree.packed import packed_ternary


def test_the_bytes_a_step_reads_are_the_files_tensors_counted_by_hand():
    """At the paper's widths with 2 layers and V = 8,192 (the section's --quick shape): the codes, the
    2-bit body and its scales, the code head's float16 projection and float32 bias, the norms."""
    name, model, ckpt = next(bench_paper.random_models(bench_paper.QUICK[bench_paper.PAPER]))
    c = model.config
    body = 2 * (640 * (3 * 640 + 640 + 2 * 3072) // 4 + 4 * 4)
    by_hand = 8192 * 512 // 8 + body + 640 * 512 * 2 + 8192 * 4 + (2 * 2 + 1) * 640 * 4
    assert (name, c.n_layer, c.vocab_size, c.bias) == ("frozen+codes, ternary", 2, 8192, False)
    assert engines.our_bytes(packed_ternary(model, ckpt), c) == by_hand
    assert engines.kv_bytes(c, 100, 2) == 2 * 2 * 640 * 2 * 100


def test_the_peak_memory_is_the_processes_own_not_its_parents():
    """A child forked from this (large) Python process: its peak is its own 200 MB and its interpreter,
    where wait4's ru_maxrss would report this process's pages too."""
    ballast = bytearray(300 * 2 ** 20)  # this process's pages: not the child's
    _, _, peak = engines.measured([sys.executable, "-c", "x = bytearray(200 * 2 ** 20); x[::4096] = b'1' * len(x[::4096]); "
                                   "import time; time.sleep(0.3)"], 1)
    assert 200 * 2 ** 20 < peak < 260 * 2 ** 20 and len(ballast)


@pytest.fixture
def stand_in(tmp_path):
    """A llama-bench that logs its arguments and reports 400 prompt and 50 new tokens a second."""
    program, log = tmp_path / "llama-bench", tmp_path / "calls"
    program.write_text(f"#!{sys.executable}\nimport json, sys\nopen({str(log)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
                       "n = int(sys.argv[sys.argv.index('-n') + 1])\n"
                       "print(json.dumps([{'n_prompt': 16, 'n_gen': 0, 'avg_ts': 400.0}, {'n_prompt': 0, 'n_gen': n, "
                       "'avg_ts': 50.0}]))\n")
    program.chmod(0o755)
    return program, log


def test_the_engines_alternate_and_each_pair_gives_its_ratio(stand_in, tmp_path):
    pytest.importorskip("gguf", reason="the GGUF writer is the gguf package: pip install -r requirements-extras.txt")
    from tools.gguf import write_gguf
    program, log = stand_in
    files = {}
    for name, model, ckpt in bench_paper.random_models(bench_paper.QUICK["8 x 768"]):
        if name.startswith("frozen"):
            contents = packed_ternary(model, ckpt)
            runtime.write_flat(contents, tmp_path / "frozen.bin")
            files[name] = {"config": model.config, "flat": tmp_path / "frozen.bin", "gguf": {},
                           "bytes": engines.our_bytes(contents, model.config)}
        elif model.config.body == "float":
            files[name] = {"config": model.config, "gguf": {"Q8_0": write_gguf(model, ckpt, tmp_path / "q8.gguf", "Q8_0")}}
    if len(files) < 2:
        pytest.skip("the float model is made where llama-cpp-python is installed")
    rows = bench_paper.paired_rows(files, program, [1], 2, 8, {1: {"gb_s": 10.0}})
    assert sorted((r["engine"], r["variant"], r["load"]) for r in rows) == sorted(
        [("ours", variant, load) for variant in engines.VARIANTS for load in ("idle", "busy")] + [("llama-bench", "Q8_0", "idle"),
                                                                                      ("llama-bench", "Q8_0", "busy")])
    calls = log.read_text().splitlines()
    assert len(calls) == 4 and all(" -t 1 " in c and " -n 8 " in c and " -p 16 " in c and " -d 16 " in c for c in calls)
    q8 = files["learned+tied, float"]
    for r in rows:
        assert len(r["runs"]) == 2 and r["of_probe"] == pytest.approx(r["gb_s"] / 10.0)
        if r["engine"] == "llama-bench":
            assert (r["tok_s"], r["prompt_tok_s"]) == (50.0, 400.0)
            assert r["bytes"] == engines.gguf_bytes(q8["gguf"]["Q8_0"], q8["config"]) + engines.kv_bytes(q8["config"], 20.5, 2)
        else:
            assert r["ratio"] == pytest.approx(statistics.median(t / 50.0 for t in r["runs"])) and r["tok_s"] > 0
            assert r["peak_rss"] > 0 and 0 < r["threads_used"] <= 1
    assert json.dumps(rows)  # the section's JSON holds them
