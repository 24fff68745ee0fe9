"""Train a GPT with a learned, binary, affine, Kronecker or frozen token input.

    python train.py config/shakespeare.py                     # CPU quick start
    python train.py config/shakespeare.py --input=learned     # the baseline
    torchrun --nproc_per_node=8 train.py config/binary.py     # the papers' 32-layer shape
    torchrun --nproc_per_node=8 --nnodes=2 --node_rank=0 --master_addr=ADDR --master_port=29500 \
        train.py ...      # and --node_rank=1 on the second node: data on each, out_dir shared
    python train.py config/binary_1p7b.py --dry_run=True      # what a run costs, before it starts
    python train.py --init_from=resume --out_dir=out          # continue a run, its recipe kept
    python train.py config/finetune_kjv.py                    # fine-tune a trained model
    python train.py config/shakespeare.py --input=frozen --codes_from=out-learned   # frozen codes
    python train.py --help                                    # every setting below, explained

The settings below are the defaults; config files and --key=value override them. Randomness is a
pure function of (seed, rank, step), so a resumed run repeats the interrupted one bit for bit.
Read top to bottom: the settings, train() (processes, devices, the run folder's lock), fit() (the
setup, then the loop), and the helpers in the order the loop calls them. What the quick start does
not need (resuming and fine-tuning, frozen codes, the dry run's costing) is imported where it is
used.
"""

from tablefree.common import interrupt_quietly  # first: Ctrl-C while the imports below load
interrupt_quietly(__name__, "train.py")  # is one line, not a traceback

import hashlib
import json
import math
import os
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm import tqdm

from model import GPT, param_counts
from tablefree.common import (CKPT_NAME, UserError, append_line, duration, mark, model_state,
                              pick_device, pick_dtype, reader_may_leave, refuse_to_overwrite,
                              save_checkpoint, user_errors, write_atomic, writing)
from tablefree.configurator import check_settings, model_config, resolve, settings_help
from tablefree.data import Dataset, windows

