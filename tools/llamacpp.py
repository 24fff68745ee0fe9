"""llama.cpp from Python (the llama-cpp-python package): our GGUF files read back, loaded, decoded.

    llm = load_llama("out/model.q8_0.gguf", threads=2, logits_all=True)
    greedy(llm, prompt_ids, 32)                       # the ids llama.cpp chooses, as GPT.generate would

No torch here: a process that runs llama.cpp holds llama.cpp alone, so the memory the benchmark
measures for it (decode_probe) is llama.cpp's, not ours.
"""

import json
import time
import zlib
from pathlib import Path

import numpy as np

from tablefree.common import UserError


def gguf_package(need):
    """The gguf package (llama.cpp's reader and writer), or the one-line error saying what `need`s it."""
    try:
        import gguf
    except ImportError:
        raise UserError(f"{need} needs the gguf package: pip install -r requirements-extras.txt") from None
    return gguf


def read_gguf(path):
    """{key: value} of a GGUF file this project wrote; a one-line error for anything else."""
    gguf, path = gguf_package("reading a GGUF file"), Path(path)
    if not path.is_file():
        raise UserError(f"no GGUF file at {path}; write one: python -m tools.export --ckpt <run> --format gguf")
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise UserError(f"{path} is not a GGUF file (it does not begin with 'GGUF'); give a .gguf that "
                            f"python -m tools.export --format gguf wrote")
    try:
        reader = gguf.GGUFReader(path)  # parses every field and tensor: a file cut short fails here
        fields = {name: field.contents() for name, field in reader.fields.items() if not name.startswith("tokenizer.")}
    except (ValueError, IndexError, OSError) as e:
        raise UserError(f"{path} is a corrupt or truncated GGUF file ({type(e).__name__}); export it again") from None
    if "tablefree.input" not in fields:
        raise UserError(f"{path} was not written by tools.export --format gguf (it has no tablefree.input); run it "
                        f"with llama.cpp itself")
    saved = fields.get("tablefree.tensors_crc32")  # None: a file written before 2026-12-04
    if saved is not None and gguf_crc32((t.name, t.data) for t in reader.tensors) != saved:
        raise UserError(f"{path} is damaged: its tensors are not the ones it was written with (crc32 differs); "
                        f"export it again")
    saved = fields.get(METADATA_CRC)  # None: a file written before 2026-12-05
    if saved is not None and metadata_crc32(reader) != saved:
        raise UserError(f"{path} is damaged: its metadata (the model's settings, its tokenizer) is not what it was "
                        f"written with (crc32 differs); export it again")
    return fields


def gguf_crc32(named_arrays):
    """crc32 of a GGUF file's tensors, each its name and its bytes as stored, in file order: written
    into the file's metadata (tablefree.tensors_crc32) and checked by read_gguf,
    so a flipped byte in a tensor is an error, not a model that runs with other weights."""
    crc = 0
    for name, data in named_arrays:
        crc = zlib.crc32(name.encode(), crc)
        crc = zlib.crc32(np.ascontiguousarray(data).view(np.uint8), crc)
    return crc


METADATA_CRC = "tablefree.metadata_crc32"


def metadata_crc32(reader):
    """crc32 of a GGUF file's metadata as stored: every field's key, type and value bytes in file order,
    the header's counts included, all but this field's own value."""
    crc = 0
    for name, field in reader.fields.items():
        for part in field.parts[:-1] if name == METADATA_CRC else field.parts:
            crc = zlib.crc32(np.ascontiguousarray(part).view(np.uint8), crc)
    return crc


QUIET = []  # the log callback that drops llama.cpp's notes: kept alive here, llama.cpp holds a pointer to it


def load_llama(path, threads, logits_all=False, seed=0):
    """llama.cpp's model and context for one of our GGUF files (checked first by read_gguf)."""
    fields = read_gguf(path)
    try:
        import llama_cpp
    except ImportError:
        raise UserError("running a GGUF file needs llama-cpp-python: pip install -r requirements-extras.txt "
                        "(it builds llama.cpp: about 3 minutes on 2 cores)") from None
    if not QUIET:  # llama.cpp's notes (e.g. that n_ctx was rounded up) stay off stderr
        QUIET.append(llama_cpp.llama_log_callback(lambda level, text, user_data: None))
        llama_cpp.llama_log_set(QUIET[0], None)
    try:
        return llama_cpp.Llama(model_path=str(path), n_ctx=fields["gptneox.context_length"], n_threads=threads,
                               n_threads_batch=threads, logits_all=logits_all, seed=seed, verbose=False)
    except ValueError as e:  # llama.cpp refused the file: it says why on stderr, the binding only that it failed
        raise UserError(f"llama.cpp could not load {path} ({e}); export it again") from None


def block_size(llm):
    """The context the loaded model was trained for (its gptneox.context_length: our block_size), which
    llm.n_ctx() exceeds where llama.cpp rounded its own context up."""
    import llama_cpp  # load_llama has imported it
    return llama_cpp.llama_model_n_ctx_train(llm.model)


def greedy(llm, prompt, max_new_tokens):
    """Extend prompt (ids) greedily in llama.cpp, one token at a time with its KV cache: the new ids.
    (llm needs logits_all: the argmax is taken here, as GPT.generate takes it.)"""
    llm.reset()
    llm.eval(prompt)
    new = [int(np.argmax(llm.scores[llm.n_tokens - 1]))]
    while len(new) < max_new_tokens:
        llm.eval(new[-1:])
        new.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
    return new


def decode_probe(path, new_tokens, threads):
    """What the benchmark runs in a fresh process: load a GGUF file, decode new_tokens greedily at
    batch 1 from a fixed 16-token prompt (the median of 3 timings, after a warm-up), and print
    JSON: tokens/s, resident memory now and at peak (from /proc, as bench_train.memory_status)."""
    llm = load_llama(path, threads)
    prompt = np.random.default_rng(0).integers(0, llm.n_vocab(), 16).tolist()

    def seconds(n):
        started = time.perf_counter()
        for count, _ in enumerate(llm.generate(prompt, top_k=1, temp=0.0, repeat_penalty=1.0), start=1):
            if count == n:
                break
        return time.perf_counter() - started

    seconds(8)
    timing = sorted(seconds(new_tokens) for _ in range(3))[1]
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    print(json.dumps({"tok_s": new_tokens / timing, "rss": int(status["VmRSS"].split()[0]) * 1024,
                      "peak_rss": int(status["VmHWM"].split()[0]) * 1024}))
