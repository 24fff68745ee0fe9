"""The repository's shape, measured from its own files: what a reader meets.

    python prepare.py && python dev/layout.py          # the figures below, for this checkout
    python dev/layout.py --root ../other-checkout       # the same for another one

- imports: every Python file outside tests/ and dev/ is a node, an import of another such file
  an edge (read from the AST; nothing is imported); `depth` is the longest chain of imports in
  levels (a file that imports no other is level 1); `entry points` are the files with an
  `if __name__ == "__main__":` block, and `imports of entry points` must be empty;
- the path to the first loss: `python train.py config/shakespeare.py` run for one evaluation
  batch (max_iters=0, eval_iters=1, in a temporary out_dir, on data/shakespeare) under a
  profiler that records every call into the checkout's files until the model first returns a
  loss: the files and functions a reader passes, and which file calls into which (the arrows a
  reader follows from one file to another);
- what a reader of each top-level script opens: the checkout's files it imports, directly or through
  others (itself included), and their lines; and each script's longest function in lines;
- the README's length in lines and the files at the top level;
- with --paths, the default paths run: the quick start's `python prepare.py`, `python train.py
  config/shakespeare.py` (a few steps, a checkpoint saved) and `python sample.py --ckpt out/`, each a
  process of its own in a temporary folder under a profiler hook (sys.setprofile, every thread): the
  checkout's files whose code ran (the script itself counted, package __init__ files aside), their
  lines and the characters of their longest line. prepare.py fetches tiny Shakespeare (the network
  or the package index).
"""

import argparse
import ast
import contextlib
import inspect
import io
import json
import os
import runpy
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

SKIP = ("tests", "dev", ".venv", ".git")  # not part of what a reader of the code follows
SCRIPTS = ("train.py", "model.py", "prepare.py", "sample.py")  # the design card's scripts


def python_files(root):
    return sorted(p for p in root.rglob("*.py") if not set(p.relative_to(root).parts) & set(SKIP))