# -----------------------------------------------------------------------------
# I/O
out_dir = "out"  # run directory: ckpt.pt, config.json, log.jsonl
data_dir = "data"  # where prepare.py wrote the datasets
dataset = "fineweb-edu"  # data/<dataset>/ as written by prepare.py
init_from = "scratch"  # 'scratch', 'resume' (out_dir/ckpt.pt), or a run (folder, .pt) to fine-tune
overwrite = False  # let a new run (scratch or fine-tuning) replace the run already in out_dir
eval_interval = 1000  # steps between evaluations (and checkpoints)
eval_iters = 100  # batches per split per evaluation
log_interval = 10  # steps between log lines
eval_only = False  # evaluate once and exit
dry_run = False  # print what the run would cost (params, FLOPs, memory, GPU hours); reads no data
always_save_checkpoint = True  # save at every evaluation, not only when val loss improves
# model (GPTConfig's fields): the input interface is the one thing the papers vary
input = "binary"  # 'learned', 'binary', 'affine', 'kronecker' or 'frozen'
code_seed = 0  # draws A and b for 'affine'
lift = "tile"  # 'tile' (the papers' R = [I_K; I_K; ...]) or 'interleave'
code_values = "01"  # '01' (the papers': bits, unscaled) or 'pm1'
extra_bits = 0  # 'binary', 'affine': K = ceil(log2 V) + extra_bits: codes for ids added later
tie_weights = False  # only possible for 'learned'; the papers' head is untied
head = "untied"  # 'untied' (a trainable V x n_embd projection) or 'codes' ('frozen''s read back)
n_layer = 32  # the papers'
n_head = 32  # our choice (head size 32); the papers do not give it
n_embd = 1024  # the papers' d_model
mlp_width = 0  # the MLP's hidden width; 0 is GPT-2's 4 * n_embd
vocab_size = 0  # V; 0 takes the data's, another must equal it (the dry run's, without data)
block_size = 1024  # context length; our choice, as nanoGPT
dropout = 0.0  # after the input and in every block; our choice: none at this scale
bias = False  # our choice, as nanoGPT's faster setting
rope_base = 10000.0  # rotary base, as RoFormer
pos_dim = 16  # 'kronecker': bytes kept per token (the Kronecker paper's runs)
code_dim = 512  # 'frozen': sign bits per token (the paper's 512), at most n_embd and V - 1
codes_from = ""  # 'frozen': derive its codes from this learned run (out/<run>) or V x d tensor file
body = "float"  # the blocks' Linears: 'float' or 'ternary' (BitNet b1.58 weights and activations)
# batch (our choice, following GPT-3's ~0.5M tokens per step):
# tokens per step = gradient_accumulation_steps * batch_size * block_size = 524,288
gradient_accumulation_steps = 32  # over all ranks; each of N ranks does 1/N of them
batch_size = 16  # sequences per micro-batch per rank
# AdamW with linear warmup then cosine decay to min_lr (our choice, following nanoGPT / GPT-3)
learning_rate = 3e-4  # the peak, reached after warmup
input_lr_scale = 1.0  # the input table's (or Kronecker projection's) rate: x the schedule's
max_iters = 32_425  # 17.0B tokens at 524,288 tokens per step: the papers' ~17B
weight_decay = 0.1  # on matrices only
beta1 = 0.9  # AdamW's betas
beta2 = 0.95
grad_clip = 1.0  # 0 disables clipping
decay_lr = True  # False keeps learning_rate constant
warmup_iters = 1000  # steps of linear warmup
lr_decay_iters = 32_425  # usually max_iters
min_lr = 3e-5  # usually learning_rate / 10
# system
device = "auto"  # 'auto' picks cuda, then mps, then cpu; or e.g. 'cuda:1'
dtype = "auto"  # 'auto': bfloat16 on GPUs that support it (float16 otherwise), float32 elsewhere
compile = True  # torch.compile the model
seed = 1337  # initial weights, batches and dropout all follow from it
nonfinite = "stop"  # a non-finite loss or gradient: 'stop' with an error, or 'skip' the update
peak_flops = 0.0  # one device's peak FLOP/s for MFU; 0 looks up known GPUs (none on CPU)
# trackers, beside log.jsonl (tablefree/trackers.py, imported only when one is on; rank 0 writes)
wandb_log = False  # Weights & Biases: offline without an API key here (wandb sync sends it)
wandb_project = "tablefree"
wandb_run_name = ""  # '' names it after out_dir
tensorboard = False  # TensorBoard scalars in out_dir/tb/: tensorboard --logdir out/
# -----------------------------------------------------------------------------
DEFAULTS = {k: v for k, v in globals().items()  # the lower-case names: not an imported constant
            if k.islower() and not k.startswith("_") and type(v) in (int, float, bool, str)}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if "-h" in argv or "--help" in argv:
        with reader_may_leave():
            print(f"usage: python train.py [config/*.py ...] [--key=value ...]\n\n{__doc__.strip()}"
                  f"\n\nsettings (default, meaning):\n{settings_help(__file__, DEFAULTS)}")
        return
    with reader_may_leave(), user_errors("train.py"):  # a closed pipe: quietly, the checkpoint kept
        given = set()
        settings = resolve(DEFAULTS, argv, given)
        train(settings, given)


