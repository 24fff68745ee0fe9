#!/usr/bin/env bash
# The GPU check: what the CPU cannot show, in one script for a lent GPU (80-140 GB), under 8 minutes.
#
#   bash dev/gpu_check.sh [OUT]        # logs and reports in OUT (default: out-gpu-check)
#
# 1. A small sample in config/binary.py's tokenizer settings (a 65,536-token BPE, which leaves ids 0
#    and 65,535 unused): random words written here, since a GPU machine may reach no network.
# 2. The dry run's estimate for config/binary.py (parameters, FLOPs, memory per GPU).
# 3. The 32-layer binary config at full shape (n_embd 1024, V = 65,536, micro-batch 16 x 1024) under
#    torchrun with 1 process: bf16 autocast, torch.compile, fused AdamW; 30 steps and a checkpoint,
#    then a resume to step 45. Fewer micro-batches a step than the config's 32 (4: 65,536 tokens) so the
#    steps fit the time; ms/step, MFU and peak memory per GPU are in the log lines (micro-batch as the
#    dry run's memory line).
# 4. python -m experiments.bench --device cuda (train, memory, input, generate).
# It prints a summary at the end; commit what it shows to results/ (dev/LOG.md says how it went).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out-gpu-check}
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
$py -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$out/gpu.txt"

$py - "$out/words.txt" <<'PY'
import sys
import numpy as np
rng = np.random.default_rng(0)  # 3M random words: enough distinct pairs for 65,536 BPE tokens
letters, lengths = rng.integers(97, 123, size=(3_000_000, 9), dtype=np.uint8), rng.integers(3, 10, size=3_000_000)
words = [row[:k].tobytes().decode() for row, k in zip(letters, lengths)]
with open(sys.argv[1], "w") as f:
    f.write("\n".join(" ".join(words[i:i + 100]) for i in range(0, len(words), 100)))
PY
$py prepare.py --input "$out/words.txt" --name gpu-sample --out_dir "$out/data" --vocab_size 65536 \
    --val_fraction 0.05 --workers 8 --quiet

common=(config/binary.py --data_dir="$out/data" --dataset=gpu-sample --out_dir="$out/run" --log_interval=5
        --eval_interval=30 --eval_iters=4 --gradient_accumulation_steps=4 --warmup_iters=10)
$py train.py "${common[@]}" --dry_run=True | tee "$out/dry_run.txt"
torchrun --standalone --nproc_per_node=1 train.py "${common[@]}" --max_iters=30 --lr_decay_iters=45 \
    --overwrite=True 2>&1 | tee "$out/train.txt"
torchrun --standalone --nproc_per_node=1 train.py --init_from=resume --out_dir="$out/run" --data_dir="$out/data" \
    --max_iters=45 2>&1 | tee "$out/resume.txt"

timeout 240 $py -m experiments.bench --device cuda --sections train,memory,input,generate \
    --out "$out/BENCHMARKS-cuda.md" 2>&1 | tee "$out/bench.txt" || echo "bench: stopped (status $?)" | tee -a "$out/bench.txt"

echo "---- summary"
cat "$out/gpu.txt"
grep -E "^(parameters|compute|memory)" "$out/dry_run.txt" || true
grep -E "^iter (25|30):|^step 30" "$out/train.txt" || true
grep -E "^iter (40|45):|^step 45|resum" "$out/resume.txt" || true
