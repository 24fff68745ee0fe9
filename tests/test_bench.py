"""bench.py --quick runs and writes a well-formed report (not that anything is fast). Run: python -m pytest tests/test_bench.py"""

import json

import bench


def test_quick_bench_writes_markdown_and_json(tmp_path):
    bench.main(["--quick", "--out", str(tmp_path / "B.md"), "--data_dir", str(tmp_path / "data")])
    report = (tmp_path / "B.md").read_text()
    results = json.loads((tmp_path / "B.json").read_text())
    assert "## prepare" in report and "## generate" in report and results["command"].startswith("python bench.py --quick")
    assert {r["what"].split(" (")[0] for r in results["prepare"]} >= {"prepare.py --workers 1", "tiktoken.encode_ordinary_batch alone"}
    assert all(r["tokens"] > 100_000 and r["tok_s"] > 0 for r in results["prepare"])
    assert len({r["tokens"] for r in results["prepare"][:2]}) == 1  # one and two workers write the same tokens
    generate = results["generate"]
    assert len(generate) == 8 and {(r["batch"], r["kv_cache"]) for r in generate} == {(1, True), (1, False), (8, True), (8, False)}
    assert all(r["tok_s"] > 0 and 0 < r["first_token_ms"] < 1000 * r["seconds"] for r in generate)
