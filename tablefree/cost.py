"""What a run will cost before it starts: parameters by part, FLOPs, memory per GPU, wall time.

    python train.py config/binary.py --dry_run=True

The model is built on the meta device (shapes, no memory), so the counts are param_counts and
flops_per_token (below) of the very model train.py would build. Activation memory cannot be
read off shapes alone: it is measured on this CPU, as the tensors autograd keeps for the
backward pass of a training forward at the config's own widths with 1 and 2 layers and 1 and 2
sequences of PROBE_TOKENS tokens, and scaled to n_layer x batch_size x block_size. It is linear
in both (tests/test_cost.py checks the estimate against the memory a real forward holds). The
same probes measure the weights' copies a forward makes (autocast's, a ternary body's).
"""

from dataclasses import replace
from pathlib import Path

import torch

from model import GPT, param_counts
from tablefree.common import DTYPES, UserError, duration, three
from tablefree.configurator import model_config
from tablefree.data import read_meta
from tablefree.device import GPU_PEAK_BF16

PROBE_TOKENS = 32  # tokens per probe sequence: small, and past every shape's constant parts
PROBE_PARAMS = 400e6  # the largest probe model measured (1.6 GB in float32, seconds); the papers' is below 180M
MFU = 0.4  # the model FLOPs utilisation the wall times assume
CLUSTERS = (("H100", 8), ("A100", 8))  # (GPU, how many) the wall time is given for
GPU_BYTES = 80e9  # an H100's or A100's memory, for the warning


def flops_per_token(model):
    """A GPT's training FLOPs per token: 6 per matmul weight, plus 12 n_layer n_embd T for attention.

    A. Chowdhery et al., "PaLM: Scaling Language Modeling with Pathways" (2022,
    arXiv:2204.02311), appendix B. An input lookup or a fixed code costs no matmul FLOPs, so
    the input is left out. The code head's product with the fixed codes costs 4 a weight: a
    forward and the input's gradient, no weight gradient."""
    c, head = model.config, model.lm_head
    if c.head == "codes":
        head_flops = 6 * head.proj.weight.numel() + 4 * c.vocab_size * head.dim
    else:
        head_flops = 6 * head.weight.numel()
    return 6 * param_counts(model)["body"] + head_flops + 12 * c.n_layer * c.n_embd * c.block_size


def saved_bytes(model, idx, dtype):
    """Bytes of the tensors autograd keeps for the backward of model(idx, idx), each storage once."""
    resident = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}  # already there
    seen = {}

    def keep(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in resident:
            seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    autocast = torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32)
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor), autocast:
        model(idx, idx)
    return sum(seen.values())


def forward_memory(config, batch_size, dtype):
    """What a training forward of one micro-batch (batch_size x block_size tokens) holds for the
    backward, in bytes, scaled from probes: {'weight copies': ..., 'activations': ...}.

    Four probes at the config's widths: (1 or 2 layers) x (1 or 2 sequences of T tokens). Their
    differences split the bytes into a part per layer and the rest (input, final norm, head,
    loss), each into what grows with the batch (activations) and what does not (the weights'
    copies: autocast's low-precision ones, a ternary body's quantized ones)."""
    T = min(PROBE_TOKENS, config.block_size)
    torch.manual_seed(0)
    model = GPT(replace(config, n_layer=2, block_size=T)).train()  # no vocab or source: zero codes, same sizes
    blocks, held = model.h, {}
    for layers in (1, 2):
        model.h = blocks[:layers]
        for B in (1, 2):
            held[layers, B] = saved_bytes(model, torch.randint(0, config.vocab_size, (B, T)), dtype)
    layer_sequence = held[2, 2] - held[2, 1] - held[1, 2] + held[1, 1]  # one layer, one more sequence
    layer_fixed = held[2, 1] - held[1, 1] - layer_sequence
    rest_sequence = held[1, 2] - held[1, 1] - layer_sequence
    rest_fixed = held[1, 1] - layer_fixed - layer_sequence - rest_sequence
    sequences = batch_size * config.block_size / T
    return {"weight copies": config.n_layer * layer_fixed + rest_fixed,
            "activations": (config.n_layer * layer_sequence + rest_sequence) * sequences}


def at_depth(config, measure):
    """measure(model) (numbers, in tuples and dicts) of the config's model, from meta models of 1 and 2
    blocks: every count here is a + b n_layer (the blocks are alike), so two depths give it exactly,
    in milliseconds where building n_layer blocks would take minutes at an absurd depth."""
    with torch.device("meta"):
        one, two = (measure(GPT(replace(config, n_layer=n))) for n in (1, 2))

    def extend(a, b):
        if isinstance(a, dict):
            return {key: extend(a[key], b[key]) for key in a}
        if isinstance(a, tuple):
            return tuple(map(extend, a, b))
        return a + (b - a) * (config.n_layer - 1)
    return extend(one, two)