def train(settings, given=None):
    """Run the training the settings dict describes; return the trained (raw) model.

    given: the keys the user set (configurator.resolve collects them); None counts every key as
    set, as when a test passes complete settings."""
    s = check_settings(settings)
    if s.dry_run:  # the model on the meta device, its memory and time estimated: no data read
        from tablefree.cost import run_cost
        print(run_cost(s))
        return None
    # under torchrun one process per device: NCCL on GPUs (rank r on its LOCAL_RANK's), else gloo
    rank, world, s.device = 0, 1, pick_device(s.device)
    if "RANK" in os.environ:
        cuda = s.device.startswith("cuda")
        dist.init_process_group(backend="nccl" if cuda else "gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        if cuda:
            s.device = f"cuda:{int(os.environ['LOCAL_RANK'])}"
            torch.cuda.set_device(s.device)
    # rank 0 writes the run folder: the one writer, from before the folder is read
    with writing(s.out_dir, "train.py", make_parent="--out_dir") if rank == 0 else nullcontext():
        return fit(s, given, rank, world)


def fit(s, given, rank, world):
    """The run itself, on this rank: the setup, then the loop; rank 0 holds the run folder."""
    # ---- setup: the dtype, where the run starts, its data, model and optimizer ----
    master, device_type = rank == 0, s.device.split(":")[0]
    s.dtype, ptdtype, autocast = pick_dtype(s.dtype, s.device)  # auto: bf16 on GPUs, fp32 on CPUs
    if device_type == "cuda":  # TF32 matmuls where float32 remains (bf16 autocast covers the rest)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    s, start = where_it_starts(s, given)  # start: None from scratch, else the checkpoint's
    accum = micro_batches_per_rank(s.gradient_accumulation_steps, world)
    data = Dataset(s.data_dir, s.dataset, s.block_size, s.vocab_size)
    if start:
        start.check_data(data)  # a resumed or fine-tuned model's tokenizer must be the data's
    model, quality = make_model(s, start, data)
    model.to(s.device)
    optimizer = model.configure_optimizers(s.weight_decay, s.learning_rate, (s.beta1, s.beta2),
                                           device_type, s.input_lr_scale)
    # a resumed run's step, best loss and clock (its optimizer state loaded), else a new run's
    iter_num, best_val_loss, started = (start.restore(optimizer) if start
                                        else (0, math.inf, time.time()))
    scaler = torch.amp.GradScaler(device_type, enabled=ptdtype == torch.float16)  # fp16 needs it
    raw_model = model  # what checkpoints save: never the compiled or DDP wrapper
    if s.compile:
        model = torch.compile(model)
    if dist.is_initialized():
        gpu = [torch.cuda.current_device()] if device_type == "cuda" else None
        model = DDP(model, device_ids=gpu)
    run = open_run(s, start, raw_model, data, world, quality, iter_num) if master else None
    tokens_per_iter = s.gradient_accumulation_steps * s.batch_size * s.block_size
    flops_per_iter, peak = mfu_terms(raw_model, tokens_per_iter, device_type, s.peak_flops)
    progress = tqdm(total=s.max_iters, initial=iter_num, disable=not master or None, unit="step",
                    file=sys.stdout)

    # ---- the loop: set lr, evaluate and save, the micro-steps, the update, log ----
    resumed_at = iter_num if start and start.resumed and not s.eval_only else None  # logged already
    t0, t0_iter, losses, saved_at, top_norm = time.time(), iter_num, None, None, (0.0, iter_num)
    try:
        while True:
            lr = set_lr(optimizer, iter_num, s)

            evaluating = iter_num % s.eval_interval == 0 or iter_num == s.max_iters or s.eval_only
            if evaluating and iter_num != resumed_at:
                losses = evaluate(model, data, s, rank, world, autocast)
                log_evaluation(run, raw_model, data, iter_num, losses, time.time() - started)
                require_finite_val(losses["val"], iter_num, s.out_dir)  # never saved over good
                improved = losses["val"] < best_val_loss
                best_val_loss = min(best_val_loss, losses["val"])
                due = improved or s.always_save_checkpoint or iter_num == s.max_iters
                if run and iter_num > 0 and not s.eval_only and due:
                    run.save(raw_model, optimizer, iter_num, best_val_loss, time.time() - started)
                    saved_at = iter_num
                t0, t0_iter = time.time(), iter_num  # evaluation and saving are not training time
            if iter_num >= s.max_iters or s.eval_only:
                break

            loss_sum, norm = forward_backward(model, optimizer, scaler, data, s, iter_num, rank,
                                              accum, autocast)
            # the update only when the loss and the gradient are finite (one sync a step): a finite
            # loss can still give an overflowed gradient (docs/inputs.md). With fp16 the scaler
            # checks the gradient itself, skipping an overflowed one and lowering its scale, so
            # only the loss is checked here.
            lossf, normf = loss_sum.item() / s.gradient_accumulation_steps, norm.item()
            if math.isfinite(lossf) and (math.isfinite(normf) or scaler.is_enabled()):
                scaler.step(optimizer)
                scaler.update()
            else:
                skip_nonfinite(s.nonfinite, lossf, normf, iter_num, run)
            optimizer.zero_grad(set_to_none=True)
            top_norm = max(top_norm, (normf, iter_num)) if math.isfinite(normf) else top_norm
            iter_num += 1
            progress.update()

            if iter_num % s.log_interval == 0:
                dt = (time.time() - t0) / (iter_num - t0_iter)  # seconds per step
                mfu = flops_per_iter / dt / (peak * world) if peak else None
                log_step(run, s, iter_num, lossf, lr, dt, tokens_per_iter, mfu, top_norm,
                         device_type)
                t0, t0_iter, top_norm = time.time(), iter_num, (0.0, iter_num)
        if run:
            run.ended()  # a resume that logged and never saved writes its log now
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback; the last checkpoint is whole
        raise UserError(interrupted(iter_num, s.out_dir)) from None
    finally:
        if run:
            run.close()  # the trackers: what they hold is sent or written
    progress.close()
    if master and not s.eval_only:
        print(summary(s, iter_num, losses, best_val_loss, data, time.time() - started, saved_at))
    if dist.is_initialized():
        log(run, {"iter": iter_num, "rank_checksums": rank_checksums(raw_model, world)})
        dist.destroy_process_group()
    return raw_model


# ---- the helpers the run calls, in the order it calls them ----

def where_it_starts(s, given):
    """(settings, start): a new run's (start None: its out_dir may hold no other run's work), or a
    resumed or fine-tuned one's (tablefree/rundir.py: what its checkpoint fixes and what may
    change)."""
    if s.init_from == "scratch":
        refuse_to_overwrite(s.out_dir, s.overwrite)
        return s, None
    from tablefree.rundir import starting_point
    start = starting_point(s, given)
    return start.settings, start  # a resumed run's model, data, seed and recipe: its checkpoint's


def micro_batches_per_rank(accumulation, world):
    """Each of the N ranks does 1/N of gradient_accumulation_steps, which must split evenly."""
    if accumulation % world:
        raise UserError(f"gradient_accumulation_steps={accumulation} must be a multiple of the "
                        f"{world} ranks")
    return accumulation // world


def make_model(s, start, data):
    """(the GPT to train, its input code's quality or None): the start's checkpoint's weights, or
    new weights from the seed, the same on every rank. No token of the data may enter as a
    constant."""
    if start and start.ckpt is not None:  # resumed or fine-tuned: its weights, codes and buffers
        from tablefree.checkpoint import build_model
        model, quality = build_model(start.ckpt), start.ckpt.get("code_quality")
    else:
        model, quality = new_model(s, data)
    data.refuse_constant_codes(model)
    return model, quality


def new_model(s, data):
    """A new GPT from the seed; a code derived from a source table reports how good it is (in
    config.json and on screen), and one that cannot tell most tokens apart is refused (the model
    could not either, on its input or its code head)."""
    torch.manual_seed(s.seed)
    source = None
    if s.codes_from:  # 'frozen''s codes: the sign bits of a learned run's table
        from tablefree.checkpoint import read_code_source
        source = read_code_source(s.codes_from, data.vocab_size)
    vocab = data.vocab_bytes() if s.input == "kronecker" else None  # what kronecker codes
    try:  # what only the data can tell (a frozen source too narrow, pos_dim past every token)
        model = GPT(model_config(s, data.vocab_size), vocab, source)
    except ValueError as e:
        raise UserError(str(e)) from None
    if source is None:
        return model, None
    from tablefree.diagnostics import code_quality, require_distinct
    codes = model.wte.code(torch.arange(data.vocab_size))
    return model, require_distinct(code_quality(codes, source), s.codes_from)


def open_run(s, start, model, data, world, quality, iter_num):
    """The run folder (rank 0's): its config.json written (a resume's once it first saves); and the
    lines a run starts with."""
    for notice in start.notices if start else []:
        print(notice)
    if s.decay_lr and s.max_iters < s.lr_decay_iters and not s.eval_only:  # e.g. --max_iters alone
        print(f"notice: the learning rate decays until step {s.lr_decay_iters:,} but the run stops "
              f"at step {s.max_iters:,} (lr {lr_at(s.max_iters, s):.2e}, not min_lr "
              f"{s.min_lr:.2e}); "
              f"--lr_decay_iters={s.max_iters} ends the schedule with the run")
    counts, finetuned_from = param_counts(model), start.finetuned_from if start else None
    record = {"written_by": mark("python train.py"),  # the folder is a run: ours to replace
              "settings": vars(s), "model": asdict(model.config), "data": data.meta,
              "world_size": world, "params": counts, "code_quality": quality,
              "finetuned_from": finetuned_from}
    checkpointed = {"settings": vars(s), "tokenizer": data.tokenizer, "code_quality": quality,
                    "finetuned_from": finetuned_from}  # what every checkpoint holds beside weights
    resumed = bool(start and start.resumed)
    trackers = None
    if s.wandb_log or s.tensorboard:  # W&B, TensorBoard: what log.jsonl records, as it records it
        from tablefree.trackers import Trackers
        trackers = Trackers(s, {"settings": vars(s), "params": counts}, iter_num, resumed)
    run = RunDir(s.out_dir, iter_num, record, checkpointed, resumed, trackers)
    print(f"params: {counts['trainable']:,} trainable (input {counts['input']:,}, body "
          f"{counts['body']:,}, head {counts['head']:,}); fixed input code "
          f"{counts['input_fixed']:,} values")
    print(f"{s.device} {s.dtype}, {world} process(es), "
          f"{s.gradient_accumulation_steps * s.batch_size * s.block_size:,} tokens per step")
    if quality:
        from tablefree.diagnostics import describe_quality
        print(f"input code: {describe_quality(quality)}")
    return run


class RunDir:
    """A run directory's config.json, log.jsonl and ckpt.pt (train() holds the folder's lock).

    A new run writes config.json at once. A resumed one changes nothing until its first checkpoint
    is saved (or it ends without one): its log lines wait in memory, then it writes its config.json,
    cuts the log back to the checkpoint's step (lines an interrupted run wrote after it) and appends
    them. So a resume that fails or is refused before its first save leaves the run byte for byte
    as it was; the lines it loses are the ones a resume would cut anyway."""

    def __init__(self, out, iter_num, record, checkpointed, resumed, trackers=None):
        self.out, self.iter_num, self.record, self.resumed = Path(out), iter_num, record, resumed
        self.trackers = trackers  # trackers.Trackers: each line of the log goes to them too
        self.checkpointed = checkpointed  # what every checkpoint holds beside weights and step
        try:
            self.out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"cannot write to out_dir {out}: {e.strerror}; choose a writable "
                            f"--out_dir") from None
        self.started, self.pending = False, []
        if not resumed:
            self.start()

    def start(self):
        write_atomic(self.out / "config.json", json.dumps(self.record, indent=2))
        path = self.out / "log.jsonl"
        if path.exists():  # a resumed run keeps what was logged up to its checkpoint; a new one,
            kept = []
            if self.resumed:
                from tablefree.rundir import read_log
                kept = [r for r in read_log(path) if r["iter"] <= self.iter_num]
            write_atomic(path, "".join(json.dumps(r) + "\n" for r in kept))
        self.started = True

    def append(self, record):
        if self.started:
            append_line(self.out / "log.jsonl", json.dumps(record))
            if self.trackers:
                self.trackers.log(record)
        else:
            self.pending.append(record)

    def save(self, model, optimizer, iter_num, best_val_loss, elapsed_s):
        """The checkpoint, atomically (the last stays whole until this one is), its crc32 inside."""
        save_checkpoint({**model_state(model), **self.checkpointed,
                         "optimizer": optimizer.state_dict(), "iter_num": iter_num,
                         "best_val_loss": best_val_loss, "elapsed_s": elapsed_s}, self.out)
        self.saved()

    def saved(self):
        """A checkpoint is saved (or the run ended well): a resumed run writes what it held back."""
        if not self.started:
            self.start()
            for record in self.pending:
                self.append(record)

    def ended(self):
        """The run ended well. A resume that logged lines but saved no checkpoint writes them now;
        one that had nothing left to do leaves config.json and the log as they are (no recipe is
        recorded for training that never happened)."""
        if self.pending:
            self.saved()

    def close(self):
        if self.trackers:
            self.trackers.close()


