"""What a checkpoint's crc32 costs at the papers' 32-layer shape (config/binary.py): the time to
checksum its weights and AdamW state, beside the times torch.save and torch.load take for them.

    PYTHONPATH=. python dev/checksum_cost.py [config/binary.py] [--dir /tmp]

The tensors are uninitialised (the times do not depend on the values); it needs ~2x the
checkpoint's size in memory and its size on disk in --dir.
"""

import sys
import tempfile
import time
from pathlib import Path

import torch

from model import GPT
from tablefree.common import state_crc32
from tablefree.configurator import check_settings, model_config, resolve, script_settings


def main(argv):
    config = argv[0] if argv and not argv[0].startswith("--") else "config/binary.py"
    folder = argv[argv.index("--dir") + 1] if "--dir" in argv else None
    s = check_settings(resolve(script_settings("train.py"), [config]))  # train.py's settings, read, not imported
    with torch.device("meta"):
        shapes = {name: p.shape for name, p in GPT(model_config(s, s.vocab_size)).named_parameters()}
    model = {name: torch.empty(shape) for name, shape in shapes.items()}
    adam = {i: {"step": torch.zeros(()), "exp_avg": torch.empty(shape), "exp_avg_sq": torch.empty(shape)}
            for i, shape in enumerate(shapes.values())}
    state = {"model": model, "optimizer": {"state": adam, "param_groups": []}}
    gb = sum(4 * t.numel() for t in model.values()) * 3 / 1e9
    t0 = time.perf_counter()
    state_crc32(state)
    crc_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        t0 = time.perf_counter()
        torch.save(state, Path(tmp) / "ckpt.pt")
        save_s = time.perf_counter() - t0
        del state, model, adam
        t0 = time.perf_counter()
        torch.load(Path(tmp) / "ckpt.pt", weights_only=True)
        load_s = time.perf_counter() - t0
    print(f"{config}: {gb:.2f} GB of weights and AdamW state; crc32 {crc_s:.1f} s ({gb / crc_s:.2f} GB/s), "
          f"torch.save {save_s:.1f} s, torch.load {load_s:.1f} s: the checksum adds {crc_s / save_s:.0%} to a save "
          f"and {crc_s / load_s:.0%} to a load")


if __name__ == "__main__":
    main(sys.argv[1:])
