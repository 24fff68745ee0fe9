"""The papers' 32-layer shape, input = 'affine': 16-bit codes recoded by a fixed random A in GL(16, 2) and b (no input parameters).

Every other setting is train.py's default, shared by config/learned.py, binary.py and affine.py.
From A. Bochkov, arXiv:2605.09751: 32 layers, n_embd 1024, V = 65,536, an untied head, ~17B
tokens (here 524,288 tokens per step for 32,425 steps = 17.0B), three seeds. Our choice, since
the paper does not give them (nanoGPT / GPT-3 practice): 32 heads, context 1024, AdamW 3e-4 ->
3e-5 with 1,000 warmup steps, bf16, torch.compile, 8 GPUs of 80 GB.

    pip install datasets
    python prepare.py --dataset fineweb-edu --vocab_size 65536 --max_tokens 17.5e9 --val_fraction 0.0005 --workers 16
    torchrun --nproc_per_node=8 train.py config/affine.py

Estimated cost (not measured): 3.22 GFLOP per token (6 x 470M matmul weights + attention)
x 17.0B tokens = 5.5e19 FLOP; at 40% MFU that is ~39 GPU-hours on H100 (~5 h on 8) or
~122 GPU-hours on A100 (~15 h on 8). For the papers' three seeds add --seed=1 and --seed=2
with their own --out_dir.
"""
input = "affine"
out_dir = "out-affine"
dataset = "fineweb-edu"