def mfu_terms(model, tokens_per_iter, device_type, configured):
    """(FLOPs a step, one device's peak FLOP/s) for MFU; the peak is the configured one, else a
    known GPU's (tablefree/device.py), else 0: no MFU (a CPU's)."""
    peak = configured
    if not peak and device_type == "cuda":
        from tablefree.device import peak_flops_of
        peak = peak_flops_of(device_type, configured)
    if not peak:
        return 0.0, 0.0
    from tablefree.cost import flops_per_token
    return flops_per_token(model) * tokens_per_iter, peak


def set_lr(optimizer, iter_num, s):
    """This step's learning rate (lr_at), set in every group (the input's own, input_lr_scale,
    scaled)."""
    lr = lr_at(iter_num, s)
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)
    return lr


def get_batch(data, split, s, *keys):
    """x, y (B, T) on the device: random windows of the split's token bins (data.windows), drawn
    from a generator seeded by (seed, *keys)."""
    generator = torch.Generator().manual_seed(seed_of(s.seed, *keys))
    x, y = windows(data.splits[split], s.batch_size, s.block_size, generator, data.masks[split])
    if s.device.startswith("cuda"):  # pinned memory lets the copy overlap with compute
        x, y = x.pin_memory(), y.pin_memory()
    return x.to(s.device, non_blocking=True), y.to(s.device, non_blocking=True)


