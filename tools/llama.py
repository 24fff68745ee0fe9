"""Run a GGUF file of ours in llama.cpp (through the llama-cpp-python package), or check it against ours.

    python -m tools.export --ckpt out/ --format gguf --gguf_type Q8_0     # -> out/model.q8_0.gguf
    python -m tools.llama --gguf out/model.q8_0.gguf --start "ROMEO:" --max_new_tokens 64
    python -m tools.llama --gguf out/model.q8_0.gguf --check out/         # greedy tokens: llama.cpp's vs ours
    llama-cli -m out/model.q8_0.gguf -p "ROMEO:" -n 64                    # the same file in llama.cpp's own CLI

Sampling is llama.cpp's own: temperature and top-k as sample.py has them (top-p, min-p and the
repetition penalty off), greedy at --temperature 0. The text goes to stdout, the speed to stderr.

--check CKPT: from --prompts prompts of 16 tokens spread over the validation split of the
checkpoint's dataset, 32 greedy tokens each, llama.cpp's (argmax of its logits) and ours
(GPT.generate; a packed .ternary.pt decodes with integer matmuls), and how many agree.
"""

from tablefree.common import interrupt_quietly
interrupt_quietly(__name__, "llama.py")  # is one line, not a traceback

import ast
import codecs
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from tablefree.checkpoint import load_checkpoint
from tablefree.checksum import weights_id
from tablefree.common import ArgumentParser, UserError, reader_may_leave, require, require_utf8, user_errors
from tablefree.data import read_meta, split_ids
from tablefree.packed import inference_model
from tools.llamacpp import block_size, greedy, load_llama, read_gguf

PROMPT_TOKENS, NEW_TOKENS = 16, 32  # --check's prompts and continuations
MAX_PROMPTS = 256  # --check's: a few seconds each on a CPU


def parse_args(argv=None):
    p = ArgumentParser(prog="python -m tools.llama", description=__doc__.split("\n\n")[0])
    p.add_argument("--gguf", required=True, help="a .gguf file that python -m tools.export --format gguf wrote")
    p.add_argument("--start", default="\n", help="prompt text ('<|endoftext|>' begins a new document)")
    p.add_argument("--max_new_tokens", type=int, default=200)
    p.add_argument("--temperature", type=float, default=0.8, help="0 is greedy")
    p.add_argument("--top_k", type=int, default=200)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--check", help="a run directory or checkpoint to compare greedy tokens with, instead of generating")
    p.add_argument("--prompts", type=int, default=8, help="--check: how many held-out prompts")
    p.add_argument("--data_dir", default="data", help="--check: where the checkpoint's dataset is")
    args = p.parse_args(argv)
    require(args.max_new_tokens >= 1, "--max_new_tokens", args.max_new_tokens, "at least 1")
    require(math.isfinite(args.temperature) and args.temperature >= 0, "--temperature", args.temperature,
            "a finite number, at least 0 (0 is greedy)")
    require_utf8(args.start, "--start")
    require(min(args.top_k, args.threads, args.prompts) >= 1, "--top_k, --threads and --prompts",
            (args.top_k, args.threads, args.prompts), "at least 1")
    require(args.threads <= 1024, "--threads", args.threads, "at most 1,024 (llama.cpp's own limit is lower still: "
            "this machine's cores are the useful most)")
    require(args.prompts <= MAX_PROMPTS, "--prompts", args.prompts, f"at most {MAX_PROMPTS} (each is two greedy runs)")
    return args


