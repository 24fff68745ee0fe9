"""Train a GPT with a learned, binary or affine token input. Reads top to bottom.

    python train.py config/shakespeare.py                          # CPU quick start
    python train.py config/shakespeare.py --input=learned          # the baseline
    torchrun --nproc_per_node=8 train.py config/binary.py          # the papers' 32-layer run
    python train.py config/shakespeare.py --init_from=resume       # continue out_dir's run

Settings below are the defaults; config files and --key=value override them (settings.py).
Randomness is a pure function of (seed, rank, step), so a resumed run repeats exactly what the
interrupted one would have done (bit for bit on CPU).
"""

import hashlib
import json
import math
import os
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm import tqdm

from checkpoint import (CheckpointError, build_model, load_checkpoint, model_state, read_log, save_checkpoint, tokenizer_state,
                        write_atomic)
from dataset import DataError, get_batch, open_split, read_meta
from model import GPT, GPTConfig
from settings import SettingsError, pick_device, pick_dtype, resolve

# -----------------------------------------------------------------------------
# Defaults: the papers' matched 32-layer comparison (config/binary.py, learned.py, affine.py)
# on 8 GPUs of 80 GB; config/shakespeare.py shrinks it for a CPU.
# I/O
out_dir = "out"  # run directory: ckpt.pt, config.json, log.jsonl
data_dir = "data"
dataset = "fineweb-edu"  # data/<dataset>/ as written by prepare.py
init_from = "scratch"  # 'scratch' or 'resume' (from out_dir/ckpt.pt)
eval_interval = 1000  # steps between evaluations (and checkpoints)
eval_iters = 100  # batches per split per evaluation
log_interval = 10  # steps between log lines
eval_only = False  # evaluate once and exit
always_save_checkpoint = True  # save at every evaluation, not only when val loss improves
# model: the input interface is the one thing the papers vary
input = "binary"  # 'learned', 'binary' or 'affine'
code_seed = 0  # draws A and b for 'affine'
lift = "tile"  # 'tile' (the papers') or 'interleave'
code_values = "01"  # '01' (the papers': bits, unscaled) or 'pm1'
tie_weights = False  # only possible for 'learned'
n_layer = 32
n_head = 32
n_embd = 1024
block_size = 1024
dropout = 0.0
bias = False
# batch: tokens per step = gradient_accumulation_steps * batch_size * block_size = 524,288
gradient_accumulation_steps = 32  # over all ranks; each of N ranks does 1/N of them
batch_size = 16  # sequences per micro-batch per rank
# AdamW with linear warmup then cosine decay to min_lr
learning_rate = 3e-4
max_iters = 32_425  # 17.0B tokens at 524,288 tokens per step
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0  # 0 disables clipping
decay_lr = True
warmup_iters = 1000
lr_decay_iters = 32_425  # usually max_iters
min_lr = 3e-5  # usually learning_rate / 10
# system
device = "auto"  # 'auto' picks cuda, then mps, then cpu; or e.g. 'cuda:1'
dtype = "auto"  # 'auto' is bfloat16 on GPUs that support it (float16 otherwise), float32 elsewhere
compile = True  # torch.compile the model
seed = 1337
nonfinite = "stop"  # a non-finite training loss: 'stop' with an error, or 'skip' the step's update
peak_flops = 0.0  # one device's peak FLOP/s for MFU; 0 looks up known GPUs (none on CPU)
# -----------------------------------------------------------------------------
DEFAULTS = {k: v for k, v in globals().items() if not k.startswith("_") and type(v) in (int, float, bool, str)}
MODEL_KEYS = ("input", "code_seed", "lift", "code_values", "tie_weights", "n_layer", "n_head", "n_embd",
              "block_size", "dropout", "bias")
GPU_PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12, "L4": 121e12,
                 "RTX 4090": 165e12, "RTX 3090": 71e12, "V100": 125e12}  # dense tensor-core FLOP/s


class TrainError(Exception):
    """A problem with the run's inputs; printed as one line."""


def seed_of(*keys):
    """A 63-bit seed from a tuple of ints such as (seed, step, micro_step), the same in every process."""
    return int.from_bytes(hashlib.sha256(repr(keys).encode()).digest()[:8], "little") >> 1


