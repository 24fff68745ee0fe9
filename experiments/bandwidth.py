"""This machine's memory read bandwidth, measured by experiments/bandwidth.c with a decoder's threads:
the ceiling of a runtime that reads its weights once a token, against which experiments.bench's
paper section states each engine's effective GB/s (bytes read a token x tokens a second)."""

import os
import subprocess
from pathlib import Path

from tablefree.common import UserError
from tablefree.runtime import binary

SOURCE = Path(__file__).with_name("bandwidth.c")


def read_bandwidth(threads, mib=1024, repetitions=5):
    """{'gb_s': the best of `repetitions` reads of a mib-MiB array (10^9 bytes a second), 'bytes',
    'threads'}, the array far larger than any last-level cache at the default 1 GiB."""
    program = binary(SOURCE, "the bandwidth probe", "measure on a machine with AVX2 and a C compiler")
    done = subprocess.run([str(program), str(mib), str(repetitions)], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    if done.returncode:
        raise UserError(done.stderr.strip().splitlines()[-1])
    gb_s, _, size, _, used, _, _, total = done.stdout.split()  # "G GB/s N bytes T threads sum S"
    if float(total) != int(size) // 4:  # every float is 1.0: the sum counts the elements read
        raise UserError(f"the bandwidth probe summed {total} of {int(size) // 4} elements; its build is broken")
    return {"gb_s": float(gb_s), "bytes": int(size), "threads": int(used)}