@torch.no_grad()
def evaluate(model, data, s, rank, world, autocast):
    """{'train': loss, 'val': loss}: the mean of eval_iters fixed batches per split, the same
    batches at every evaluation and for any number of ranks (rank r scores batches r, r + world,
    ...). Scored through the model inside DDP's wrapper (model.module), not the wrapper: its
    forward waits for every rank, which a rank with fewer batches (eval_iters below the ranks)
    never joins."""
    model = model.module if isinstance(model, DDP) else model
    model.eval()
    result = {}
    for split in ("train", "val"):
        losses = torch.zeros(s.eval_iters, device=s.device)
        for k in range(rank, s.eval_iters, world):
            x, y = get_batch(data, split, s, "eval", 0, k)  # fixed keys: the same batches each time
            with autocast:
                losses[k] = model(x, y)[1]
        if dist.is_initialized():
            dist.all_reduce(losses)  # each batch's loss was filled in by exactly one rank
        result[split] = losses.mean().item()
    model.train()
    return result


def log_evaluation(run, model, data, iter_num, losses, elapsed_s):
    """An evaluation's line and record (with the input's and the head's norms)."""
    bpb, ppl = data.val_bits_per_byte(losses["val"]), math.exp(min(losses["val"], 50))
    norms = input_norms(model) if run else None
    log(run, {"iter": iter_num, "train_loss": losses["train"], "val_loss": losses["val"],
              "val_ppl": ppl, "val_bpb": bpb, "elapsed_s": elapsed_s, "norms": norms},
        f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}, "
        f"val ppl {ppl:.2f}, val {bpb:.3f} bits/byte")


