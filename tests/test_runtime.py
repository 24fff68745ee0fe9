"""The torch-free runtime (tablefree/run.c) against the torch packed path. Run: python -m pytest tests/test_runtime.py"""

import struct
import subprocess
from dataclasses import asdict

import numpy as np
import pytest
import torch

import sample
import train
from conftest import TINY
from model import GPT, GPTConfig
from tablefree import runtime
from tablefree.common import UserError
from tablefree.configurator import resolve
from tablefree.packed import inference_model, packed_ternary
from tools import export

VOCAB = [bytes([97 + i % 26]) * (1 + i // 26) for i in range(300)]
KINDS = ["binary", "affine", "learned", "learned+tied", "kronecker", "frozen", "frozen+codes", "binary+bias"]
PROMPT = [5, 17, 99, 3, 250]


def packed_model(kind, block_size=48):
    """A packed export's contents for a ternary model of this kind, random weights well away from init."""
    name, _, variant = kind.partition("+")
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=300, n_layer=2, n_head=2, n_embd=64, block_size=block_size, input=name, body="ternary",
                       head="codes" if variant == "codes" else "untied", tie_weights=variant == "tied",
                       bias=variant == "bias", code_dim=48, codes_from="random" if name == "frozen" else "",
                       lift="interleave" if name == "affine" else "tile", code_values="pm1" if name == "binary" else "01")
    model = GPT(config, vocab=VOCAB, source=torch.randn(300, 80) if name == "frozen" else None)
    for p in model.parameters():
        p.data += 0.05 * torch.randn_like(p)
    return packed_ternary(model.eval(), {"model_config": asdict(config), "tokenizer": {"info": {}, "ranks": ""}})


def reference(contents, steps, prompt=PROMPT):
    """(the torch packed path's greedy tokens, its logits before each of them (steps, V))."""
    model = inference_model(contents).eval()
    tokens = torch.cat(list(model.generate(torch.tensor([prompt]), steps, temperature=0)), dim=1)[0].tolist()
    cache, logits = model.new_cache(), []
    with torch.no_grad():
        for ids in [prompt, *([t] for t in tokens[:-1])]:
            if cache[0].pos + len(ids) > model.config.block_size:
                break  # past the first window: compared by the tokens alone
            logits.append(model(torch.tensor([ids]), cache=cache)[0][0, -1])
    return tokens, torch.stack(logits).numpy()


def run(flat, *args, build=None, threads=None):
    """run.c (this CPU's build, or build) as a process; threads: its OMP_NUM_THREADS, in an environment of
    that alone (and PATH)."""
    env = {"OMP_NUM_THREADS": str(threads), "PATH": "/usr/bin:/bin"} if threads else None
    return subprocess.run([str(build or runtime.binary()), str(flat), *args], capture_output=True, text=True, env=env)


def both_builds(monkeypatch):
    """[this CPU's build of run.c, the AVX2-only one]: where the CPU has AVX-512, the two take other paths."""
    native = runtime.binary()
    with monkeypatch.context() as patch:
        patch.setattr(runtime.torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
        return [native, runtime.binary()]


@pytest.mark.parametrize("kind", KINDS)
def test_logits_and_greedy_tokens_equal_the_torch_packed_path(kind, tmp_path):
    """The same greedy tokens; with --exact the logits within 1e-4 of their range at every step but at most
    one, where an activation's int8 rounding may fall the other way (seen before run.c's GELU took torch's
    vectorized erf: learned+tied's 8th step, 4.6e-4, in every build); at the defaults within 1e-3."""
    contents = packed_model(kind)
    flat = tmp_path / "model.bin"
    runtime.write_flat(contents, flat)
    tokens, logits = reference(contents, 60)  # 5 + 60 tokens cross the 48-token window: a restart
    for flags, bound in (["--exact"], 1e-4), ([], 1e-3):  # the exact mode, then the defaults (int16 code head tables)
        done = run(flat, "--ids", ",".join(map(str, PROMPT)), "--max_new_tokens", "60", "--temperature", "0",
                   "--print_ids", "--logits", str(tmp_path / "logits"), *flags)
        assert done.returncode == 0, done.stderr
        assert [int(t) for t in done.stdout.split()] == tokens
        ours = np.fromfile(tmp_path / "logits", dtype=np.float32).reshape(60, 300)[:len(logits)]
        errors = np.sort(np.abs(ours - logits).max(axis=1)) / (logits.max() - logits.min())
        assert errors[-2] <= bound and errors[-1] <= 1e-3, (flags, errors[-3:])


@pytest.mark.slow  # 8 kinds, 40 steps, 2 caches: 35 s; CI checks both caches' tokens in every build (test_portable)
@pytest.mark.parametrize("cache, name", [("f16", "float16"), ("i8", "int8")])
def test_a_float16_or_int8_cache_keeps_the_greedy_tokens_and_the_logits_near(cache, name, tmp_path):
    """--kv_cache f16 rounds each key and value once to float16, --kv_cache i8 each head's key and value
    to int8 with a scale of its own: the logits stay within 1% of their range of the torch path's
    (float32 throughout; measured, float16: 0.01% to 0.69%, int8: 0.015% to 0.88%, the learned kinds the
    largest), the greedy tokens the same for every kind here."""
    for kind in KINDS:
        contents = packed_model(kind)
        runtime.write_flat(contents, tmp_path / "model.bin")
        tokens, logits = reference(contents, 40)
        done = run(tmp_path / "model.bin", "--ids", ",".join(map(str, PROMPT)), "--max_new_tokens", "40", "--temperature",
                   "0", "--print_ids", "--kv_cache", cache, "--logits", str(tmp_path / "logits"))
        assert done.returncode == 0 and f"KV cache {name}" in done.stderr, done.stderr
        assert [int(t) for t in done.stdout.split()] == tokens, kind
        ours = np.fromfile(tmp_path / "logits", dtype=np.float32).reshape(40, 300)[:len(logits)]
        assert np.abs(ours - logits).max() <= 1e-2 * (logits.max() - logits.min()), kind


def test_int16_head_tables_keep_the_greedy_tokens_and_give_every_build_the_same_logits(tmp_path, monkeypatch):
    """--head_tables i16 rounds the code head's tables to int16, scaled so that no token's sum can pass
    32,767: the logits stay within 1e-3 of their range of the torch path's (measured: 2.4e-4 here), the
    greedy tokens the same, and since int16 adds are exact the AVX-512 build (its one-permute path) and
    the AVX2 build (plain C) give the same bytes. A float head has no tables: one line refuses it."""
    contents = packed_model("frozen+codes")
    runtime.write_flat(contents, tmp_path / "model.bin")
    tokens, logits = reference(contents, 40)
    outputs = []
    for n, build in enumerate(both_builds(monkeypatch)):
        done = run(tmp_path / "model.bin", "--ids", ",".join(map(str, PROMPT)), "--max_new_tokens", "40", "--temperature",
                   "0", "--print_ids", "--head_tables", "i16", "--logits", str(tmp_path / f"logits{n}"), build=build)
        assert done.returncode == 0 and "code head tables int16" in done.stderr, done.stderr
        assert [int(t) for t in done.stdout.split()] == tokens
        outputs.append((tmp_path / f"logits{n}").read_bytes())
    assert outputs[0] == outputs[1]
    ours = np.frombuffer(outputs[0], dtype=np.float32).reshape(40, 300)[:len(logits)]
    error = np.abs(ours - logits).max() / (logits.max() - logits.min())
    assert 0 < error <= 1e-3, error
    runtime.write_flat(packed_model("binary"), tmp_path / "float.bin")
    done = run(tmp_path / "float.bin", "--ids", "1", "--head_tables", "i16")
    assert done.returncode == 1 and done.stderr == ("run: error: --head_tables i16 is for a code head; this model's "
                                                    "head is a float matrix\n")


def logits_bytes(flat, tmp_path, prompt, steps, *flags, build=None):
    """(the greedy tokens, the logits file's bytes) of run.c on flat."""
    done = run(flat, "--ids", ",".join(map(str, prompt)), "--max_new_tokens", str(steps), "--temperature", "0",
               "--print_ids", "--logits", str(tmp_path / "logits"), *flags, build=build)
    assert done.returncode == 0, done.stderr
    return done.stdout.split(), (tmp_path / "logits").read_bytes()


def test_the_default_cache_of_integer_sums_gives_the_float32_caches_bits(tmp_path, monkeypatch):
    """The default KV cache keeps each key and value as the qkv product's int16 sums and remakes the float32
    numbers from them as the product made them (x scale, + bias, a key then rotated): every kind, a prompt
    past the window (a restart), and a 150-token prompt in runs (whose keys and values are remade once a
    layer), in this CPU's build and the AVX2 one, give the logits bytes of --kv_cache f32."""
    builds = both_builds(monkeypatch)
    for kind in KINDS:
        runtime.write_flat(packed_model(kind), tmp_path / "model.bin")
        assert "KV cache int16 sums" in run(tmp_path / "model.bin", "--ids", "1", "--max_new_tokens", "1").stderr
        for build in builds:
            ours = logits_bytes(tmp_path / "model.bin", tmp_path, PROMPT, 60, "--head_tables", "f32", build=build)
            assert ours == logits_bytes(tmp_path / "model.bin", tmp_path, PROMPT, 60, "--exact", build=build), kind
    runtime.write_flat(packed_model("binary+bias", block_size=192), tmp_path / "long.bin")
    prompt = [(7 * i) % 300 for i in range(150)]
    for build in builds:
        assert (logits_bytes(tmp_path / "long.bin", tmp_path, prompt, 12, "--kv_cache", "sums", build=build)
                == logits_bytes(tmp_path / "long.bin", tmp_path, prompt, 12, "--kv_cache", "f32", build=build))


def test_sums_past_int16_are_halved_until_they_fit(tmp_path):
    """A head whose qkv sums pass 32,767 (every weight +1 and every input near the largest: about 380 x 115)
    is kept halved, its scale doubled: the logits move (the bytes differ from the float32 cache's) but stay
    within 1e-4 of their range, the greedy tokens the same; a cache that let them wrap would be far off."""
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=300, n_layer=1, n_head=2, n_embd=384, block_size=48, input="binary", body="ternary",
                       bias=True, code_values="pm1")
    model = GPT(config, vocab=VOCAB)
    with torch.no_grad():
        model.h[0].ln_1.weight.fill_(0.1), model.h[0].ln_1.bias.fill_(3.0)  # every input of qkv near 3
        model.h[0].attn.c_attn.weight.fill_(1.0)
    runtime.write_flat(packed_ternary(model.eval(), {"model_config": asdict(config), "tokenizer": {"info": {}, "ranks": ""}}),
                       tmp_path / "model.bin")
    tokens, ours = logits_bytes(tmp_path / "model.bin", tmp_path, PROMPT, 20, "--kv_cache", "sums")
    float_tokens, theirs = logits_bytes(tmp_path / "model.bin", tmp_path, PROMPT, 20, "--kv_cache", "f32")
    ours, theirs = np.frombuffer(ours, dtype=np.float32), np.frombuffer(theirs, dtype=np.float32)
    assert tokens == float_tokens and not np.array_equal(ours, theirs)
    assert np.abs(ours - theirs).max() <= 1e-4 * (theirs.max() - theirs.min())


def test_long_prompts_in_runs_and_any_thread_count_give_the_same_logits(tmp_path, monkeypatch):
    """A 150-token prompt goes through each layer in runs of up to 64 positions (on two or more threads a
    64-position and a 16-position probe first, each through every layer), each run's Linears as one
    matrix product: its logits are the torch path's (which takes the prompt whole); and 1, 2 or 3
    threads give the same bytes (each sum is made by one thread in one order, whatever the count), as
    does the build without AVX-512 where this CPU has it (its code head adds in the same order, and its
    prompt's attention takes four rows of a head at a time where AVX-512's takes eight: the same sums)."""
    contents, prompt = packed_model("frozen+codes", block_size=192), [(7 * i) % 300 for i in range(150)]
    runtime.write_flat(contents, tmp_path / "model.bin")
    tokens, logits = reference(contents, 12, prompt)
    builds = both_builds(monkeypatch)
    outputs = []
    for threads, build in ((1, builds[0]), (2, builds[0]), (3, builds[0]), (2, builds[1])):
        done = run(tmp_path / "model.bin", "--ids", ",".join(map(str, prompt)), "--max_new_tokens", "12", "--temperature",
                   "0", "--print_ids", "--exact", "--logits", str(tmp_path / f"logits{threads}"), build=build,
                   threads=threads)
        assert done.returncode == 0 and [int(t) for t in done.stdout.split()] == tokens, done.stderr
        outputs.append((tmp_path / f"logits{threads}").read_bytes())
    assert outputs[0] == outputs[1] == outputs[2] == outputs[3]
    ours, scale = np.frombuffer(outputs[0], dtype=np.float32).reshape(12, 300), logits.max() - logits.min()
    assert np.abs(ours[0] - logits[0]).max() <= 1e-4 * scale  # the prompt's: 2e-5 of the range
    # later steps: two at 3e-4 and 6e-4, where an activation's int8 rounding falls the other way at this long
    # context (the runtime that fed a prompt one position at a time gave the same errors at the same steps)
    assert np.abs(ours - logits).max() <= 1e-3 * scale


def test_sampling_follows_its_settings(tmp_path):
    flat = tmp_path / "model.bin"
    runtime.write_flat(packed_model("binary"), flat)
    draws = [list(runtime.generate(flat, PROMPT, 20, temperature=1.0, top_k=1, seed=s)) for s in (1, 2)]
    greedy = list(runtime.generate(flat, PROMPT, 20))
    assert draws[0] == draws[1] == greedy  # top-k 1 is greedy whatever the seed
    hot = [list(runtime.generate(flat, PROMPT, 20, temperature=5.0, seed=s)) for s in (1, 1, 2)]
    assert hot[0] == hot[1] != hot[2]  # a seed repeats its draws; another seed draws others
    assert list(runtime.generate(flat, PROMPT, 20, stop=greedy[3])) == greedy[:3]  # stops before the stop id


def test_top_k_and_top_p_draw_only_from_their_tokens(tmp_path):
    """run.c keeps top-k's tokens by a heap and takes the nucleus off a heap (no sort of all V): every draw,
    at a high temperature where the tail is heavy, is among the step's k likeliest (by the logits it
    wrote), or inside its nucleus as numpy computes it (float64: its edge one token wider)."""
    flat = tmp_path / "model.bin"
    runtime.write_flat(packed_model("binary"), flat)
    for flags, seed in (["--top_k", "7"], 3), (["--top_p", "0.5"], 4), (["--top_k", "40", "--top_p", "0.3"], 5):
        done = run(flat, "--ids", ",".join(map(str, PROMPT)), "--max_new_tokens", "30", "--temperature", "3",
                   "--seed", str(seed), "--print_ids", "--logits", str(tmp_path / "logits"), *flags)
        assert done.returncode == 0, done.stderr
        drawn, logits = [int(t) for t in done.stdout.split()], np.fromfile(tmp_path / "logits", dtype=np.float32)
        logits = logits.reshape(-1, 300).astype(np.float64)
        for token, row in zip(drawn, logits):
            order = np.lexsort((np.arange(300), -row))  # likeliest first, the lower id of equals
            k = int(flags[flags.index("--top_k") + 1]) if "--top_k" in flags else 300
            p = np.exp((row[order[:k]] - row.max()) / 3)
            keep = k
            if "--top_p" in flags:
                share = float(flags[flags.index("--top_p") + 1])
                keep = int(np.searchsorted(np.cumsum(p) / p.sum(), share, side="left")) + 2  # the edge token, and one
            assert token in order[:keep], (flags, token)
        assert len(set(drawn)) > 3, flags  # it samples: not one token over and over


def test_bad_files_and_settings_are_one_line_errors(tmp_path):
    flat = tmp_path / "model.bin"
    runtime.write_flat(packed_model("frozen+codes"), flat)
    data = flat.read_bytes()
    cases = {"truncated": data[:-64], "flipped": data[:-100] + bytes([data[-100] ^ 4]) + data[-99:],
             "foreign": b"PK\x03\x04" + data[4:], "empty": b""}
    again = r".*; delete it, and sample.py --engine c writes it again from its .ternary.pt: "  # the fix (flat_file)
    expected = {"truncated": "truncated or damaged" + again, "flipped": "checksum differs" + again,
                "foreign": "not a tablefree runtime", "empty": "not a tablefree runtime"}
    for case, content in cases.items():
        (tmp_path / case).write_bytes(content)
        with pytest.raises(UserError, match=expected[case]) as e:
            list(runtime.generate(tmp_path / case, PROMPT, 4))
        assert "\n" not in str(e.value)
    with pytest.raises(UserError, match="below the vocabulary size"):
        list(runtime.generate(flat, [300], 4))
    stray = subprocess.run([str(runtime.binary()), str(flat), "extra", "--ids", "1"], capture_output=True, text=True)
    assert (stray.returncode, stray.stderr) == (1, "run: error: unexpected argument (the options begin with --): extra\n")


def test_sample_with_the_c_engine_end_to_end(data_dir, tmp_path, capsys):
    run_dir = tmp_path / "run"
    train.train(resolve(train.DEFAULTS, ["--data_dir", str(data_dir), "--dataset=tiny", f"--out_dir={run_dir}", *TINY,
                                         "--body=ternary", "--max_iters=30", "--eval_interval=30", "--lr_decay_iters=30"]))
    export.main(["--ckpt", str(run_dir)])
    common = ["--ckpt", str(run_dir / "model.ternary.pt"), "--temperature", "0", "--max_new_tokens", "20",
              "--num_samples", "1", "--start", "The king"]
    ours = sample.sample(sample.parse_args([*common, "--engine", "c"]))
    assert ours == sample.sample(sample.parse_args(common)) and len(ours[0]) > 0
    assert (run_dir / "model.ternary.bin").exists() and "tokens/s; peak RSS" in capsys.readouterr().err
    flat = run_dir / "model.ternary.bin"  # made older: a file of the last layout, left beside the export
    older = bytearray(flat.read_bytes())
    struct.pack_into("<i", older, 8, runtime.VERSION - 1)
    flat.write_bytes(forged(older))
    assert run_raw(flat, "--ids", "1")[1] == [f"run: error: a runtime file of another version; write it again from "
                                              f"its .ternary.pt: {flat}"]
    assert sample.sample(sample.parse_args([*common, "--engine", "c"])) == ours  # written again first
    assert struct.unpack_from("<i", flat.read_bytes(), 8)[0] == runtime.VERSION
    with pytest.raises(UserError, match="not a packed ternary export"):
        sample.sample(sample.parse_args(["--ckpt", str(run_dir), "--engine", "c"]))


def forged(data):
    """data with its checksum made right again: what a hostile file looks like to run.c."""
    data = bytearray(data)
    struct.pack_into("<Q", data, runtime.SUM_OFFSET, 0)
    struct.pack_into("<Q", data, runtime.SUM_OFFSET, runtime.checksum(bytes(data)) if len(data) % 8 == 0 else 0)
    return bytes(data)


def run_raw(flat, *args):
    """run.c as a process: (exit status, stderr lines)."""
    done = subprocess.run([str(runtime.binary()), str(flat), *args], capture_output=True, timeout=60)
    return done.returncode, done.stderr.decode(errors="replace").splitlines()


def test_a_logit_that_is_not_finite_anywhere_is_an_error_and_ties_go_to_the_lowest_id(tmp_path):
    """argmax checks every logit, 64 at a time in vectors and the rest one by one, across the threads: a
    NaN or an infinity in the code head's bias, inside a chunk or in a thread's tail, ends the run with
    one line. A bias that makes two tokens' logits equal and largest gives the lower id."""
    runtime.write_flat(packed_model("frozen+codes"), tmp_path / "model.bin")
    data = (tmp_path / "model.bin").read_bytes()
    count = struct.unpack_from("<i", data, 88)[0]
    offset = next(o for name, o, _ in struct.iter_unpack("<48sQQ", data[120:120 + 64 * count])
                  if name.rstrip(b"\0") == b"head.bias")
    for where, value in ((70, "nan"), (290, "inf"), (5, "-inf"), (140, "inf")):
        bad = bytearray(data)
        struct.pack_into("<f", bad, offset + 4 * where, float(value))
        (tmp_path / "bad.bin").write_bytes(forged(bad))
        for threads in ("1", "2"):
            done = run(tmp_path / "bad.bin", "--ids", "1,2", "--print_ids", threads=threads)
            assert (done.returncode, done.stderr) == (1, "run: error: the model's logits are not finite; the weights "
                                                         "are damaged\n"), (where, value, threads)
    for first, second in ((77, 201), (3, 160), (130, 149)):  # in a chunk, in a tail; one thread's or both's
        tied = bytearray(data)
        for where in (first, second):
            struct.pack_into("<f", tied, offset + 4 * where, 1e30)  # the code sums vanish beside it
        (tmp_path / "tied.bin").write_bytes(forged(tied))
        for threads in ("1", "2", "3"):
            done = run(tmp_path / "tied.bin", "--ids", "1,2", "--print_ids", "--max_new_tokens", "1", "--temperature", "0",
                       threads=threads)
            assert done.returncode == 0 and done.stdout.split() == [str(first)], (first, second, threads, done.stderr)


def test_a_forged_header_whose_fields_disagree_is_refused(tmp_path):
    """Every field the model's shape implies is checked against the others: binary's K below ceil(log2 V) =
    9 for V = 300 (the checksum made again, as a forger would) would give two ids one code."""
    flat = tmp_path / "model.bin"
    runtime.write_flat(packed_model("binary"), flat)
    data = flat.read_bytes()
    (tmp_path / "bad.bin").write_bytes(forged(data[:16 + 8 * 4] + struct.pack("<i", 8) + data[16 + 9 * 4:]))
    status, err = run_raw(tmp_path / "bad.bin", "--ids", "1,2")
    assert status == 1 and err == ["run: error: the runtime file's config gives a code whose bits do not fit its "
                                   "vocabulary and width"], err


def test_the_checksum_covers_the_header_and_a_hostile_header_is_refused(tmp_path):
    flat = tmp_path / "model.bin"
    runtime.write_flat(packed_model("frozen+codes"), flat)
    data = flat.read_bytes()
    rope = 16 + 13 * 4  # the config's rope_base: a flipped bit once ran with logits off by 3
    for offset in (16, rope, 90, 130):  # n_layer, rope_base, the tensor count, a directory name
        (tmp_path / "bad.bin").write_bytes(data[:offset] + bytes([data[offset] ^ 1]) + data[offset + 1:])
        status, err = run_raw(tmp_path / "bad.bin", "--ids", "1,2")
        assert status == 1 and len(err) == 1 and ("checksum differs" in err[0] or "damaged" in err[0]), err
    hostile = {"n_layer 2^30": (16, struct.pack("<i", 1 << 30)), "rope_base nan": (rope, struct.pack("<f", float("nan"))),
               "a wrapped offset": (120 + 48, struct.pack("<Q", 2 ** 64 - 8)), "huge bytes": (120 + 56, struct.pack("<Q", 2 ** 63)),
               "an unterminated name": (120, b"x" * 48), "id bits 63": (16 + 8 * 4, struct.pack("<i", 4096 + 1)),
               "D past the width": (16 + 8 * 4, struct.pack("<i", 65))}  # frozen: D = 48 at n_embd 64
    for case, (offset, patch) in hostile.items():
        (tmp_path / "bad.bin").write_bytes(forged(data[:offset] + patch + data[offset + len(patch):]))
        status, err = run_raw(tmp_path / "bad.bin", "--ids", "1,2")
        assert status == 1 and len(err) == 1 and err[0].startswith("run: error: the runtime file"), (case, err)


BOUNDS = {"--max_new_tokens": (int, 0, 2 ** 24), "--top_k": (int, 0, 2 ** 30), "--stop": (int, -1, 2 ** 30),
          "--seed": (int, 0, 2 ** 64 - 1), "--temperature": (float, 0, 1e30), "--top_p": (float, 0, 1)}


def accepted(flag, value):
    """Whether run.c must take value for flag: the whole text a number of the flag's kind, in range."""
    kind, low, high = BOUNDS[flag]
    try:
        number = kind(value)
    except ValueError:
        return False
    return low <= number <= high and not (flag == "--seed" and "-" in value)


@pytest.mark.parametrize("kind", ["binary", "kronecker", "frozen+codes"])
def test_random_and_mutated_files_and_arguments_never_crash_it(kind, tmp_path):
    """Seeded fuzzing, a few hundred runs: bytes flipped anywhere (the checksum then forged, as a
    hostile file would), cut short or grown, and hostile values of every flag. Every run ends with
    status 0, or 1 and one 'run: error:' line: never a signal, a hang or a second line."""
    flat = tmp_path / "model.bin"
    runtime.write_flat(packed_model(kind), flat)
    data, rng = flat.read_bytes(), np.random.default_rng(54)
    head = 120 + 64 * 40  # the header and the directory: where a flip matters most
    for trial in range(60):
        mutated = bytearray(data)
        for _ in range(rng.integers(1, 4)):
            where = int(rng.integers(0, head if trial % 2 else len(data)))
            mutated[where] = int(rng.integers(0, 256))
        if trial % 10 == 9:
            mutated = mutated[:int(rng.integers(0, len(mutated)))]
        (tmp_path / "fuzz.bin").write_bytes(forged(mutated) if trial % 3 else bytes(mutated))
        status, err = run_raw(tmp_path / "fuzz.bin", "--ids", "1,2,3", "--max_new_tokens", "3", "--print_ids")
        assert status in (0, 1) and len(err) == 1 and (status == 0) != err[0].startswith("run: error:"), (trial, status, err)
    values = ["abc", "", "-5", "1e9", "2147483648", "99999999999999999999", "nan", "inf", "-inf", "1e-40", "0x10",
              "3.5", " 7", "-0", "1e400", "18446744073709551616"]
    for trial in range(120):
        flag, value = list(BOUNDS)[trial % len(BOUNDS)], values[int(rng.integers(0, len(values)))]
        status, err = run_raw(flat, "--ids", "1,2", "--max_new_tokens", "2", flag, value, "--print_ids")
        assert len(err) == 1 and status == (0 if accepted(flag, value) else 1), (flag, value, status, err)
        if status:
            assert err[0].startswith(f"run: error: {flag} must be"), (flag, value, err)
    for value in ("f32", "f16", "i8", "F16", "f8", "i16", "", "f16 "):
        status, err = run_raw(flat, "--ids", "1,2", "--max_new_tokens", "2", "--kv_cache", value, "--print_ids")
        assert len(err) == 1 and status == (0 if value in ("f32", "f16", "i8") else 1), (value, status, err)
        status, err = run_raw(flat, "--ids", "1,2", "--max_new_tokens", "2", "--kv_cache", value, "--exact", "--print_ids")
        if value in ("f16", "i8"):  # --exact's cache is float32
            assert status == 1 and err == ["run: error: --exact keeps float32 everywhere; drop --kv_cache and --head_tables"]
    for value in ("f32", "i16", "I16", "i8", ""):  # i16: only a code head has tables
        status, err = run_raw(flat, "--ids", "1,2", "--max_new_tokens", "2", "--head_tables", value, "--print_ids")
        good = value == "f32" or (value == "i16" and kind == "frozen+codes")
        assert len(err) == 1 and status == (0 if good else 1), (value, status, err)
    for ids in ("", ",", "1,,2", "-1", "300", "99999999999999999999", "1;2", "1,2,"):
        status, err = run_raw(flat, "--ids", ids, "--max_new_tokens", "1")
        assert status in (0, 1) and len(err) == 1, (ids, status, err)