def module_path(root, dotted):
    """The checkout's file for a dotted module name, or None for a module from elsewhere."""
    base = root.joinpath(*dotted.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def imports_of(root, path):
    """The checkout's files that path imports."""
    package = ".".join(path.relative_to(root).parent.parts)
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            module = (f"{parent}." if node.level and parent else "") + (node.module or "")
            module = module.strip(".")
            names = [module] + [f"{module}.{alias.name}" if module else alias.name for alias in node.names]
        else:
            continue
        found |= {p for p in (module_path(root, n) for n in names if n) if p and p != path}
    return found


def is_entry_point(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    return any(isinstance(n, ast.If) and "__name__" in ast.unparse(n.test) and "__main__" in ast.unparse(n.test)
               for n in tree.body)


def import_graph(root):
    """{file: set of files it imports}, paths relative to root."""
    files = python_files(root)
    return {str(p.relative_to(root)): {str(q.relative_to(root)) for q in imports_of(root, p)} for p in files}


def depth(graph):
    """The longest import chain, in levels: 1 for a file that imports no other."""
    levels = {}

    def level(node, seen=()):
        if node in seen:
            raise ValueError(f"import cycle through {node}")
        if node not in levels:
            levels[node] = 1 + max((level(d, (*seen, node)) for d in graph[node]), default=0)
        return levels[node]

    return max(level(n) for n in graph), levels


def entry_point_imports(root, graph):
    """[(importer, entry point)]: what must never be (entry points import the library, not each other)."""
    entries = {f for f in graph if is_entry_point(root / f)}
    return sorted((a, b) for a, deps in graph.items() for b in deps if b in entries), sorted(entries)


def reader_of(root, graph, script):
    """{"files": n, "lines": n}: the checkout's files a reader of script opens to follow it (every file it
    imports, directly or through others, itself included) and their lines in all."""
    seen, todo = {script}, [script]
    while todo:
        for imported in graph[todo.pop()] - seen:
            seen.add(imported)
            todo.append(imported)
    return {"files": len(seen), "lines": sum(len((root / f).read_text().splitlines()) for f in seen)}


def longest_function(path):
    """"name: lines" of the longest function (or method) in a file."""
    defs = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    longest = max(defs, key=lambda n: n.end_lineno - n.lineno + 1)
    return f"{longest.name}: {longest.end_lineno - longest.lineno + 1}"


def path_to_first_loss(root):
    """{"files": [...], "functions": n, "file-to-file calls": [...]} on the calls from `python train.py
    config/shakespeare.py` to the model's first loss, twice: "calls" follows functions only (what
    a reader steps through), "with imports" also counts the modules' and classes' top-level code as it runs."""
    events, done = [], [False]  # (call or return, file, is a module's top level, function)
    root = root.resolve()

    def inside(code):
        path = Path(code.co_filename)
        return path.is_relative_to(root) and not set(path.relative_to(root).parts) & set(SKIP)

    def profile(frame, event, arg):
        if done[0] or event not in ("call", "return") or not inside(frame.f_code):
            return
        where = str(Path(frame.f_code.co_filename).relative_to(root))
        top_level = not frame.f_code.co_flags & inspect.CO_OPTIMIZED  # a module or class body, run as it is imported
        events.append((event, where, top_level, frame.f_code.co_qualname))
        if event == "return" and frame.f_code.co_name == "forward" and isinstance(arg, tuple) and len(arg) == 2 \
                and arg[1] is not None:
            done[0] = True  # (logits, loss): the first loss

    with tempfile.TemporaryDirectory() as out:
        argv, path = sys.argv, list(sys.path)
        sys.argv = ["train.py", "config/shakespeare.py", "--max_iters=0", "--eval_iters=1", f"--out_dir={out}",
                    "--device=cpu", "--compile=False"]
        sys.path.insert(0, str(root))
        sys.setprofile(profile)
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # the run's own lines: not part of the report
                runpy.run_path(str(root / "train.py"), run_name="__main__")
        finally:
            sys.setprofile(None)
            sys.argv, sys.path[:] = argv, path
    if not done[0]:
        raise SystemExit("the run ended before the model returned a loss")

    def walk(with_imports):
        kept = [e for e in events if with_imports or not e[2]]
        stack, edges = [], set()
        for event, where, _, _ in kept:
            if event == "call":
                if stack and stack[-1] != where:
                    edges.add((stack[-1], where))
                stack.append(where)
            elif stack:
                stack.pop()
        calls = [(where, name) for event, where, _, name in kept if event == "call"]
        return {"files": list(dict.fromkeys(w for w, _ in calls)), "functions": len(set(calls)),
                "file-to-file calls": sorted(f"{a} -> {b}" for a, b in edges)}

    return {"calls": walk(False), "with imports": walk(True)}


# the quick start's commands, each shortened only where it would take minutes: {script: its arguments}
DEFAULT_PATHS = {
    "prepare.py": ["--out_dir={data}"],
    "train.py": ["{root}/config/shakespeare.py", "--data_dir={data}", "--out_dir={out}", "--max_iters=4",
                 "--eval_interval=2", "--eval_iters=1", "--log_interval=1"],
    "sample.py": ["--ckpt={out}/", "--num_samples=1", "--max_new_tokens=8"],
}


def ran(root, script, argv):
    """The checkout's files whose code ran while script ran with argv in this process (SystemExit kept)."""
    root, found = root.resolve(), set()

    def profile(frame, event, arg):
        if event == "call":
            found.add(frame.f_code.co_filename)

    sys.argv, sys.path[0] = [script, *argv], str(root)
    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            runpy.run_path(str(root / script), run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            raise
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    paths = {Path(f) for f in found if f.endswith(".py")}
    return sorted(str(p.relative_to(root)) for p in paths if p.is_relative_to(root) and p.name != "__init__.py"
                  and not set(p.relative_to(root).parts) & set(SKIP))


def file_sizes(root, files):
    """{"files": n, "lines": n, "longest line": characters, "each": {file: lines}} of files under root."""
    each = {f: (root / f).read_text().splitlines() for f in files}
    return {"files": len(files), "lines": sum(map(len, each.values())),
            "longest line": max((len(line) for lines in each.values() for line in lines), default=0),
            "each": {f: len(lines) for f, lines in each.items()}}


def default_paths(root, scripts=tuple(DEFAULT_PATHS)):
    """{script: file_sizes of the files its default path ran}: each script a process of its own (a fresh
    interpreter: the imports' own code counts), in the order of the quick start, in a temporary folder."""
    report = {}
    with tempfile.TemporaryDirectory() as tmp:
        where = {"data": f"{tmp}/data", "out": f"{tmp}/out", "root": root}
        for script in scripts:
            argv = [a.format(**where) for a in DEFAULT_PATHS[script]]
            done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--root", str(root), "--ran",
                                   script, *argv], cwd=tmp, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"{script} {' '.join(argv)} failed:\n{done.stderr[-2000:]}")
            report[script] = file_sizes(root, json.loads(done.stdout.splitlines()[-1]))
    return report


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default=str(Path(__file__).resolve().parents[1]), help="the checkout to measure")
    p.add_argument("--no_trace", action="store_true", help="skip the traced run (needs data/shakespeare)")
    p.add_argument("--paths", action="store_true", help="only the default paths, run (prepare, train, sample)")
    p.add_argument("--ran", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)  # one traced script: default_paths's
    args = p.parse_args()
    root = Path(args.root).resolve()
    if args.ran:
        print(json.dumps(ran(root, args.ran[0], args.ran[1:])))
        return
    if args.paths:
        print(json.dumps(default_paths(root), indent=2))
        return
    graph = import_graph(root)
    levels, by_file = depth(graph)
    bad, entries = entry_point_imports(root, graph)
    report = {"python files": len(graph), "import depth (levels)": levels,
              "deepest": sorted(f for f, level in by_file.items() if level == levels),
              "entry points": entries, "imports of entry points": [f"{a} -> {b}" for a, b in bad],
              "top level": sorted(p.name for p in root.iterdir() if not p.name.startswith(".")),
              "README lines": len((root / "README.md").read_text().splitlines()),
              "a reader of each script opens": {f: reader_of(root, graph, f) for f in SCRIPTS if f in graph},
              "longest function": {f: longest_function(root / f) for f in SCRIPTS if f in graph}}
    if not args.no_trace:
        os.chdir(root)
        report["path to the first loss"] = path_to_first_loss(root)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