def estimate_cost(s, vocab_size, activations=True):
    """The cost of the run the settings s describe, as a dict (describe_cost prints it).

    activations=False leaves out the one measured part (the CPU probes), for quick checks."""
    config = model_config(s, vocab_size)
    counts, per_token, buffers = at_depth(config, lambda model: (param_counts(model), flops_per_token(model),
                                                                 sum(b.nbytes for b in model.buffers())))
    dtype = getattr(torch, s.dtype) if s.dtype in DTYPES else torch.bfloat16  # 'auto': bfloat16, what a GPU run picks
    tokens_per_step = s.gradient_accumulation_steps * s.batch_size * s.block_size
    evaluations = s.max_iters // s.eval_interval + 1
    eval_tokens = evaluations * 2 * s.eval_iters * s.batch_size * s.block_size  # two splits, forward only
    flops = per_token * tokens_per_step * s.max_iters + per_token / 3 * eval_tokens
    memory = {"weights": 4 * counts["trainable"] + buffers,
              "gradients": 4 * counts["trainable"], "AdamW state": 8 * counts["trainable"]}
    unmeasured = None  # the probe's size, when it is too large to build
    if activations:
        with torch.device("meta"):  # the probe: 2 layers at the full width, with the input and the head
            probe = sum(p.numel() for p in GPT(replace(config, n_layer=2)).parameters())
        if probe <= PROBE_PARAMS:
            memory |= forward_memory(config, s.batch_size, dtype)
        else:
            unmeasured = probe
    return {"config": config, "probe_params": unmeasured, "params": counts, "flops_per_token": per_token,
            "steps": s.max_iters,
            "tokens_per_step": tokens_per_step, "tokens": tokens_per_step * s.max_iters, "flops": flops,
            "eval_share": per_token / 3 * eval_tokens / flops, "dtype": str(dtype)[6:], "micro_batch": s.batch_size,
            "memory": memory, "hours": {f"{n} x {gpu}": flops / (n * GPU_PEAK_BF16[gpu] * MFU) / 3600
                                        for gpu, n in CLUSTERS}}


def describe_cost(cost):
    """The dry run's report: a few lines a config file's docstring can quote."""
    c, p = cost["config"], cost["params"]
    lines = [
        f"model: {c.n_layer} layers x n_embd {c.n_embd}, {c.n_head} heads of {c.n_embd // c.n_head}, MLP "
        f"{c.mlp_hidden()}, context {c.block_size}, V {c.vocab_size:,}, input {c.input}, body {c.body}",
        f"parameters: {p['trainable']:,} trainable = input {p['input']:,} + body {p['body']:,} + head {p['head']:,}; "
        f"fixed input code {p['input_fixed']:,} values",
        f"compute: {cost['flops_per_token']:.3g} FLOP a token x {count(cost['tokens'])} tokens ({cost['steps']:,} "
        f"steps of {cost['tokens_per_step']:,}) = {cost['flops']:.3g} FLOP, evaluations included "
        f"({100 * cost['eval_share']:.1f}%)",
    ]
    memory = cost["memory"]
    total = sum(memory.values())
    lines.append(f"memory per GPU at micro-batch {cost['micro_batch']} x {c.block_size}, {cost['dtype']}: "
                 + " + ".join(f"{name} {size_of(size)}" for name, size in memory.items()) + f" = {size_of(total)}")
    if cost["probe_params"]:
        lines.append(f"  weight copies and activations: not measured: the probe (2 layers at this width, the input and "
                     f"the head) would have {count(cost['probe_params'])} parameters, past the dry run's "
                     f"{count(PROBE_PARAMS)} (seconds on a CPU); the parts above are exact")
    if "activations" in memory:
        lines.append(f"  weight copies and activations: measured on this CPU at 1-2 layers x 1-2 sequences of "
                     f"{PROBE_TOKENS} tokens and scaled; torch.compile's fusion, DDP's buckets and the allocator's "
                     f"slack are not counted")
    state = memory["weights"] + memory["gradients"] + memory["AdamW state"]  # a full copy on every DDP rank
    if state > GPU_BYTES:
        lines.append(f"  the weights, gradients and AdamW state alone are more than an {GPU_BYTES / 1e9:.0f} GB GPU "
                     f"holds, and DDP keeps all of them on every GPU: choose a smaller model")
    elif total > GPU_BYTES:
        lines.append(f"  more than an {GPU_BYTES / 1e9:.0f} GB GPU holds: lower batch_size and raise "
                     f"gradient_accumulation_steps to keep the tokens per step")
    lines.append(f"wall time at {MFU:.0%} MFU: " + "; ".join(
        f"{name} {duration(hours)} ({three(hours * int(name.split()[0]))} GPU-hours)" for name, hours in cost["hours"].items()))
    return "\n".join(lines)


def count(n):
    """A count: 17.0B, 2.05M, 512."""
    for scale, name in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return three(n / scale) + name
    return three(n)


def size_of(n):
    """Bytes: 6.61 TB, 27.0 GB, 96.3 MB."""
    for scale, name in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if n >= scale:
            return f"{three(n / scale)} {name}"
    return f"{three(n)} B"


def dry_run_vocab_size(s):
    """V for the dry run: vocab_size if set, else the prepared data's meta.json (its bins are never read)."""
    if s.init_from != "scratch":
        raise UserError("the dry run describes a new run from its settings; give --init_from=scratch (a resumed "
                        "run costs what its config did)")
    data = Path(s.data_dir) / s.dataset
    if not s.vocab_size and not (data / "meta.json").exists():
        raise UserError(f"the dry run needs the vocabulary: give --vocab_size=N, or prepare {data} first")
    return s.vocab_size or read_meta(data)["vocab_size"]


def run_cost(s):
    """What train.py --dry_run=True prints: the cost of the run the settings s describe."""
    return describe_cost(estimate_cost(s, dry_run_vocab_size(s)))