def lr_at(it, s):
    """Linear warmup for warmup_iters, then cosine decay to min_lr at lr_decay_iters."""
    if not s["decay_lr"]:
        return s["learning_rate"]
    if it < s["warmup_iters"]:
        return s["learning_rate"] * (it + 1) / (s["warmup_iters"] + 1)
    if it > s["lr_decay_iters"]:
        return s["min_lr"]
    ratio = (it - s["warmup_iters"]) / max(1, s["lr_decay_iters"] - s["warmup_iters"])
    return s["min_lr"] + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (s["learning_rate"] - s["min_lr"])


def peak_flops_of(device_type, configured):
    if configured or device_type != "cuda":
        return configured
    name = torch.cuda.get_device_name()
    return next((flops for key, flops in GPU_PEAK_BF16.items() if key in name), 0.0)


def train(s):
    """Run the training described by the settings dict s."""
    for key in ("eval_interval", "eval_iters", "log_interval", "batch_size", "block_size", "gradient_accumulation_steps"):
        if s[key] < 1:
            raise TrainError(f"{key} must be at least 1, not {s[key]}")
    if s["nonfinite"] not in ("stop", "skip"):
        raise TrainError(f"nonfinite must be 'stop' or 'skip', not {s['nonfinite']!r}")
    # ---- processes and devices: one process per device under torchrun ----
    ddp = "RANK" in os.environ
    s["device"] = pick_device(s["device"])
    device_type = s["device"].split(":")[0]
    if ddp:
        dist.init_process_group(backend="nccl" if device_type == "cuda" else "gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        if device_type == "cuda":
            s["device"] = f"cuda:{int(os.environ['LOCAL_RANK'])}"
            torch.cuda.set_device(s["device"])
    else:
        rank, world = 0, 1
    master = rank == 0
    if s["gradient_accumulation_steps"] % world:
        raise TrainError(f"gradient_accumulation_steps={s['gradient_accumulation_steps']} must be a multiple of the {world} ranks")
    accum = s["gradient_accumulation_steps"] // world
    s["dtype"], ptdtype, autocast = pick_dtype(s["dtype"], s["device"])
    if device_type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    # ---- data: meta.json says the vocabulary, id type and bytes per token ----
    data = Path(s["data_dir"]) / s["dataset"]
    meta = read_meta(data)
    splits = {split: open_split(data, meta, split) for split in ("train", "val")}
    val_bytes_per_token = meta["splits"]["val"]["bytes"] / meta["splits"]["val"]["tokens"]  # for bits per byte

    def batch(split, *keys):
        generator = torch.Generator().manual_seed(seed_of(s["seed"], *keys))
        x, y = get_batch(splits[split], s["batch_size"], s["block_size"], generator)
        if device_type == "cuda":  # pinned memory lets the copy overlap with compute
            return x.pin_memory().to(s["device"], non_blocking=True), y.pin_memory().to(s["device"], non_blocking=True)
        return x.to(s["device"]), y.to(s["device"])

    # ---- model and optimizer, new or from out_dir/ckpt.pt ----
    out = Path(s["out_dir"])
    if s["init_from"] == "resume":
        ckpt = load_checkpoint(out, "cpu")
        for key in MODEL_KEYS:  # the architecture comes from the checkpoint; asking for another one is an error
            if key in ckpt["settings"] and s[key] != ckpt["settings"][key] and s[key] != DEFAULTS[key]:
                raise TrainError(f"{out}/ckpt.pt was trained with {key}={ckpt['settings'][key]!r}, not {s[key]!r}; drop --{key} or use a new out_dir")
        if ckpt["model_config"]["vocab_size"] != meta["vocab_size"]:
            raise TrainError(f"{out}/ckpt.pt has vocab_size {ckpt['model_config']['vocab_size']} but {data} has {meta['vocab_size']}; resume on the same dataset")
        model = build_model(ckpt)
        s.update({key: ckpt["settings"][key] for key in MODEL_KEYS})
        iter_num, best_val_loss, elapsed = ckpt["iter_num"], ckpt["best_val_loss"], ckpt["elapsed_s"]
    elif s["init_from"] == "scratch":
        torch.manual_seed(s["seed"])  # the same initial weights on every rank
        model = GPT(GPTConfig(vocab_size=meta["vocab_size"], **{key: s[key] for key in MODEL_KEYS}))
        iter_num, best_val_loss, elapsed = 0, float("inf"), 0.0
    else:
        raise TrainError(f"init_from must be 'scratch' or 'resume', not {s['init_from']!r}")
    model.to(s["device"])
    optimizer = model.configure_optimizers(s["weight_decay"], s["learning_rate"], (s["beta1"], s["beta2"]), device_type)
    if s["init_from"] == "resume":
        optimizer.load_state_dict(ckpt["optimizer"])
        del ckpt
    scaler = torch.amp.GradScaler(device_type, enabled=ptdtype == torch.float16)  # fp16 only: bf16 needs no scaling
    raw_model = model  # what checkpoints save: never the compiled or DDP wrapper
    if s["compile"]:
        model = torch.compile(model)
    if ddp:
        model = DDP(model, device_ids=[torch.cuda.current_device()] if device_type == "cuda" else None)

    # ---- the run directory: resolved settings, tokenizer, log ----
    counts = raw_model.param_counts()
    tokens_per_iter = s["gradient_accumulation_steps"] * s["batch_size"] * s["block_size"]
    log_path = out / "log.jsonl"
    if master:
        try:
            out.mkdir(parents=True, exist_ok=True)
            write_atomic(out / "config.json", json.dumps({"settings": s, "model": model_state(raw_model)["model_config"],
                                                          "data": meta, "world_size": world, "params": counts}, indent=2))
        except OSError as e:
            raise TrainError(f"cannot write to out_dir {out}: {e.strerror}; choose a writable --out_dir") from None
        if log_path.exists():  # keep only what the run logged up to the checkpoint it resumes from
            # the resumed run evaluates step iter_num again, so an evaluation logged there goes
            kept = [r for r in read_log(log_path) if r["iter"] < iter_num or (r["iter"] == iter_num and "val_loss" not in r)]
            write_atomic(log_path, "".join(json.dumps(r) + "\n" for r in kept))
        print(f"params: {counts['trainable']:,} trainable (input {counts['input']:,}, body {counts['body']:,}, "
              f"head {counts['head']:,}); fixed input code {counts['input_fixed']:,} values")
        print(f"{s['device']} {s['dtype']}, {world} process(es), {tokens_per_iter:,} tokens per step")
    tokenizer = tokenizer_state(meta["tokenizer"], data / meta["tokenizer"]["file"])

    def log(record):
        if master:
            with open(log_path, "a") as f:
                f.write(json.dumps(record) + "\n")

    @torch.no_grad()
    def evaluate():
        """Mean loss of eval_iters fixed batches per split, averaged over ranks."""
        model.eval()
        result = {}
        for split in ("train", "val"):
            losses = torch.zeros(s["eval_iters"], device=s["device"])
            for k in range(s["eval_iters"]):
                x, y = batch(split, "eval", rank, k)  # the same batches at every evaluation
                with autocast:
                    losses[k] = model(x, y)[1]
            loss = losses.mean()
            if ddp:
                dist.all_reduce(loss, op=dist.ReduceOp.AVG)
            result[split] = loss.item()
        model.train()
        return result

    # ---- the loop ----
    peak = peak_flops_of(device_type, s["peak_flops"])
    flops_per_iter = raw_model.flops_per_token() * tokens_per_iter
    progress = tqdm(total=s["max_iters"], initial=iter_num, disable=not master or None, unit="step", file=sys.stdout)
    t0, t0_iter = time.time(), iter_num  # ms/step is timed over the steps since t0_iter
    started = time.time() - elapsed  # wall time of the run, counting the runs it resumes
    while True:
        lr = lr_at(iter_num, s)
        for group in optimizer.param_groups:
            group["lr"] = lr
        if iter_num % s["eval_interval"] == 0 or iter_num == s["max_iters"] or s["eval_only"]:
            losses = evaluate()
            record = {"iter": iter_num, "train_loss": losses["train"], "val_loss": losses["val"],
                      "val_ppl": math.exp(min(losses["val"], 50)), "val_bpb": losses["val"] / math.log(2) / val_bytes_per_token,
                      "elapsed_s": time.time() - started}
            if master:
                progress.write(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}, "
                               f"val ppl {record['val_ppl']:.2f}, val {record['val_bpb']:.3f} bits/byte")
            if not math.isfinite(losses["val"]):
                raise TrainError(f"validation loss is {losses['val']} at step {iter_num}; not saving, lower learning_rate "
                                 f"or resume from the last good checkpoint")
            log(record)
            improved = losses["val"] < best_val_loss
            best_val_loss = min(best_val_loss, losses["val"])
            if master and iter_num > 0 and not s["eval_only"] and (improved or s["always_save_checkpoint"] or iter_num == s["max_iters"]):
                save_checkpoint({**model_state(raw_model), "optimizer": optimizer.state_dict(), "settings": s,
                                 "iter_num": iter_num, "best_val_loss": best_val_loss, "elapsed_s": time.time() - started,
                                 "tokenizer": tokenizer}, out)
            t0, t0_iter = time.time(), iter_num  # evaluation and saving are not training time
        if iter_num >= s["max_iters"] or s["eval_only"]:
            break

        torch.manual_seed(seed_of(s["seed"], "dropout", rank, iter_num))  # dropout masks: a function of the step
        loss_sum = torch.zeros((), device=s["device"])
        for micro in range(accum):
            # numbered across ranks, so N ranks see the same global batch as one process
            x, y = batch("train", iter_num, rank * accum + micro)
            sync = nullcontext() if not ddp or micro == accum - 1 else model.no_sync()  # all-reduce once per step
            with sync, autocast:
                _, loss = model(x, y)
            scaler.scale(loss / accum).backward()
            loss_sum += loss.detach()
        if ddp:
            dist.all_reduce(loss_sum)  # every rank takes the same decision below
        if torch.isfinite(loss_sum):  # one sync per step: a poisoned update must never reach the weights
            if s["grad_clip"]:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), s["grad_clip"])
            scaler.step(optimizer)
            scaler.update()
        elif s["nonfinite"] == "stop":
            raise TrainError(f"training loss is {loss_sum.item()} at step {iter_num}; stopped before updating the weights, "
                             f"the last checkpoint is untouched; lower learning_rate, or resume with --nonfinite=skip")
        else:
            log({"iter": iter_num + 1, "skipped": f"non-finite loss {loss_sum.item()}"})
            if master:
                progress.write(f"step {iter_num}: skipped, the training loss is {loss_sum.item()}")
        optimizer.zero_grad(set_to_none=True)
        iter_num += 1
        progress.update()

        if iter_num % s["log_interval"] == 0:
            lossf = loss_sum.item() / s["gradient_accumulation_steps"]  # mean over the step's micro-batches and ranks
            dt = (time.time() - t0) / (iter_num - t0_iter)  # seconds per step
            t0, t0_iter = time.time(), iter_num
            record = {"iter": iter_num, "loss": lossf, "lr": lr, "ms": 1000 * dt, "tok_s": tokens_per_iter / dt,
                      "mfu": flops_per_iter / dt / (peak * world) if peak else None}
            log(record)
            if master:
                mfu = f", mfu {100 * record['mfu']:.1f}%" if peak else ""
                progress.write(f"iter {iter_num}: loss {lossf:.4f}, lr {lr:.2e}, {record['ms']:.0f} ms, {record['tok_s']:,.0f} tok/s{mfu}")
    progress.close()
    if ddp:  # DDP keeps ranks in step; record each rank's weight checksum so a desync would show
        flat = torch.cat([p.detach().double().flatten() for p in raw_model.parameters()])
        checksum = torch.stack([flat.sum(), (flat * flat).sum()])  # (2,)
        gathered = [torch.zeros_like(checksum) for _ in range(world)]
        dist.all_gather(gathered, checksum)
        log({"iter": iter_num, "rank_checksums": [c.tolist() for c in gathered]})
        dist.destroy_process_group()
    return raw_model


def main(argv=None):
    try:
        train(resolve(DEFAULTS, sys.argv[1:] if argv is None else argv))
    except (SettingsError, TrainError, CheckpointError, DataError) as e:
        sys.exit(f"train.py: error: {e}")


if __name__ == "__main__":
    main()