def generate(args):
    """Stream llama.cpp's continuation of --start to stdout; its speed to stderr."""
    llm = load_llama(args.gguf, args.threads, seed=args.seed)
    prompt = llm.tokenize(args.start.encode(), add_bos=False, special=True)
    require(len(prompt) >= 1, "--start", args.start, "text that has at least one token")
    # the prompt and every new token within the model's block size (llama.cpp's own context is rounded up past
    # it, and has no window to restart: beyond block_size the model would see positions it never trained on)
    block = block_size(llm)
    room = block - len(prompt)
    require(args.max_new_tokens <= room, "--max_new_tokens", args.max_new_tokens,
            f"at most {max(room, 0)}: the model's block size of {block} tokens less the prompt's {len(prompt)}")
    print(args.start, end="", flush=True)
    text = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character may span tokens
    started, new = time.perf_counter(), []
    for token in llm.generate(prompt, top_k=args.top_k, top_p=1.0, min_p=0.0, temp=args.temperature, repeat_penalty=1.0):
        if token == llm.token_eos() or len(new) == args.max_new_tokens:
            break
        new.append(token)
        print(text.decode(llm.detokenize(new[-1:])), end="", flush=True)
    seconds = time.perf_counter() - started
    print(flush=True)
    print(f"llama.cpp: {len(new)} tokens in {seconds:.2f} s, {len(new) / seconds:.1f} tokens/s ({args.threads} threads)",
          file=sys.stderr)
    llm.close()


def check(args):
    """Greedy continuations of held-out prompts in llama.cpp and in our model: printed, and returned."""
    ckpt = load_checkpoint(args.check)
    refuse_another_source(read_gguf(args.gguf), ckpt, args)
    ours = inference_model(ckpt).eval()
    data = Path(args.data_dir) / ckpt["settings"]["dataset"]
    ids = split_ids(data, read_meta(data), "val")
    # 16 + 32 tokens, within a small model's context (llama.cpp's has no window to restart)
    block_size = ours.config.block_size
    n_prompt = min(PROMPT_TOKENS, block_size // 2)
    n_new = min(NEW_TOKENS, block_size - n_prompt)
    starts = np.linspace(0, len(ids) - n_prompt - 1, args.prompts).astype(int)
    llm = load_llama(args.gguf, args.threads, logits_all=True)
    same, first, gaps = 0, [], []
    for start in starts:
        prompt = ids[start:start + n_prompt].tolist()
        with torch.no_grad():
            mine = torch.cat(list(ours.generate(torch.tensor([prompt]), n_new, temperature=0)), dim=1)[0].tolist()
        theirs = greedy(llm, prompt, n_new)
        same += theirs == mine
        first.append(next((i for i, (a, b) in enumerate(zip(theirs, mine)) if a != b), n_new))
        if first[-1] < n_new:  # how close our own two likeliest tokens were there: a near tie flips on rounding
            with torch.no_grad():
                logits = ours(torch.tensor([prompt + mine[:first[-1]]]))[0][0, -1]
            top = logits.topk(2).values
            gaps.append(float((top[0] - top[1]) / (logits.max() - logits.min())))
    llm.close()
    print(f"{args.gguf}: {same} of {len(starts)} held-out prompts of {data} give the same {n_new} greedy tokens in "
          f"llama.cpp as in {args.check}; the first token that differs, per prompt: {first} ({n_new}: none)"
          + (f"; there our top two logits were {', '.join(f'{g:.1e}' for g in gaps)} of their range apart" if gaps else ""))
    return same, first, gaps


def refuse_another_source(fields, ckpt, args):
    """--check compares a file with the checkpoint it was exported from: another one is named as such,
    with what differs (the shape's settings, else the weights: another seed, step or run)."""
    theirs = ast.literal_eval(fields["tablefree.model_config"])
    differ = [f"{key} {theirs.get(key)} vs {value}" for key, value in ckpt["model_config"].items()
              if theirs.get(key) != value]
    ours = weights_id(ckpt)
    if not differ and fields.get("tablefree.weights_crc32", ours) == ours:
        return  # (a file written before the weights' crc32 is compared by its settings alone)
    what = f"its model differs: {', '.join(differ[:4])}" if differ else "the same shape, other weights"
    raise UserError(f"{args.gguf} was exported from another checkpoint than {args.check} ({what}); give --check the "
                    f"run it was exported from, or export this one: python -m tools.export --ckpt {args.check} "
                    f"--format gguf")


def main(argv=None):
    with user_errors("llama.py"):
        args = parse_args(argv)
        if args.check:
            check(args)
        else:
            with reader_may_leave():  # python -m tools.llama ... | head
                generate(args)


if __name__ == "__main__":
    main()
