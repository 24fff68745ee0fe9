"""What a script runs on: the peak FLOP/s of known GPUs for MFU, and a description of the machine for
results files. (A torchrun launch's processes are train.py's; the device and dtype rules common.py's.)"""

import platform
import time
from pathlib import Path

import torch

GPU_PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12,
                 "L4": 121e12, "RTX 4090": 165e12, "RTX 3090": 71e12, "V100": 125e12}  # dense FLOP/s


def peak_flops_of(device_type, configured):
    """One device's peak FLOP/s for MFU: the configured value, else the table above for known GPUs."""
    if configured or device_type != "cuda":
        return configured
    name = torch.cuda.get_device_name()
    return next((flops for key, flops in GPU_PEAK_BF16.items() if key in name), 0.0)


def machine():
    """What a results file says it was measured on."""
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "python": platform.python_version(),
            "torch": torch.__version__, "cpu": cpu_name(),
            "threads": torch.get_num_threads(),
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}


def measured_on(command, info):
    """A results file's first words: the command, and the machine() it ran on."""
    threads = f"{info['threads']} thread{'s' if info['threads'] > 1 else ''}"
    gpu = f", GPU: {info['gpu']}" if info["gpu"] else ""
    return f"`{command}` on {info['cpu']} ({threads}){gpu}, torch {info['torch']}, finished {info['date']}."


def cpu_name():
    """The CPU's model name (Linux's /proc/cpuinfo), else what platform knows: 'AMD EPYC', 'x86_64'."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()
