"""python -m experiments.bench --quick runs and writes a well-formed report (not that anything is fast). Run: python -m pytest tests/test_bench.py"""

import importlib.util
import json
from types import SimpleNamespace

import pytest

from experiments import bench, bench_lengths
from experiments.bench_train import SHAPES, shapes
from model import INPUTS
from tablefree.reports import markdown


@pytest.mark.slow  # every section of the benchmark: two minutes
def test_quick_bench_writes_markdown_and_json(tmp_path):
    bench.main(["--quick", "--out", str(tmp_path / "B.md"), "--data_dir", str(tmp_path / "data")])
    report = (tmp_path / "B.md").read_text()
    results = json.loads((tmp_path / "B.json").read_text())
    for section in ("train", "memory", "input", "generate", "prepare", "paper"):
        assert f"## {section}" in report and results[section]
    if importlib.util.find_spec("llama_cpp"):  # llama.cpp's four files beside our three
        assert [(r["engine"], r["model"]) for r in results["llama"]] == [
            *(("ours", m) for m in ("float32", "bfloat16", "ternary")), *(("llama.cpp", m) for m in ("F32", "Q8_0", "TQ2_0", "TQ1_0"))]
        assert all(r["tok_s"] > 0 and r["peak_rss"] > 0 for r in results["llama"])
    assert results["measured"]["train"]["command"].startswith("python -m experiments.bench --quick")
    train = results["train"]
    assert {(r["shape"], r["input"]) for r in train} == {(s, i) for s in SHAPES for i in INPUTS}
    assert all(r["ms"] > 0 and r["mfu"] > 0 for r in train)  # (MFU against a peak measured at another moment:
    # on a loaded 2-core machine it can exceed 1, so no upper bound is asserted)
    fixed, learned = [r for r in train if r["input"] == "binary"], [r for r in train if r["input"] == "learned"]
    assert all(f["trainable"] < l["trainable"] for f, l in zip(fixed, learned))  # the table is gone
    assert [(r["micro_batches"], r["input"]) for r in results["memory"]] == [(m, i) for m in (1, 2) for i in INPUTS]
    memory = {r["input"]: r for r in results["memory"]}
    assert memory["learned"]["params"] - memory["binary"]["params"] == 8192 * 256 * 4  # the --quick table, fp32
    assert memory["learned"]["adam"] == 2 * memory["learned"]["params"] and memory["affine"]["peak"] > 0
    assert [r["input"] for r in results["input"]] == list(INPUTS)
    kronecker = [r for r in train if r["input"] == "kronecker"]
    assert all(k["trainable"] - f["trainable"] == 4096 * k_shape for k, f, k_shape in
               zip(kronecker, fixed, [shapes(True)[r["shape"]][0]["n_embd"] for r in kronecker]))  # the projection
    assert {r["what"].split(" (")[0] for r in results["prepare"]} >= {"prepare.py --workers 1", "tiktoken.encode_ordinary_batch alone"}
    assert all(r["tokens"] > 100_000 and r["tok_s"] > 0 for r in results["prepare"])
    assert len({r["tokens"] for r in results["prepare"][:2]}) == 1  # one and two workers write the same tokens
    paper = next(r for r in results["paper"]["rows"]["the paper's"] if r["engine"] == "ours, torch packed")
    # (the paper's widths, 2 layers, V = 8,192: 512-bit codes, a 2-bit body)
    body = 2 * (640 * (3 * 640 + 640 + 2 * 3072) // 4 + 4 * 4)  # each layer's four matrices at 2 bits, and gammas
    assert paper["parts"]["codes (V x D bits, the input's and the head's)"] == 8192 * 512 // 8
    assert paper["parts"]["body: ternary weights, 2 bits each, and their scales"] == body
    assert paper["file"] > sum(paper["parts"].values())
    assert all(r["tok_s"] > 0 for rows in results["paper"]["rows"].values() for r in rows if "refused" not in r)
    assert "1" in results["paper"]["bandwidth"] and all(b["gb_s"] > 0 for b in results["paper"]["bandwidth"].values())
    generate = results["generate"]
    assert len(generate) == 8 and {(r["batch"], r["kv_cache"]) for r in generate} == {(1, True), (1, False), (8, True), (8, False)}
    assert all(r["tok_s"] > 0 and 0 < r["first_token_ms"] < 1000 * r["seconds"] for r in generate)
    reference = results["reference"]  # the plain decoder first, then run.c a technique at a time
    assert reference[0]["engine"].startswith("reference.c") and reference[1]["engine"] == "run.c, plain C, one thread"
    assert all(r["tok_s"] > 0 for r in reference) and "x the reference" in report.split("## reference")[1]


@pytest.mark.slow  # two quick benchmark sections: 20 s; CI checks the report's parts
def test_a_section_measured_again_replaces_only_itself(tmp_path):
    out = tmp_path / "B.md"
    out.write_bytes(markdown("python -m experiments.bench", "# Benchmarks\n\n`python -m experiments.bench --sections NAME` "
                            "measures one again\n\n## train\n\nkept as it was\n\n## prepare\n\nan old measurement\n"))
    bench.main(["--quick", "--sections", "generate", "--out", str(out)])
    report = out.read_text()
    assert "## train\n\nkept as it was" in report and "an old measurement" in report
    assert report.index("## train") < report.index("## generate") < report.index("## prepare")  # the sections' order
    assert "`python -m experiments.bench --quick --sections generate --out " in report.split("## generate")[1]
    assert list(json.loads((tmp_path / "B.json").read_text())["measured"]) == ["generate"]


def test_the_bandwidth_probe_reads_its_whole_array_with_the_threads_asked():
    """experiments/bandwidth.c: the sum it prints is the element count only if every element was
    read; the figure itself is a benchmark's (results/BENCHMARKS.md), not a test's."""
    from experiments.bandwidth import read_bandwidth
    for threads in (1, 2):
        probe = read_bandwidth(threads, mib=16, repetitions=1)
        assert probe["bytes"] == 16 << 20 and probe["threads"] == threads and probe["gb_s"] > 0


def test_the_lengths_rows_and_targets_by_hand():
    """experiments/bench_lengths: the ratio is the median of the pairs' ratios, a decoding row's bytes are
    the file's and the KV cache's at the mean context, and each target is judged from those; a decoding
    target also says the share of the bandwidth it needs (here 1 MB/s: llama-bench's 67488 bytes at 10 a
    second are 67%, and ours 80360 (defaults: int16 sums, 2.5 bytes a value with its head's scale), 64488
    (float16) and 48616 (int8: 1.5 bytes) bytes a step allow 0.84x, 1.05x and 1.39x)."""
    made = {"config": SimpleNamespace(n_layer=2, n_embd=8, n_head=1), "flat_bytes": 1000, "gguf_bytes": 4000}
    rows = []
    for work, (context, new), scale in (("a 512-token prompt", (512, 0), 1.0), ("64 tokens after 960", (960, 64), 0.5)):
        for load, slow in (("idle", 1.0), ("busy", 0.3)):
            runs = {"llama-bench": [(10.0 * slow, 1e6), (20.0 * slow, 1e6), (10.0 * slow, 1e6)],
                    "defaults": [(30.0 * slow * scale, 2e6), (44.0 * slow * scale, 3e6), (25.0 * slow * scale, 1e6)],
                    "--exact": [(20.0, 1e6)] * 3, "--kv_cache f16": [(80.0, 1e6)] * 3, "--kv_cache i8": [(60.0, 1e6)] * 3}
            rows += bench_lengths.summarize(work, load, runs, made, context, new, bandwidth=1e-3)
    by = {(r["work"], r["load"], r["engine"]): r for r in rows}
    prompt = by[("a 512-token prompt", "idle", "defaults")]
    assert prompt["ratio"] == 2.5 and prompt["tok_s"] == 30.0 and prompt["peak_rss"] == 3e6 and "bytes" not in prompt
    deep = by[("64 tokens after 960", "idle", "--kv_cache f16")]
    assert deep["bytes"] == 1000 + 2 * 2 * 8 * 2 * (960 + 32) and deep["ratio"] == 8.0
    assert by[("64 tokens after 960", "idle", "llama-bench")]["bytes"] == 4000 + 2 * 2 * 8 * 2 * (960 + 32)
    assert by[("64 tokens after 960", "idle", "--kv_cache i8")]["bytes"] == 1000 + 2 * 2 * 8 * 1.5 * (960 + 32)
    lines = bench_lengths.targets(rows)
    assert "- a 512-token prompt, defaults: 2.50x llama-bench (target at least 2x: met)" in lines
    assert by[("64 tokens after 960", "idle", "defaults")]["bytes"] == 1000 + 2 * 2 * 8 * 2.5 * (960 + 32)
    assert ("- 64 tokens after 960, defaults: 1.25x llama-bench (target at least 5x: NOT met); its bytes a step allow "
            "0.84x at llama-bench's 67% of the bandwidth, so 5x needs 402% of it") in lines
    assert ("- 64 tokens after 960, --kv_cache f16: 8.00x llama-bench (target at least 7x: met); its bytes a step allow "
            "1.05x at llama-bench's 67% of the bandwidth, so 7x needs 451% of it") in lines
    assert ("- 64 tokens after 960, --kv_cache i8: 6.00x llama-bench (target at least 7x: NOT met); its bytes a step "
            "allow 1.39x at llama-bench's 67% of the bandwidth, so 7x needs 340% of it") in lines
    assert any(line.startswith("- a 512-token prompt beside one busy process: ours keeps 30% of its idle speed "
                               "(target at least 40%: NOT met); llama-bench 30%") for line in lines)
