"""The papers' 32-layer shape, input = 'binary': the papers' fixed 16-bit binary codes tiled to 1,024 (no input parameters).

Every other setting is train.py's default, shared by config/learned.py, binary.py and affine.py.
From A. Bochkov, arXiv:2605.09751: 32 layers, n_embd 1024, V = 65,536, an untied head, ~17B
tokens (here 524,288 tokens per step for 32,425 steps = 17.0B), three seeds. Our choice, since
the paper does not give them (nanoGPT / GPT-3 practice): 32 heads, context 1024, AdamW 3e-4 ->
3e-5 with 1,000 warmup steps, bf16, torch.compile, 8 GPUs of 80 GB.

    pip install datasets
    python prepare.py --dataset fineweb-edu --vocab_size 65536 --max_tokens 17.5e9 --val_fraction 0.0005 --workers 16
    torchrun --nproc_per_node=8 train.py config/binary.py

For the papers' three seeds add --seed=1 and --seed=2 with their own --out_dir.

Estimated cost, from `python train.py config/binary.py --dry_run=True`:
    parameters: 469,828,608 trainable = input 0 + body 402,719,744 + head 67,108,864; fixed input code 0 values
    compute: 3.22e+09 FLOP a token x 17.0B tokens (32,425 steps of 524,288) = 5.49e+19 FLOP, evaluations included (0.2%)
    memory per GPU at micro-batch 16 x 1024, bfloat16: weights 1.88 GB + gradients 1.88 GB + AdamW state 3.76 GB + weight copies 940 MB + activations 27.0 GB = 35.5 GB
    wall time at 40% MFU: 8 x H100 4.82 h (38.5 GPU-hours); 8 x A100 15.3 h (122 GPU-hours)
"""
input = "binary"
out_dir = "out-binary"
dataset = "fineweb-edu"
vocab_size = 65536
