"""Sample from a trained model, streaming tokens as they are chosen.

    python sample.py --ckpt out/
    python sample.py --ckpt out/ckpt.pt --start "ROMEO:" --num_samples 3 --max_new_tokens 200
    python sample.py --ckpt out/ --start_file prompt.txt --temperature 0   # greedy
    python sample.py --ckpt out/ --temperature 0.7 --top_k 0 --top_p 0.9  # nucleus sampling
    python sample.py --ckpt out-ternary/model.ternary.pt --engine c       # torch-free: run.c

The tokenizer travels inside the checkpoint, so no data directory or extra flag is needed.
"""

from tablefree.common import interrupt_quietly
interrupt_quietly(__name__, "sample.py")  # is one line, not a traceback

import argparse
import codecs
import math
import sys

import torch

from tablefree.checkpoint import build_model, find_checkpoint, load_checkpoint
from tablefree.common import (ArgumentParser, UserError, pick_device, pick_dtype, reader_may_leave,
                              require, require_utf8, user_errors)
from tablefree.tokenizer import bytes_of_token, load_encoding


def parse_args(argv=None):
    p = ArgumentParser(prog="sample.py", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--ckpt", default="out", help="a run directory or a checkpoint file")
    p.add_argument("--start", help="prompt text ('<|endoftext|>' begins a new document; default: "
                                   "a newline)")
    p.add_argument("--start_file", help="read the prompt from this UTF-8 file instead of --start")
    p.add_argument("--num_samples", type=int, default=2)
    p.add_argument("--max_new_tokens", type=int, default=300)
    p.add_argument("--temperature", type=float, default=0.8, help="0 is greedy")
    p.add_argument("--top_k", type=int, default=200,
                   help="sample from the k likeliest tokens; 0 for all")
    p.add_argument("--top_p", type=float, default=1.0,
                   help="sample from the smallest set of likeliest tokens holding this much "
                        "probability; 1 for all")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, mps")
    p.add_argument("--engine", choices=("torch", "c"), default="torch",
                   help="c: tablefree/run.c, the torch-free runtime, for a packed export "
                        "(model.ternary.pt)")
    p.add_argument("--kernels", action="store_true",
                   help="run a float model's Linears through tablefree/kernel.c's one-row CPU "
                        "kernels (faster decoding; a packed export always uses them)")
    p.add_argument("--no_cache", action="store_true",
                   help="recompute the whole context window every token (the slow reference path)")
    args = p.parse_args(argv)
    require(args.num_samples >= 1, "--num_samples", args.num_samples, "at least 1")
    require(1 <= args.max_new_tokens <= 1 << 24, "--max_new_tokens", args.max_new_tokens,
            "from 1 to 2^24 (16,777,216)")
    require(0 <= args.seed < 1 << 63, "--seed", args.seed, "a whole number from 0 to 2^63 - 1")
    require(math.isfinite(args.temperature) and args.temperature >= 0, "--temperature",
            args.temperature, "a finite number at least 0 (0 is greedy)")
    require(args.top_k >= 0, "--top_k", args.top_k, "at least 0 (0 keeps every token)")
    require(0 < args.top_p <= 1, "--top_p", args.top_p,
            "above 0 and at most 1 (1 keeps every token)")
    if args.start is not None and args.start_file:
        raise UserError("give the prompt as --start or as --start_file, not both")
    require_utf8(args.start or "", "--start")
    return args


def read_prompt(path):
    try:
        return open(path, encoding="utf-8").read()
    except OSError as e:
        raise UserError(f"cannot read --start_file {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise UserError(f"--start_file {path} is not UTF-8 text (near byte {e.start}); "
                        f"convert it first") from None


def torch_engine(args, ckpt):
    """next_tokens(ids, i): the ids the model (in torch) chooses after the prompt ids, sample i."""
    device = pick_device(args.device)
    if "ternary" in ckpt or args.kernels:  # a packed export, or C kernels: tablefree/packed.py
        from tablefree.packed import inference_model
        model = inference_model(ckpt, kernels=args.kernels)
    else:
        model = build_model(ckpt)
    model = model.to(device).eval()
    autocast = pick_dtype("auto", device)[2]
    generator = torch.Generator(device).manual_seed(args.seed)

    def next_tokens(ids, i):
        steps = model.generate(torch.tensor([ids], device=device), args.max_new_tokens,
                               args.temperature, args.top_k or None, use_cache=not args.no_cache,
                               generator=generator, top_p=args.top_p if args.top_p < 1 else None)
        with autocast:
            for token in steps:
                yield token.item()
    return next_tokens, []


def c_engine(args, ckpt, eot):
    """next_tokens(ids, i) from tablefree/run.c, the torch-free runtime, on a packed export (its
    seed: seed + i)."""
    if args.no_cache or args.device not in ("auto", "cpu"):
        raise UserError("--engine c runs on the CPU with its KV cache; drop --device and "
                        "--no_cache")
    from tablefree import runtime  # run.c's builder and the flat file it reads
    flat = runtime.flat_file(find_checkpoint(args.ckpt), ckpt)
    runtime.binary()  # built (or refused) before the first prompt is printed

    def next_tokens(ids, i):
        return runtime.generate(flat, ids, args.max_new_tokens, args.temperature, args.top_k,
                                args.top_p, args.seed + i, stop=eot, report=closing.append)
    closing = []  # run.c's line of speed and memory for each sample, printed after its text
    return next_tokens, closing


def sample(args, out=sys.stdout):
    """Print num_samples continuations of the prompt; return them as lists of token ids."""
    ckpt = load_checkpoint(args.ckpt, "cpu")
    enc = load_encoding(ckpt["tokenizer"])
    block_size = ckpt["model_config"]["block_size"]
    engine = c_engine(args, ckpt, enc.eot_token) if args.engine == "c" else torch_engine(args, ckpt)
    next_tokens, closing = engine
    ckpt_step = ckpt.get("iter_num")
    del ckpt
    prompt = (read_prompt(args.start_file) if args.start_file else
              "\n" if args.start is None else args.start)
    ids = enc.encode(prompt, allowed_special="all")
    if not ids:
        raise UserError("the prompt is empty; give --start TEXT, or --start '<|endoftext|>' "
                        "to begin a new document")
    if len(ids) > block_size:
        raise UserError(f"the prompt is {len(ids):,} tokens but the model sees at most "
                        f"block_size={block_size}; shorten it")
    print(f"{loaded(args, ckpt_step)}; {len(ids):,} prompt tokens", file=sys.stderr)
    samples, num_samples = [], args.num_samples
    if args.temperature == 0 and num_samples > 1:  # greedy: every sample would be the same
        print(f"temperature 0 is greedy, so the {num_samples} samples would be one text "
              f"{num_samples} times: printing it once", file=sys.stderr)
        num_samples = 1
    for i in range(num_samples):
        # a token may end mid-character: the decoder holds its bytes until the character is whole
        text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        out.write(prompt)
        new = []
        try:
            for token in next_tokens(ids, i):
                if token == enc.eot_token:
                    break
                new.append(token)
                out.write(text.decode(bytes_of_token(enc, token)))
                out.flush()
        except ValueError as e:  # non-finite logits: a damaged or diverged model
            raise UserError(f"{e}; sample from another checkpoint") from None
        out.write(text.decode(b"", final=True) + "\n---------------\n")
        out.flush()
        for line in closing[i:]:  # after the sample and its rule: never glued to its last line
            print(line, file=sys.stderr)
        samples.append(new)
    return samples


def loaded(args, step):
    """The line that says what is sampled: the file, its step and the engine."""
    at = f" (step {step:,})" if step is not None else ""
    engine = "run.c" if args.engine == "c" else "torch" + (", C kernels" if args.kernels else "")
    return f"sampling {find_checkpoint(args.ckpt)}{at} with {engine}"


def main(argv=None):
    with reader_may_leave(), user_errors("sample.py"):
        sample(parse_args(argv))


if __name__ == "__main__":
    main()
