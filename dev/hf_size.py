"""The remote-code Hugging Face folder of the frozen-code paper's model at its shape (issue 57), beside
its packed file: config/frozen_270m_ternary.py, experiments.bench's random weights (sizes do not depend
on them). Prints each file's size.

    PYTHONPATH=. python dev/hf_size.py
"""

import tempfile
from pathlib import Path

import torch

from experiments.bench_paper import random_models
from tablefree.packed import packed_ternary
from tools.hf import export_hf

with tempfile.TemporaryDirectory() as folder:
    name, model, ckpt = next(random_models({}))  # the frozen code-head ternary model
    torch.save(packed_ternary(model, ckpt), Path(folder) / "model.ternary.pt")
    out, said = export_hf(model, ckpt, Path(folder) / "hf")
    print(f"{name}: {said}")
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file():
            print(f"{path.relative_to(folder)}: {path.stat().st_size / 1e6:.2f} MB")
    print(f"the folder: {sum(p.stat().st_size for p in out.iterdir()) / 1e6:.2f} MB")
