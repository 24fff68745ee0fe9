"""A tablefree GPT in transformers (trust_remote_code): every input, head and body tablefree trains,
in one file that imports torch and transformers only, so a folder holding it can be shared and used
by someone who never cloned tablefree. tools/export.py copies it into the folder it writes:

    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)  # it reads the config first

It computes what tablefree's model.py computes (tests/test_hf_remote.py: logits within 1e-4, greedy
tokens equal with the cache). What is stored is what the model is, compact: a learned table, the
affine map (A, b), the frozen codes as their bits, the Kronecker projection with every token's
bytes, nothing for binary; a ternary body's weights in their 2-bit packing with one scale each
(tablefree/ternary.py's pack_ternary), unpacked once, at the first forward.
"""

import hashlib
import json
import math
import os
import warnings

import torch
import torch.nn as nn
from torch.nn import functional as F
from transformers import DynamicCache, GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast


class TablefreeConfig(PretrainedConfig):
    """tablefree's GPTConfig, resolved: `bits` is K (binary, affine) or the frozen code's D."""

    model_type = "tablefree"

    def __init__(self, vocab_size=2, block_size=8, n_layer=1, n_head=1, n_embd=8, mlp_hidden=32, bias=False,
                 input="binary", head="untied", body="float", bits=1, lift="tile", code_values="01", pos_dim=16,
                 rope_base=10000.0, **kwargs):
        self.vocab_size, self.block_size, self.n_layer, self.n_head, self.n_embd = vocab_size, block_size, n_layer, n_head, n_embd
        self.mlp_hidden, self.bias, self.input, self.head, self.body = mlp_hidden, bias, input, head, body
        self.bits, self.lift, self.code_values, self.pos_dim, self.rope_base = bits, lift, code_values, pos_dim, rope_base
        self.num_hidden_layers, self.hidden_size, self.num_attention_heads = n_layer, n_embd, n_head  # transformers' names
        self.max_position_embeddings = block_size
        super().__init__(**kwargs)

    def to_dict(self):  # a folder save_pretrained writes has no tablefree.json, so its config claims none
        return {k: v for k, v in super().to_dict().items() if k != "manifest"}


# ---- the inputs: ids (B, T) -> (B, T, n_embd) ----

def lifted(code, config):
    """Bits (B, T, K) lifted to (B, T, n_embd): tile x_j = c_{j mod K}, or interleave c_{floor(j K / n)}."""
    j = torch.arange(config.n_embd, device=code.device)
    index = j % config.bits if config.lift == "tile" else j * config.bits // config.n_embd
    bits = code[..., index].float()
    return bits if config.code_values == "01" else 2 * bits - 1


def id_bits(idx, bits):
    """(B, T, K): the id's K bits, most significant first."""
    return (idx.unsqueeze(-1) >> torch.arange(bits - 1, -1, -1, device=idx.device)) & 1


def unpack_bits(packed, bits):
    """uint8 (..., ceil(D / 8)) -> 0/1 int64 (..., D), first bit highest."""
    return ((packed.long().unsqueeze(-1) >> torch.arange(7, -1, -1, device=packed.device)) & 1).flatten(-2)[..., :bits]


class CodeInput(nn.Module):
    """binary: the id's bits; affine: A c XOR b; frozen: the stored sign-PCA bits. No parameters."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        if config.input == "affine":
            self.register_buffer("A", torch.zeros(config.bits, config.bits, dtype=torch.uint8))
            self.register_buffer("b", torch.zeros(config.bits, dtype=torch.uint8))
        if config.input == "frozen":
            self.register_buffer("packed", torch.zeros(config.vocab_size, -(-config.bits // 8), dtype=torch.uint8))

    def code(self, idx):
        if self.config.input == "frozen":
            return unpack_bits(self.packed[idx], self.config.bits)
        code = id_bits(idx, self.config.bits)
        if self.config.input == "affine":
            code = (code @ self.A.long().T + self.b.long()) % 2  # over GF(2)
        return code

    def forward(self, idx):
        return lifted(self.code(idx), self.config)


class KroneckerInput(nn.Module):
    """W kappa(t): the z-normalised byte x position code of the token's bytes, one learned projection."""

    def __init__(self, config):
        super().__init__()
        D = 256 * config.pos_dim
        self.pos_dim = config.pos_dim
        self.cells = nn.Parameter(torch.zeros(D, config.n_embd))  # W^T
        self.register_buffer("token_bytes", torch.zeros(config.vocab_size, config.pos_dim, dtype=torch.uint8))
        self.register_buffer("lengths", torch.zeros(config.vocab_size, dtype=torch.long))

    def forward(self, idx):
        D = self.cells.size(0)
        L = self.lengths[idx].float()  # (B, T)
        s = L.clamp(min=1).rsqrt()
        m = L * s / D
        std = ((L * (s - m) ** 2 + (D - L) * m ** 2) / (D - 1)).sqrt() + 1e-6
        hot, cold = (s - m) / std * (L > 0), -m / std
        positions = torch.arange(self.pos_dim, device=idx.device)
        live = positions < self.lengths[idx].unsqueeze(-1)  # (B, T, pos_dim)
        rows = self.cells[self.token_bytes[idx].long() * self.pos_dim + positions] * live.unsqueeze(-1)
        return (hot - cold).unsqueeze(-1) * rows.sum(dim=2) + cold.unsqueeze(-1) * self.cells.sum(dim=0)


