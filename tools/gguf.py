"""Our GPT as one GGUF file that llama.cpp runs, written directly with the `gguf` package.

    python -m tools.export --ckpt out/ --format gguf --gguf_type Q8_0     # -> out/model.q8_0.gguf
    llama-cli -m out/model.q8_0.gguf -p "ROMEO:" -n 64                    # or llama_cpp.Llama(...)

The architecture is llama.cpp's `gptneox`, which is our block when set as hf.py explains:
pre-norm LayerNorm (eps 1e-5), rotary over the whole head in the rotate-half (NeoX) layout with
base rope_base, a sequential residual, GELU, an untied output head. llama.cpp's graph requires
every LayerNorm, attention and MLP bias: where ours has none they are written as zeros. Its
fused attn_qkv holds all q rows, then all k, then all v: our c_attn's layout as it is (hf.py
reorders for transformers' NeoX; llama.cpp's own converter undoes that reordering).

What llama.cpp computes differently, and so why its logits are close to ours but not equal:
its GELU is the tanh approximation (read from a float16 table), ours the exact erf; and in a
ternary body it quantises activations to int8 per block of 256 (Q8_K), BitNet b1.58 per token.

The input becomes `token_embd`, a V x n_embd table: the input module applied to every id,
wte(0 .. V-1), as in the Hugging Face export. Only for `learned` is it a trained table; for the
fixed codes it is the lifted codebook, for `kronecker` the trained projection of the fixed byte
code. The file's metadata says so (`tablefree.token_embd`). It is stored as F16 (exact for the
0/1 codes) in every file but an F32 one.

Types (--gguf_type): a float body as F32, F16 or Q8_0 (blocks of 32 weights, one scale); a
ternary body as TQ2_0 (2 bits a weight) or TQ1_0 (1.69 bits), blocks of 256 weights with one
float16 scale, here gamma, the tensor's absmean: exact for weights that are ternary already, up
to gamma rounded to float16. Norms and biases stay F32; the output head is Q8_0 in a Q8_0 file
and F16 beside a ternary body (as BitNet keeps it in higher precision).

The tokenizer goes inside: llama.cpp's `gpt2` byte-level BPE with the `gpt-2` pre-tokenizer
(GPT-2's split pattern, which our BPE uses), the tokens in GPT-2's byte-to-character spelling,
the merges recovered from the ranks as hf.py does, end of text as BOS and EOS (never added).
"""


import struct

import numpy as np

from model import BitLinear, absmean_ternary
from tablefree.checksum import weights_id
from tablefree.common import UserError, replacing
from tablefree.ternary import PackedTernaryLinear
from tablefree.tokenizer import EOT, GPT2_PATTERN, parse_ranks
from tools.hf import bias_or_zeros, bpe_merges, input_table, neox_head, spelled
from tools.llamacpp import METADATA_CRC, gguf_crc32, gguf_package, metadata_crc32

FLOAT_TYPES = ("F32", "F16", "Q8_0")
TERNARY_TYPES = ("TQ2_0", "TQ1_0")
BLOCK = {"Q8_0": 32, "TQ2_0": 256, "TQ1_0": 256}  # weights per quantisation block, along a row
FILE_TYPES = {"F32": "ALL_F32", "F16": "MOSTLY_F16", "Q8_0": "MOSTLY_Q8_0", "TQ2_0": "MOSTLY_TQ2_0", "TQ1_0": "MOSTLY_TQ1_0"}


