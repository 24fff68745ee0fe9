#!/usr/bin/env bash
# The GPU check: what the CPU cannot show, in one script for a lent GPU (80-140 GB), under 8 minutes.
#
#   bash dev/gpu_check.sh [OUT] [SECONDS] [SETTING...]   # logs and reports in OUT (default: out-gpu-check)
#
# SECONDS (default 480) is when the bench must end; SETTINGs go to train.py after the config (e.g.
# --n_layer=2 --n_embd=64 --batch_size=2 --block_size=64 --device=cpu to try the script on a CPU).
#
# 1. A small sample in config/binary.py's tokenizer settings (a 65,536-token BPE, which leaves ids 0
#    and 65,535 unused): random words written here, since a GPU machine may reach no network.
# 2. The dry run's estimate for config/binary.py (parameters, FLOPs, memory per GPU).
# 3. The 32-layer binary config at full shape (n_embd 1024, V = 65,536, micro-batch 16 x 1024) under
#    torchrun with 1 process: bf16 autocast, torch.compile, fused AdamW; 30 steps and a checkpoint,
#    then a resume to step 45. Fewer micro-batches a step than the config's 32 (4: 65,536 tokens) so the
#    steps fit the time; ms/step, MFU and peak memory per GPU are in the log lines (micro-batch as the
#    dry run's memory line).
# 4. python sample.py --ckpt on the resumed run (the README's command, on cuda).
# 5. python -m experiments.bench --device cuda (input, generate, memory, train), in the time left.
# A step that fails is reported and the next one runs; the summary at the end names each step's exit
# status. Commit what it shows to results/ (dev/LOG.md says how it went).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-out-gpu-check}
deadline=$((SECONDS + ${2:-480}))
shift $(($# < 2 ? $# : 2))
py=${PYTHON:-python3}
launch=(torchrun)  # or the same launcher through the interpreter, where torchrun is not on the PATH
command -v torchrun >/dev/null || launch=("$py" -m torch.distributed.run)
export PYTHONUNBUFFERED=1
mkdir -p "$out"
status=()
step() {  # step NAME LOG COMMAND...: run it, its output on screen and in LOG, and note its exit status
    local name=$1 logfile=$2
    shift 2
    local start=$SECONDS
    "$@" 2>&1 | tee "$logfile"
    status+=("$name: exit ${PIPESTATUS[0]} after $((SECONDS - start)) s")
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee "$out/gpu.txt"
$py -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())" \
    | tee -a "$out/gpu.txt"

$py - "$out/words.txt" <<'PY'
import sys
import numpy as np
rng = np.random.default_rng(0)  # 3M random words: enough distinct pairs for 65,536 BPE tokens
letters, lengths = rng.integers(97, 123, size=(3_000_000, 9), dtype=np.uint8), rng.integers(3, 10, size=3_000_000)
words = [row[:k].tobytes().decode() for row, k in zip(letters, lengths)]
with open(sys.argv[1], "w") as f:
    f.write("\n".join(" ".join(words[i:i + 100]) for i in range(0, len(words), 100)))
PY
step prepare "$out/prepare.txt" $py prepare.py --input "$out/words.txt" --name gpu-sample --out_dir "$out/data" \
    --vocab_size 65536 --val_fraction 0.05 --workers 8 --quiet

common=(config/binary.py --data_dir="$out/data" --dataset=gpu-sample --out_dir="$out/run" --log_interval=5
        --eval_interval=30 --eval_iters=4 --gradient_accumulation_steps=4 --warmup_iters=10 "$@")
step "dry run" "$out/dry_run.txt" $py train.py "${common[@]}" --dry_run=True
step train "$out/train.txt" "${launch[@]}" --standalone --nproc_per_node=1 train.py "${common[@]}" --max_iters=30 \
    --lr_decay_iters=45 --overwrite=True
step resume "$out/resume.txt" "${launch[@]}" --standalone --nproc_per_node=1 train.py --init_from=resume \
    --out_dir="$out/run" --data_dir="$out/data" --max_iters=45
step sample "$out/sample.txt" $py sample.py --ckpt "$out/run" --max_new_tokens 64 --num_samples 2

left=$((deadline - SECONDS - 10))
if ((left > 30)); then
    step bench "$out/bench.txt" timeout "$left" $py -m experiments.bench --device cuda \
        --sections input,generate,memory,train --out "$out/BENCHMARKS-cuda.md"
else
    status+=("bench: not run, ${left} s left")
fi

{
    echo "---- summary"
    cat "$out/gpu.txt"
    printf '%s\n' "${status[@]}"
    grep -E "^(parameters|compute|memory)" "$out/dry_run.txt"
    grep -E "^(cuda|iter (5|25|30):|step (0|30)|done)" "$out/train.txt"
    grep -E "^(resum|iter (40|45):|step 45|done)" "$out/resume.txt"
} 2>/dev/null | tee "$out/summary.txt"