# ---- the body: pre-norm blocks with rotary attention, float or ternary Linears ----

class TernaryLinear(nn.Module):
    """BitNet b1.58's product from the 2-bit packing: y = (x_q W_t^T) gamma / s, x_q = round(x s)
    clipped to [-128, 127], s = 127 / max |x| per token; W_t unpacked once (0 -> 00, +1 -> 01, -1 -> 10)."""

    def __init__(self, n_in, n_out, bias):
        super().__init__()
        self.n_in = n_in
        self.register_buffer("packed", torch.zeros(n_out, -(-n_in // 4), dtype=torch.uint8))
        self.register_buffer("gamma", torch.ones(()))
        self.bias = nn.Parameter(torch.zeros(n_out)) if bias else None
        self.weight = None  # (out, in) float of -1, 0, +1, made at the first forward

    def forward(self, x):
        if self.weight is None or self.weight.device != x.device:
            codes = torch.stack([(self.packed >> s) & 3 for s in (0, 2, 4, 6)], dim=-1).flatten(-2)[:, :self.n_in]
            self.weight = codes.float() - 3 * (codes == 2).float()
        scale = 127.0 / x.float().abs().amax(dim=-1, keepdim=True).clamp(min=1e-5)
        x_q = (x.float() * scale).round().clamp(-128, 127)
        y = F.linear(x_q, self.weight) * (self.gamma / scale)  # integer sums, exact in float32 below 2^24
        return y if self.bias is None else y + self.bias


def linear(config, n_in, n_out):
    return (TernaryLinear if config.body == "ternary" else nn.Linear)(n_in, n_out, config.bias)


def rotate(x, cos, sin):
    """Each (x1, x2) pair of halves of x (B, nh, T, hs) turned by its position's angle (GPT-NeoX's layout)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class Attention(nn.Module):

    def __init__(self, config, layer):
        super().__init__()
        self.c_attn, self.c_proj = linear(config, config.n_embd, 3 * config.n_embd), linear(config, config.n_embd, config.n_embd)
        self.n_head, self.layer = config.n_head, layer

    def forward(self, x, cos, sin, cache):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)  # (B, nh, T, hs)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        if cache is not None:
            k, v = cache.update(k, v, self.layer)  # (B, nh, past + T, hs)
        S = k.size(2)  # query i sits at position S - T + i and sees keys 0 .. S - T + i
        mask = None if T == 1 else torch.ones(T, S, dtype=torch.bool, device=x.device).tril(diagonal=S - T)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.c_fc, self.c_proj = linear(config, config.n_embd, config.mlp_hidden), linear(config, config.mlp_hidden, config.n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):

    def __init__(self, config, layer):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias), nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn, self.mlp = Attention(config, layer), MLP(config)

    def forward(self, x, cos, sin, cache):
        x = x + self.attn(self.ln_1(x), cos, sin, cache)
        return x + self.mlp(self.ln_2(x))


class CodeHead(nn.Module):
    """logits = z C^T / sqrt(D) + b: z = W h, C the frozen codes as -1/+1 (the input's own bits)."""

    def __init__(self, config):
        super().__init__()
        self.bits = config.bits
        self.proj = nn.Linear(config.n_embd, config.bits, bias=False)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x, packed):
        z = self.proj(x) / math.sqrt(self.bits)  # (B, T, D)
        # 8,192 codes unpacked at a time (16 MB at D = 512), never a whole V x D float table
        logits = [z @ (2.0 * unpack_bits(rows, self.bits).to(z.dtype) - 1).T for rows in packed.split(8192)]
        return torch.cat(logits, dim=-1) + self.bias  # (B, T, V)


def verify_folder(folder):
    """Refuse a folder whose files are not the ones tools.export wrote: tablefree.json lists the sha256 of
    each (the same check as `python -m tools.export --verify FOLDER`). Its config.json names it
    ("manifest"), so a deleted one is refused; a folder whose config names none (an export older than
    2026-12-06, or one save_pretrained wrote: a model the user fine-tuned) loads with a warning."""
    manifest = os.path.join(folder, "tablefree.json")
    if not os.path.isfile(manifest):
        try:
            with open(os.path.join(folder, "config.json")) as f:
                claimed = json.load(f).get("manifest") == "tablefree.json"
        except (OSError, ValueError, AttributeError):
            claimed = False  # transformers' own loading says what is wrong with config.json
        if claimed:
            raise ValueError(f"{manifest} is missing, which config.json says lists the sha256 of every file: the "
                             f"folder was changed; export it again (python -m tools.export --verify checks a folder)")
        warnings.warn(f"{folder} has no tablefree.json, so its files are not checked (an older export, or a folder "
                      f"save_pretrained wrote); export it again to have them checked")
        return
    with open(manifest) as f:
        sums = json.load(f)["sha256"]
    for name, digest in sums.items():
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            raise ValueError(f"{path} is missing, which tablefree.json lists: the folder was changed; export it again")
        with open(path, "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != digest:
                raise ValueError(f"{path} is not the file tools.export wrote (its sha256 differs from tablefree.json's): "
                                 f"the folder was changed; export it again")


class TablefreeForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = TablefreeConfig
    _supports_cache_class = True

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """transformers' from_pretrained, after every file of a local folder is checked (verify_folder)."""
        if os.path.isdir(str(pretrained_model_name_or_path)):
            verify_folder(str(pretrained_model_name_or_path))
        return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)

    def __init__(self, config):
        super().__init__(config)
        if config.input == "learned":
            self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        else:
            self.wte = KroneckerInput(config) if config.input == "kronecker" else CodeInput(config)
        self.h = nn.ModuleList(Block(config, i) for i in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, bias=config.bias)
        if config.head == "codes":
            self.lm_head = CodeHead(config)
        elif config.head == "untied":
            self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.post_init()

    def rotary(self, start, T, device):
        """cos and sin (T, hs / 2) for positions start .. start + T - 1: theta_i = base^(-2i / hs), as
        model.Rotary (computed here, not kept: from_pretrained builds a model before it has weights)."""
        hs = self.config.n_embd // self.config.n_head
        inv_freq = self.config.rope_base ** (-torch.arange(0, hs, 2, device=device).float() / hs)
        angles = torch.outer(torch.arange(start, start + T, device=device).float(), inv_freq)
        return angles.cos(), angles.sin()

    def _init_weights(self, module):
        pass  # every weight comes from the folder

    def get_input_embeddings(self):
        return self.wte

    def logits(self, x):
        if self.config.head == "codes":
            return self.lm_head(x, self.wte.packed)
        return F.linear(x, self.wte.weight) if self.config.head == "tied" else self.lm_head(x)

    def forward(self, input_ids, attention_mask=None, cache=None, use_cache=None, labels=None, past_key_values=None,
                **kwargs):
        """logits (B, T, V) for ids (B, T) after the cache's positions (transformers 5's `cache`, or
        `past_key_values` as before), which grows by T. attention_mask: unused, padding goes right."""
        B, T = input_ids.size()
        cache = cache if cache is not None else past_key_values
        cache = cache if cache is not None else DynamicCache() if use_cache else None
        start = cache.get_seq_length() if cache is not None else 0
        if start + T > self.config.block_size:
            raise ValueError(f"{start + T} positions, but the model was trained on at most {self.config.block_size}")
        cos, sin = self.rotary(start, T, input_ids.device)
        x = self.wte(input_ids)
        for block in self.h:
            x = block(x, cos, sin, cache)
        logits = self.logits(self.ln_f(x)).float()
        loss = None
        if labels is not None:  # transformers' convention: labels are the inputs, shifted here
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits, cache=cache)
