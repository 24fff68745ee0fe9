"""The frozen-code paper's run: a Gemma-3-270M-shaped body, 512 sign-PCA bits in and out, against learned_270m.py.

From the frozen-code paper (an abstract without a title or arXiv id in our sources; see
docs/papers.md): one frozen table of 512-bit codes, 16 MB, derived by principal components and
sign binarisation from a pretrained embedding; the same Gemma-shaped body trained from scratch
on the same 2.05B tokens with and without it, and the same with a ternary body
(frozen_270m_ternary.py, learned_270m_ternary.py); one run each. Gemma 3 270M's published
config gives the shape: 18 layers, width 640, 4 heads, a gated MLP of 2,048, V = 262,144,
context 32,768.
Our blocks at that shape, and what differs from Gemma's architecture (our choice throughout):
- MLP: ours is GELU, not gated; mlp_width 3,072 gives it Gemma's parameters and FLOPs
  (2 x 640 x 3,072 = 3 x 640 x 2,048), so the body is 100.29M against Gemma's 100.33M;
- attention: 4 heads of 160 with their own keys and values, not 4 query heads of 256 sharing
  one key/value head (the same 1.64M weights a layer); no sliding-window layers, no QK-norm;
- LayerNorm, not RMSNorm; no embedding scaling; rotary base 10,000 in every layer;
- context 1,024, not 32,768 (the paper does not say what it trained at);
- the head, as the paper's model has it: one frozen table for input and output (head='codes':
  logits = z C^T / sqrt(D) + b over the same 512-bit codes, z a learned 640 -> 512 projection,
  b a learned bias per token; model.py's CodeHead), so the frozen model trains 100.9M
  parameters (the paper: about 100M) against the tied learned control's 268.1M, 2.66x (the
  paper: 2.6x); the input stays the papers' tiled lift of the code, with no learned projection;
- the codes: the paper derives them from Gemma 3's pretrained table, which belongs to Gemma's
  SentencePiece tokenizer that prepare.py cannot write; ours come from the learned control's
  final table (codes_from), on our own 262,144-token BPE: run learned_270m.py first, and count
  its compute in this run's cost.
Our choice, besides: FineWeb-Edu (the paper's data is not in its abstract), 524,288 tokens a
step for 3,910 steps (= 2.05B tokens), AdamW 6e-4 -> 6e-5 with 200 warmup steps, one seed.

    pip install datasets
    python prepare.py --dataset fineweb-edu --vocab_size 262144 --bpe_chars 2e9 --name fineweb-edu-262k --max_tokens 2.1e9 --val_fraction 0.0005 --workers 16
    torchrun --nproc_per_node=8 train.py config/learned_270m.py   # first: its table gives the codes
    torchrun --nproc_per_node=8 train.py config/frozen_270m.py

Estimated cost, from `python train.py config/frozen_270m.py --dry_run=True`:
    parameters: 100,883,584 trainable = input 0 + body 100,293,760 + head 589,824; fixed input code 16,777,216 values
    compute: 1.28e+09 FLOP a token x 2.05B tokens (3,910 steps of 524,288) = 2.65e+18 FLOP, evaluations included (0.8%)
    memory per GPU at micro-batch 16 x 1024, bfloat16: weights 421 MB + gradients 404 MB + AdamW state 807 MB + weight copies 470 MB + activations 25.8 GB = 27.9 GB
    wall time at 40% MFU: 8 x H100 14.0 min (1.86 GPU-hours); 8 x A100 44.3 min (5.90 GPU-hours)
"""
input = "frozen"
head = "codes"
code_dim = 512
codes_from = "out-270m-learned"
out_dir = "out-270m-frozen"
dataset = "fineweb-edu-262k"
vocab_size = 262144
n_layer = 18
n_head = 4
n_embd = 640
mlp_width = 3072
block_size = 1024
batch_size = 16
gradient_accumulation_steps = 32
max_iters = 3910
lr_decay_iters = 3910
learning_rate = 6e-4
min_lr = 6e-5
warmup_iters = 200
eval_interval = 250