def check_type(config, pattern, gguf_type):
    """gguf_type if this model (and its tokenizer's split pattern) can be stored as it; else the
    one-line refusal."""
    neox_head(config, "llama.cpp")
    types = TERNARY_TYPES if config.body == "ternary" else FLOAT_TYPES
    if gguf_type not in types:
        raise UserError(f"the checkpoint's body is {config.body!r}: store it as {', '.join(types)}, not {gguf_type} "
                        f"({'a float body has no ternary weights' if gguf_type in TERNARY_TYPES else 'its weights are ternary'})")
    if pattern != GPT2_PATTERN:
        raise UserError("the checkpoint's tokenizer does not split text with GPT-2's pattern, the only one llama.cpp's "
                        "gpt-2 pre-tokenizer reproduces; prepare the data with --tokenizer bpe or gpt2")
    rows = {config.n_embd, config.mlp_hidden()}  # the input widths of every matrix
    block = BLOCK.get(gguf_type, 1)
    if any(width % block for width in rows):
        fitting = [t for t in types if not any(width % BLOCK.get(t, 1) for width in rows)]
        fix = (f"choose --gguf_type {' or '.join(fitting)}" if fitting else
               f"no type of a {config.body} body fits: train with n_embd and mlp_width multiples of {block}")
        raise UserError(f"{gguf_type} stores rows in blocks of {block} weights but this model's rows are "
                        f"{' and '.join(map(str, sorted(rows)))} wide; {fix}")
    return gguf_type


def ternary_of(module):
    """(W_t float32 (out, in) in {-1, 0, 1}, gamma) of a training or an inference ternary Linear."""
    if isinstance(module, PackedTernaryLinear):
        return module.ternary().float(), module.gamma.float()
    return absmean_ternary(module.weight.detach().float())


def tensors(model, gguf_type):
    """(GGUF name, float32 array, type name) for every tensor llama.cpp's gptneox graph loads."""
    c = model.config
    table_type = "F32" if gguf_type == "F32" else "F16"
    head_type = {"F32": "F32", "F16": "F16", "Q8_0": "Q8_0"}.get(gguf_type, "F16")

    def array(t):
        return t.detach().float().cpu().numpy()

    def norm(ln):  # weight, and bias or zeros
        return array(ln.weight), array(bias_or_zeros(ln, c.n_embd))

    def matrix(linear):  # (weights as stored, bias or zeros)
        if isinstance(linear, (BitLinear, PackedTernaryLinear)):
            w_t, gamma = ternary_of(linear)
            weight = array(w_t * gamma)  # every block's max |w| is gamma: quantised back to exactly w_t, gamma
        else:
            weight = array(linear.weight)
        return weight, array(bias_or_zeros(linear, weight.shape[0]))

    out = [("token_embd.weight", array(input_table(model)), table_type)]
    final_w, final_b = norm(model.ln_f)
    out += [("output_norm.weight", final_w, "F32"), ("output_norm.bias", final_b, "F32"),
            ("output.weight", array(model.lm_head.weight), head_type)]
    for i, block in enumerate(model.h):
        p = f"blk.{i}."
        for name, module in (("attn_norm", block.ln_1), ("ffn_norm", block.ln_2)):
            weight, bias = norm(module)
            out += [(p + name + ".weight", weight, "F32"), (p + name + ".bias", bias, "F32")]
        for name, linear in (("attn_qkv", block.attn.c_attn), ("attn_output", block.attn.c_proj),
                             ("ffn_up", block.mlp.c_fc), ("ffn_down", block.mlp.c_proj)):
            weight, bias = matrix(linear)
            out += [(p + name + ".weight", weight, gguf_type), (p + name + ".bias", bias, "F32")]
    return out


def vocabulary(state, vocab_size):
    """(tokens, token types, merges, eot id) for llama.cpp's gpt2 tokenizer, from a tokenizer state."""
    ranks, eot = parse_ranks(state["ranks"].encode()), state["info"]["eot_id"]
    tokens = [f"[PAD{i}]" for i in range(vocab_size)]  # ids no token has (none in our BPE) stay unused
    kinds = [5] * vocab_size  # gguf.TokenType: 1 normal, 3 control, 5 unused
    for token, rank in ranks.items():
        tokens[rank], kinds[rank] = spelled(token), 1
    tokens[eot], kinds[eot] = EOT, 3
    merges = [f"{spelled(left)} {spelled(right)}" for left, right in bpe_merges(ranks)]
    return tokens, kinds, merges, eot