@torch.no_grad()
def input_norms(model, chunk=8192):
    """{"input": {mean, std}, "head": {...}, and for kronecker "projection": {...}} of a raw GPT:
    the L2 norms of every token's input x(t) = wte(t) and of its head row (the Kronecker paper:
    "BPE embedding norm drifts during training while Kronecker projection norm stays near 1.0"),
    chunk tokens at a time: bounded memory at V = 65,536 or 262,144."""
    ids = torch.arange(model.config.vocab_size, device=model.ln_f.weight.device)
    inputs = torch.cat([model.wte(part.view(1, -1)).float().norm(dim=-1).flatten()
                        for part in ids.split(chunk)])
    norms = {"input": mean_std(inputs), "head": mean_std(head_row_norms(model, chunk))}
    if hasattr(model.wte, "cells"):  # the Kronecker projection's rows: one per byte x position cell
        norms["projection"] = mean_std(model.wte.cells.float().norm(dim=-1))
    return norms


def head_row_norms(model, chunk):
    """The L2 norm of each token's output row (V,): the head's weight's rows, or for the code head
    the token's code through the projection, c(t) W / sqrt(D) (CodeHead), chunk tokens at a time
    (never a V x n_embd float table)."""
    head = model.lm_head
    if model.config.head != "codes":
        return head.weight.float().norm(dim=-1)
    weight = head.proj.weight.float()  # (D, n_embd)
    rows = [(head.signs(packed, weight.dtype) @ weight).norm(dim=-1)
            for packed in model.wte.packed.split(chunk)]
    return torch.cat(rows) / head.dim ** 0.5


