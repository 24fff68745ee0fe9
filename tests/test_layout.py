"""The repository's shape: the design card's top level, imports flowing one way, short files.
Run: python -m pytest tests/test_layout.py (the figures themselves: python dev/layout.py)"""

import subprocess

from conftest import ROOT
from dev.layout import depth, entry_point_imports, import_graph

TOP_LEVEL = {"model.py", "train.py", "codes.py", "prepare.py", "sample.py", "config", "tests", "README.md",  # the card
             "requirements.txt", "requirements-extras.txt", "requirements-dev.txt", "pyproject.toml",  # packaging
             "tablefree", "tools", "experiments", "results", "docs", "dev"}  # the role folders


def tracked_top_level():
    """The top level as git sees it: committed or new, but not ignored (out/, data/, .venv/)."""
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return {f.split("/")[0] for f in files if not f.startswith(".")}


def test_the_top_level_is_the_design_card():
    assert tracked_top_level() == TOP_LEVEL


def test_no_module_imports_an_entry_point():
    graph = import_graph(ROOT)
    bad, entries = entry_point_imports(ROOT, graph)
    assert bad == [] and {"train.py", "sample.py", "prepare.py", "tools/evaluate.py", "experiments/compare.py"} <= set(entries)
    assert "model.py" not in entries and "tablefree/checkpoint.py" not in entries


def test_imports_form_no_cycle_and_the_library_never_reaches_up():
    graph = import_graph(ROOT)
    depth(graph)  # raises on a cycle
    for f, imported in graph.items():
        if f.startswith("tablefree/") or f in ("model.py", "codes.py"):  # the library imports no tool or experiment
            assert not any(d.startswith(("tools/", "experiments/")) for d in imported), f
        if f.startswith("tools/"):
            assert not any(d.startswith("experiments/") for d in imported), f
    assert graph["codes.py"] == set()  # pure functions: nothing of ours


def test_files_are_short():
    lengths = {f: len((ROOT / f).read_text().splitlines()) for f in import_graph(ROOT)}
    assert lengths["model.py"] <= 560  # the single-file GPT, inputs included (nanochat's gpt.py: 555)
    assert {f: n for f, n in lengths.items() if f != "model.py" and n >= 400} == {}
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250
