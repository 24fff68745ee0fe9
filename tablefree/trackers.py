"""Training runs in the trackers people already use: Weights & Biases (nanoGPT's wandb_log,
wandb_project and wandb_run_name settings) and TensorBoard (--tensorboard, into out_dir/tb/), each
imported only when switched on; train.py's rank 0 alone writes them.

Each gets what log.jsonl records, as RunDir writes it: at each log step the training loss, the
learning rate, tokens/s, MFU and the largest gradient norm; at each evaluation the train and val loss,
the val perplexity and bits per byte; all against train.py's step (`iter`), and in W&B the run's
settings and parameter counts as its config. A tracker that cannot start or write (not installed,
an unwritable folder, no account) is one warning: the run goes on and log.jsonl is complete.

W&B runs offline unless WANDB_MODE says otherwise or this machine has an API key (WANDB_API_KEY or
`wandb login`'s ~/.netrc): the run is then kept in out_dir/wandb/ and `wandb sync` sends it later. A
resumed run goes on in the same W&B run: its id is kept in out_dir/wandb.json.
"""

import json
import netrc
import os
import secrets
import sys
from pathlib import Path

from tablefree.common import write_atomic

# log.jsonl's keys -> the trackers' names (the train/ and eval/ sections of a dashboard)
SCALARS = {"loss": "train/loss", "lr": "train/lr", "tok_s": "train/tok_s", "mfu": "train/mfu",
           "ms": "train/ms_per_step", "grad_norm_max": "train/grad_norm_max", "peak_gpu_gb": "train/peak_gpu_gb",
           "train_loss": "eval/train_loss", "val_loss": "eval/val_loss", "val_ppl": "eval/val_ppl",
           "val_bpb": "eval/val_bpb_bits_per_byte"}
ID_FILE = "wandb.json"  # the run folder's W&B run: {"id", "project"}, so a resume continues it


def scalars(record):
    """{tracker name: value} of the numbers a log.jsonl record holds (None and text left out)."""
    return {name: float(record[key]) for key, name in SCALARS.items()
            if isinstance(record.get(key), (int, float)) and not isinstance(record.get(key), bool)}


def warn(what):
    print(f"warning: {what}; training goes on without it (log.jsonl has every record)", file=sys.stderr)


class Trackers:
    """The trackers a run's settings switch on; log(record) sends each its scalars; close() ends them.
    A tracker that fails is dropped with one warning."""

    def __init__(self, s, config, iter_num, resumed):
        self.active = []
        for wanted, start in ((s.wandb_log, WandB), (s.tensorboard, TensorBoard)):
            if wanted:
                try:
                    self.active.append(start(s, config, iter_num, resumed))
                except Exception as e:  # a tracker is never the reason a run stops
                    warn(f"{start.NAME} did not start ({first_line(e)})")

    def log(self, record):
        values = scalars(record)
        if not values:
            return
        for tracker in list(self.active):
            try:
                tracker.log(record["iter"], values)
            except Exception as e:
                self.active.remove(tracker)
                warn(f"{tracker.NAME} stopped logging at step {record['iter']} ({first_line(e)})")

    def close(self):
        for tracker in self.active:
            try:
                tracker.close()
            except Exception as e:
                warn(f"{tracker.NAME} did not close ({first_line(e)})")
        self.active = []


def first_line(error):
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


class TensorBoard:
    """torch.utils.tensorboard's SummaryWriter into out_dir/tb/: `tensorboard --logdir out/` shows every
    run under out/. A resumed run purges what the interrupted one logged after its checkpoint."""
    NAME = "TensorBoard"

    def __init__(self, s, config, iter_num, resumed):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise RuntimeError("the tensorboard package is not installed: pip install tensorboard==2.21.0") from None
        self.writer = SummaryWriter(log_dir=str(Path(s.out_dir) / "tb"), purge_step=iter_num + 1 if resumed else None)

    def log(self, step, values):
        for name, value in values.items():
            self.writer.add_scalar(name, value, step)

    def close(self):
        self.writer.close()


class WandB:
    """A W&B run, online with an API key, else offline in out_dir/wandb/ (wandb sync sends it)."""
    NAME = "wandb"

    def __init__(self, s, config, iter_num, resumed):
        try:
            import wandb
        except ImportError:
            raise RuntimeError("the wandb package is not installed: pip install wandb==0.31.0") from None
        out = Path(s.out_dir)
        kept = read_id(out / ID_FILE) if resumed else None
        run_id = kept["id"] if kept and kept.get("project") == s.wandb_project else secrets.token_hex(4)
        mode = os.environ.get("WANDB_MODE") or ("online" if has_api_key() else "offline")
        self.run = wandb.init(project=s.wandb_project, name=s.wandb_run_name or out.resolve().name, id=run_id,
                              resume="allow", dir=str(out), mode=mode, config=config,
                              settings=wandb.Settings(silent=True))
        self.run.define_metric("iter")
        self.run.define_metric("*", step_metric="iter")  # any order of steps: a resume may go back
        write_atomic(out / ID_FILE, json.dumps({"id": run_id, "project": s.wandb_project}))
        self.offline = self.run.settings.mode == "offline" or mode in ("offline", "dryrun")
        where = Path(self.run.dir).parent  # out_dir/wandb/offline-run-<time>-<id>
        print(f"wandb: run {run_id} in project {s.wandb_project}" + (
            f", offline (no API key here): {where}; send it with: wandb sync {where}" if self.offline else
            f": {self.run.url}"))

    def log(self, step, values):
        self.run.log({"iter": step, **values})

    def close(self):
        self.run.finish()


def read_id(path):
    try:
        kept = json.loads(Path(path).read_text())
        return kept if isinstance(kept, dict) and isinstance(kept.get("id"), str) else None
    except (OSError, ValueError):
        return None


def has_api_key():
    """An API key for W&B on this machine: the environment's, or `wandb login`'s in ~/.netrc."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False
