"""tablefree/reference.c, the plain decoder to read beside run.c, as an oracle: built with cc and clang
(where installed) as its header says, on every input and head of the tests' models its greedy tokens
are the torch path's and run.c --exact's, and its logits within 1e-4 of their range of the torch path's
(but at one step at most, where an int8 rounding may fall the other way: within 1e-3).
Run: python -m pytest tests/test_reference.py"""

import shutil
import subprocess

import numpy as np
import pytest

from tablefree import runtime
from test_runtime import PROMPT, packed_model, reference

SOURCE = runtime.SOURCE.with_name("reference.c")
KINDS = ["binary", "affine", "learned", "learned+tied", "kronecker", "frozen+codes", "binary+bias"]
STEPS = 20


@pytest.fixture(scope="module", params=["cc", "clang"])
def decoder(request, tmp_path_factory):
    """The reference decoder built as its header says: <compiler> -O3 -o reference reference.c -lm."""
    if shutil.which(request.param) is None:
        pytest.skip(f"{request.param} is not installed (apt-get install clang)")
    program = tmp_path_factory.mktemp("reference") / "reference"
    done = subprocess.run([request.param, "-O3", "-o", str(program), str(SOURCE), "-lm"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return program


def decode(command, flat, tmp_path, *extra):
    done = subprocess.run([*map(str, command), str(flat), "--ids", ",".join(map(str, PROMPT)), "--max_new_tokens",
                           str(STEPS), "--temperature", "0", "--print_ids", "--logits", str(tmp_path / "logits"),
                           *extra], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return [int(t) for t in done.stdout.split()], np.fromfile(tmp_path / "logits", dtype=np.float32).reshape(-1, 300)


@pytest.mark.parametrize("kind", KINDS)
def test_the_reference_decodes_what_torch_and_run_c_decode(decoder, kind, tmp_path):
    contents = packed_model(kind)
    flat = tmp_path / "model.bin"
    runtime.write_flat(contents, flat)
    tokens, logits = reference(contents, STEPS)  # the torch path's
    ours, ours_logits = decode([decoder], flat, tmp_path)
    assert ours == tokens, kind
    assert decode([runtime.binary()], flat, tmp_path, "--exact")[0] == tokens, kind  # run.c's
    # within 1e-4 of their range but at most one step where an activation's int8 rounding falls the other
    # way (float sums in another order than torch's: kronecker's projection), as run.c's own test allows
    errors = np.sort(np.abs(ours_logits[:len(logits)] - logits).max(axis=1)) / (logits.max() - logits.min())
    assert errors[-2] <= 1e-4 and errors[-1] <= 1e-3, (kind, errors[-3:])


def test_bad_input_is_one_line(decoder, tmp_path):
    contents = packed_model("binary")
    flat = tmp_path / "model.bin"
    runtime.write_flat(contents, flat)
    data = bytearray(flat.read_bytes())
    data[-1] ^= 1
    (tmp_path / "damaged.bin").write_bytes(bytes(data))
    for args, said in (([tmp_path / "damaged.bin", "--ids", "1"], "checksum differs"),
                       ([flat, "--ids", "1,300"], "bad --ids"), ([flat, "--ids", "1", "--max_new_tokens", "0"], "out of range"),
                       ([flat, "--ids", "1", "--wat"], "unknown flag"), ([tmp_path / "none.bin"], "cannot open")):
        done = subprocess.run([str(decoder), *map(str, args)], capture_output=True, text=True)
        assert done.returncode == 1 and done.stderr.startswith("reference: error: ") and said in done.stderr
        assert done.stderr.count("\n") == 1 and done.stdout == ""