def mean_std(norms):
    return {"mean": norms.mean().item(), "std": norms.std().item() if norms.numel() > 1 else 0.0}


def require_finite_val(val_loss, iter_num, out):
    """A non-finite validation loss stops the run before it can overwrite a good checkpoint."""
    if not math.isfinite(val_loss):
        kept = (f"{out}/{CKPT_NAME} keeps the last good step" if (Path(out) / CKPT_NAME).exists()
                else "no checkpoint was written")
        raise UserError(f"validation loss is {val_loss} at step {iter_num}; not saved ({kept}): "
                        f"lower learning_rate, or resume from the last good checkpoint")


def forward_backward(model, optimizer, scaler, data, s, iter_num, rank, accum, autocast):
    """One step's gradients, over accum micro-batches per rank, unscaled and clipped: (the loss
    summed over micro-batches and ranks, the gradient norm). DDP all-reduces the gradients once, at
    the last micro-batch, so every rank holds the same gradient and takes the same decision."""
    torch.manual_seed(seed_of(s.seed, "dropout", rank, iter_num))  # dropout: a function of the step
    loss_sum = torch.zeros((), device=s.device)
    for micro in range(accum):
        # numbered across ranks, so N ranks see the same global batch as one process
        x, y = get_batch(data, "train", s, iter_num, rank * accum + micro)
        last = micro == accum - 1
        sync = model.no_sync() if isinstance(model, DDP) and not last else nullcontext()
        with sync, autocast:
            loss = model(x, y)[1]  # the logits (B, T, V) are not kept through the backward
        scaler.scale(loss / accum).backward()
        loss_sum += loss.detach()
    if dist.is_initialized():
        dist.all_reduce(loss_sum)
    scaler.unscale_(optimizer)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = (torch.nn.utils.clip_grad_norm_(model.parameters(), s.grad_clip) if s.grad_clip else
            torch.nn.utils.get_total_norm(grads))
    return loss_sum, norm


def skip_nonfinite(policy, loss, norm, iter_num, run):
    """A step whose loss or gradient norm is not finite: stop with an error, or log that its update
    was skipped."""
    what = (f"training loss is {loss}" if not math.isfinite(loss) else
            f"gradient norm is {norm} (loss {loss:.4f})")
    if policy == "stop":
        raise UserError(f"{what} at step {iter_num}; stopped before updating the weights, the last "
                        f"checkpoint is untouched; lower learning_rate, or resume with "
                        f"--nonfinite=skip")
    log(run, {"iter": iter_num + 1, "skipped": f"non-finite: {what}"},
        f"step {iter_num}: skipped, the {what}")


