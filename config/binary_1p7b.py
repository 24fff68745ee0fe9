"""The 1.7B-class follow-up's run, input = 'binary': canonical 16-bit codes tiled to 1,536, no input parameters.

From A. Bochkov, "Do Language Models Need a Trainable Input Embedding Table? Fixed Minimal Token
Codes at 1.7B-Class Scale" (2026): V = 65,536 (K = 16), 1.711B parameters with the fixed codes and
100.7M more with the table, so V x d_model = 100.7M and d_model = 1,536; an untied head; a
100B-token target; single runs (one seed); learned vs binary vs one affine recoding (the other
two configs: learned_1p7b.py, affine_1p7b.py). Its abstract does not describe the blocks:
ours are GPT-2's pre-norm blocks with rotary positions, a GELU MLP of 4 x n_embd and no biases,
as in every config here. The paper gives no depth or heads: with our
blocks (12 x 1,536^2 weights a layer), 57 layers is the depth whose total is nearest 1.711B
(1.7146B; 56 gives 1.686B). Our choice: 12 heads of 128, context 1,024, 524,288 tokens a step
for 190,735 steps (= 100.0B tokens), AdamW 2e-4 -> 2e-5 (GPT-3 XL's peak) with 2,000 warmup
steps, micro-batch 8 (16 does not fit 80 GB: the dry run below), bf16, torch.compile, 8 GPUs.
fineweb-edu's sample-100BT holds about 100B GPT-2 tokens: prepare may stop a little short of
the target, and train.py then samples its windows from what there is.

    pip install datasets
    python prepare.py --dataset fineweb-edu --vocab_size 65536 --name fineweb-edu-100b --max_tokens 101e9 --val_fraction 0.0001 --workers 16
    torchrun --nproc_per_node=8 train.py config/binary_1p7b.py

Estimated cost, from `python train.py config/binary_1p7b.py --dry_run=True`:
    parameters: 1,714,598,400 trainable = input 0 + body 1,613,935,104 + head 100,663,296; fixed input code 0 values
    compute: 1.14e+10 FLOP a token x 100B tokens (190,735 steps of 524,288) = 1.14e+21 FLOP, evaluations included (0.1%)
    memory per GPU at micro-batch 8 x 1024, bfloat16: weights 6.86 GB + gradients 6.86 GB + AdamW state 13.7 GB + weight copies 3.43 GB + activations 32.4 GB = 63.2 GB
    wall time at 40% MFU: 8 x H100 99.8 h (798 GPU-hours); 8 x A100 316 h (2531 GPU-hours)
"""
input = "binary"
out_dir = "out-1p7b-binary"
dataset = "fineweb-edu-100b"
vocab_size = 65536
n_layer = 57
n_head = 12
n_embd = 1536
block_size = 1024
batch_size = 8
gradient_accumulation_steps = 64
max_iters = 190_735
lr_decay_iters = 190_735
learning_rate = 2e-4
min_lr = 2e-5
warmup_iters = 2000
eval_interval = 2000