def write_gguf(model, ckpt, out, gguf_type):
    """Write the model as one GGUF file at out, atomically; refuse what llama.cpp cannot run."""
    gguf = gguf_package("--format gguf")
    config = model.config
    check_type(config, ckpt["tokenizer"]["info"]["pattern"], gguf_type)
    tokens, kinds, merges, eot = vocabulary(ckpt["tokenizer"], config.vocab_size)
    stored = []  # (name, the array as the file stores it, its type)
    for name, data, kind in tensors(model, gguf_type):
        qtype = getattr(gguf.GGMLQuantizationType, kind)
        if kind in BLOCK:  # bytes, (rows, blocks x block bytes): the writer reads the shape back from them
            stored.append((name, gguf.quants.quantize(data, qtype), qtype))
        else:
            with np.errstate(over="ignore"):
                stored.append((name, data.astype(np.float16 if kind == "F16" else np.float32), None))
            if kind == "F16" and not np.isfinite(stored[-1][1]).all() and np.isfinite(data).all():
                raise UserError(f"{name} holds weights past float16's range (|w| up to {np.abs(data).max():.3g}, float16 "
                                f"ends at 65,504); export it with --gguf_type F32")
    with replacing(out) as tmp:
        writer = gguf.GGUFWriter(tmp, "gptneox")
        writer.add_name(f"tablefree GPT, input {config.input}, body {config.body}")
        writer.add_description(f"tablefree (a GPT without a trainable input table): input {config.input!r}; "
                               f"{table_note(config)}")
        writer.add_string("tablefree.input", config.input)
        writer.add_string("tablefree.token_embd", table_note(config))
        writer.add_string("tablefree.model_config", repr(ckpt["model_config"]))
        writer.add_uint32("tablefree.weights_crc32", weights_id(ckpt))  # which weights: tools.llama --check
        writer.add_uint32("tablefree.tensors_crc32", gguf_crc32((name, data) for name, data, _ in stored))
        writer.add_uint32(METADATA_CRC, 0)  # filled in below, once the metadata is bytes in the file
        writer.add_context_length(config.block_size)
        writer.add_embedding_length(config.n_embd)
        writer.add_block_count(config.n_layer)
        writer.add_feed_forward_length(config.mlp_hidden())
        writer.add_head_count(config.n_head)
        writer.add_head_count_kv(config.n_head)
        writer.add_rope_dimension_count(config.n_embd // config.n_head)  # the whole head rotates
        writer.add_rope_freq_base(config.rope_base)
        writer.add_parallel_residual(False)
        writer.add_layer_norm_eps(1e-5)  # nn.LayerNorm's
        writer.add_file_type(getattr(gguf.LlamaFileType, FILE_TYPES[gguf_type]))
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre("gpt-2")
        writer.add_token_list(tokens)
        writer.add_token_types(kinds)
        writer.add_token_merges(merges)
        writer.add_bos_token_id(eot)
        writer.add_eos_token_id(eot)
        writer.add_add_bos_token(False)
        writer.add_add_eos_token(False)
        for name, data, qtype in stored:
            writer.add_tensor(name, data, raw_dtype=qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        seal_metadata(tmp)
    return out


def seal_metadata(path):
    """Write the crc32 of a GGUF file's metadata as stored (llamacpp.metadata_crc32) into its own field:
    a flipped bit in any key or value (the rope base, the context length, a merge) is then an error
    at load (llamacpp.read_gguf), not a model that runs otherwise."""
    reader = gguf_package("--format gguf").GGUFReader(path)
    field = reader.fields[METADATA_CRC]
    at, crc = field.offset + sum(part.nbytes for part in field.parts[:-1]), metadata_crc32(reader)
    del reader  # its memory map, before the file is written
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(struct.pack("<I", crc))


def table_note(config):
    """What token_embd is, for the file's metadata."""
    if config.input == "learned":
        return "token_embd is the trained input table"
    return (f"token_embd is derived, not trained: the fixed {config.input} input applied to every id "
            f"(wte(0 .. V-1)); the model has no input table")