def log_step(run, s, iter_num, lossf, lr, dt, tokens_per_iter, mfu, top_norm, device_type):
    """A training step's line and record; top_norm: the largest finite gradient norm since the
    last line and the step it came at (a deep model's stability: experiments.depth reads it)."""
    gpu_gb = torch.cuda.max_memory_allocated() / 1e9 if device_type == "cuda" else None  # the peak
    log(run, {"iter": iter_num, "loss": lossf, "lr": lr, "ms": 1000 * dt,
              "tok_s": tokens_per_iter / dt, "mfu": mfu, "peak_gpu_gb": gpu_gb,
              "grad_norm_max": top_norm[0], "grad_norm_max_iter": top_norm[1]},
        f"iter {iter_num}: loss {lossf:.4f}, lr {lr:.2e}, {1000 * dt:.0f} ms, "
        f"{tokens_per_iter / dt:,.0f} tok/s" + (f", mfu {100 * mfu:.1f}%" if mfu else "")
        + (f", peak {gpu_gb:.1f} GB" if gpu_gb else "")
        + f", eta {duration(dt * (s.max_iters - iter_num) / 3600)}")  # training steps left


def log(run, record, line=None):
    """Append record to the run's log.jsonl and print line above the progress bar; rank 0 only
    (the other ranks have no run)."""
    if run is not None:
        run.append(record)
        if line:
            tqdm.write(line, file=sys.stdout)


def interrupted(iter_num, out):
    """The one line Ctrl-C ends a run with: where it stopped and how to go on."""
    if not (Path(out) / CKPT_NAME).exists():
        return f"interrupted at step {iter_num}, before the first checkpoint; start the run again"
    return (f"interrupted at step {iter_num}; {out}/{CKPT_NAME} holds the last evaluation's step: "
            f"continue with python train.py --init_from=resume --out_dir={out}")


def summary(s, iter_num, losses, best_val_loss, data, seconds, saved_at):
    """The line a run ends with: its last evaluation, the best, the time, where the weights are."""
    last = (f"val loss {losses['val']:.4f} ({data.val_bits_per_byte(losses['val']):.3f} "
            f"bits/byte), best {best_val_loss:.4f}") if losses else "not evaluated"
    saved = (f"{s.out_dir}/{CKPT_NAME} at step {saved_at}" if saved_at is not None
             else "no checkpoint written")
    return f"done: step {iter_num} of {s.max_iters} in {duration(seconds / 3600)}; {last}; {saved}"


def rank_checksums(model, world):
    """Every rank's (sum, sum of squares) of its weights: DDP keeps them equal; a desync shows."""
    flat = torch.cat([p.detach().double().flatten() for p in model.parameters()])
    checksum = torch.stack([flat.sum(), (flat * flat).sum()])  # (2,)
    gathered = [torch.zeros_like(checksum) for _ in range(world)]
    dist.all_gather(gathered, checksum)
    return [c.tolist() for c in gathered]


def seed_of(*keys):
    """A 63-bit seed from a tuple such as (seed, step, micro_step), the same in every process."""
    return int.from_bytes(hashlib.sha256(repr(keys).encode()).digest()[:8], "little") >> 1


def lr_at(it, s):
    """Linear warmup for warmup_iters, then cosine decay to min_lr at lr_decay_iters."""
    if not s.decay_lr:
        return s.learning_rate
    if it < s.warmup_iters:
        return s.learning_rate * (it + 1) / (s.warmup_iters + 1)
    if it > s.lr_decay_iters:
        return s.min_lr
    ratio = (it - s.warmup_iters) / max(1, s.lr_decay_iters - s.warmup_iters)
    return s.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (s.learning_rate - s.min_lr)


if __name__ == "__main__":
    main()
