"""Our GPT as a Hugging Face `transformers` model folder: GPT-NeoX weights, config and tokenizer.

    python -m tools.export --ckpt out/ --format hf          # -> out/hf/, then in Python:
    AutoModelForCausalLM.from_pretrained("out/hf"); AutoTokenizer.from_pretrained("out/hf")

Why GPT-NeoX (transformers' GPTNeoXForCausalLM, no remote code): it is our block exactly when
configured as below. Rotary over the whole head (rotary_pct 1.0) with dimension i paired with
i + hs/2 (our layout, model.Rotary), base rope_base; pre-norm LayerNorm (eps 1e-5, our
nn.LayerNorm's); exact GELU ("gelu"); a sequential residual (use_parallel_residual false):
x + attn(ln_1(x)), then + mlp(ln_2(x)); an untied head (embed_out). Where NeoX has biases and
we have none (bias=False, our default) they are written as zeros, so they add nothing.
Two weights change shape: NeoX's fused query_key_value holds each head's q, k and v rows next
to each other, ours all q rows, then all k, then all v; the rows are reordered.

The input becomes NeoX's embed_in, an ordinary V x n_embd table. For every input kind it is
the same thing: the input module applied to every id, wte(0 .. V-1). For learned that is the
trained table; for the fixed codes (binary, affine, frozen) it is the lifted codebook R c(t);
for kronecker W kappa(t), its trained projection of the fixed byte code. The model card
(README.md in the folder) says which, and that such a table is derived, not trained: fine-tune
with the embedding frozen to keep the model what it was. A ternary body is refused: its
activations are quantised too, which NeoX's float Linears cannot express; so is frozen's code
head (head='codes'), whose bias per token NeoX's output layer lacks.
"""

import hashlib
import importlib.util
import inspect
import json
from pathlib import Path

import torch
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

from codes import code_bits
from model import frozen_dim
from tablefree.common import UserError, check_output, replace_folder
from tablefree.reports import json_report
from tablefree.packed import packed_ternary, tied_head
from tablefree.tokenizer import EOT, byte_to_unicode, parse_ranks


def input_table(model):
    """(V, n_embd): the model's input applied to every id, wte(0 .. V-1): the embedding table an
    engine (transformers' NeoX, llama.cpp) looks tokens up in. Trained only for 'learned'."""
    with torch.no_grad():
        return model.wte(torch.arange(model.config.vocab_size, device=model.ln_f.weight.device)[None])[0]


def bias_or_zeros(module, n):
    """module's bias, or zeros (n,) where it has none: NeoX and llama.cpp's gptneox always have one."""
    return module.bias if module.bias is not None else torch.zeros(n)


def spelled(token):
    """A token's bytes in GPT-2's byte-to-character spelling, as byte-level BPE vocabularies write them."""
    return "".join(BYTE_CHARS[b] for b in token)


BYTE_CHARS = byte_to_unicode()


def neox_weights(model):
    """{NeoX parameter name: float32 tensor} for a float-body GPT."""
    c = model.config
    hs = c.n_embd // c.n_head
    table = input_table(model)  # (V, n_embd)
    out = {"gpt_neox.embed_in.weight": table, "embed_out.weight": model.lm_head.weight,
           "gpt_neox.final_layer_norm.weight": model.ln_f.weight, "gpt_neox.final_layer_norm.bias": bias_or_zeros(model.ln_f, c.n_embd)}
    # our c_attn rows run (q/k/v, head, dim); NeoX's run (head, q/k/v, dim): the same rows, reordered
    order = torch.arange(3 * c.n_embd).view(3, c.n_head, hs).transpose(0, 1).reshape(-1)  # (3 n_embd,)
    for i, block in enumerate(model.h):
        p, attn, mlp = f"gpt_neox.layers.{i}.", block.attn, block.mlp
        out |= {p + "input_layernorm.weight": block.ln_1.weight, p + "input_layernorm.bias": bias_or_zeros(block.ln_1, c.n_embd),
                p + "post_attention_layernorm.weight": block.ln_2.weight,
                p + "post_attention_layernorm.bias": bias_or_zeros(block.ln_2, c.n_embd),
                p + "attention.query_key_value.weight": attn.c_attn.weight[order],
                p + "attention.dense.weight": attn.c_proj.weight,
                p + "mlp.dense_h_to_4h.weight": mlp.c_fc.weight, p + "mlp.dense_h_to_4h.bias": bias_or_zeros(mlp.c_fc, c.mlp_hidden()),
                p + "mlp.dense_4h_to_h.weight": mlp.c_proj.weight, p + "mlp.dense_4h_to_h.bias": bias_or_zeros(mlp.c_proj, c.n_embd)}
        if c.bias:  # NeoX's attention biases exist only when attention_bias is set
            out |= {p + "attention.query_key_value.bias": attn.c_attn.bias[order], p + "attention.dense.bias": attn.c_proj.bias}
    return {k: v.detach().float().contiguous() for k, v in out.items()}


def neox_config(config, eot_id):
    """config.json for GPTNeoXForCausalLM. The rotary keys are the spelling every transformers
    version reads (4.x directly; 5.x folds them into rope_parameters)."""
    return {"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "vocab_size": config.vocab_size,
            "hidden_size": config.n_embd, "num_hidden_layers": config.n_layer, "num_attention_heads": config.n_head,
            "intermediate_size": config.mlp_hidden(), "hidden_act": "gelu", "rotary_pct": 1.0,
            "rotary_emb_base": config.rope_base, "max_position_embeddings": config.block_size, "layer_norm_eps": 1e-5,
            "use_parallel_residual": False, "attention_bias": config.bias, "tie_word_embeddings": False,
            "attention_dropout": 0.0, "hidden_dropout": 0.0, "initializer_range": 0.02, "use_cache": True,
            "bos_token_id": eot_id, "eos_token_id": eot_id, "torch_dtype": "float32"}


def bpe_merges(ranks):
    """The (left, right) byte pieces each multi-byte token of a tiktoken rank table is merged
    from, in rank order: the token's bytes encoded by tiktoken's rule (repeatedly join the
    adjacent pair whose join has the lowest rank) with only the ranks below its own."""
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) < 2:
            continue
        parts = [token[i:i + 1] for i in range(len(token))]
        while len(parts) > 2:
            joins = [(ranks.get(a + b, rank), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
            best, i = min(joins)
            if best >= rank:
                break
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        if len(parts) != 2:
            raise UserError(f"token {token!r} (rank {rank}) is not a merge of two lower-ranked tokens; this rank "
                            f"table is not a byte-level BPE that a tokenizer.json can express")
        merges.append(tuple(parts))
    return merges


def hf_tokenizer(state):
    """A `tokenizers` Tokenizer that encodes as a checkpoint's tokenizer state does with tiktoken
    (tokenizer.load_encoding): the same split pattern, GPT-2's byte-to-character map, the same
    ids, merges recovered from the ranks, and a word that is itself a token taken whole
    (ignore_merges), as tiktoken does."""
    ranks, pattern, eot = parse_ranks(state["ranks"].encode()), state["info"]["pattern"], state["info"]["eot_id"]
    vocab = {spelled(token): rank for token, rank in ranks.items()} | {EOT: eot}  # added tokens keep their id
    merges = [(spelled(a), spelled(b)) for a, b in bpe_merges(ranks)]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(EOT, special=True, normalized=False)])
    return tok


def model_card(ckpt, config, description, eot):
    """README.md of the folder: what the model is, and how its input table was made."""
    settings = ckpt.get("settings", {})
    return f"""---
library_name: transformers
tags: [tablefree, gpt-neox]
---
# tablefree GPT, input `{config.input}`

Trained with tablefree (a from-scratch GPT without a trainable input table), exported to
transformers' GPTNeoXForCausalLM: {config.n_layer} layers, n_embd {config.n_embd}, {config.n_head} heads,
context {config.block_size}, vocabulary {config.vocab_size:,}, {ckpt.get('iter_num', 0):,} training steps on
`{settings.get('dataset', '?')}`.

## The input embedding (`gpt_neox.embed_in`)

This model's input: {description}

Unless the input is `learned`, this table is **derived, not trained**: it is the model's input
interface applied once, at export, to every token id 0 .. V-1. For the fixed codes (`binary`,
`affine`, `frozen`) it is the lifted codebook R c(t), which no training step ever changed; for
`kronecker` it is the trained projection W times the fixed byte code of each token. Fine-tune
with `model.gpt_neox.embed_in.weight.requires_grad_(False)` to keep it what it was in training.
The settings it was made from (tablefree's GPTConfig):

```json
{json.dumps(ckpt["model_config"], indent=2)}
```

The codes: A. Bochkov, "Language Models Without a Trainable Input Embedding Table: Learning from
Fixed Minimal Binary Token Codes" (2026, arXiv:2605.09751); Kronecker Embeddings (2026,
arXiv:2605.29459).

## What GPT-NeoX computes here

Rotary over the whole head (GPT-NeoX's rotate-half layout), LayerNorm eps 1e-5, exact GELU, a
sequential residual, an untied output head; biases this model lacks are zeros. The tokenizer
is our byte-level BPE, encoding as tiktoken does; end of text is id {eot}.

tablefree.json lists the sha256 of every file here: `python -m tools.export --verify FOLDER` (in a
tablefree checkout) checks that none has changed since the export.
"""


def remote_card(ckpt, fields):
    """README.md of the remote-code folder: what the input and head are, what is frozen, the papers, how to load."""
    frozen = {"learned": "nothing at the input: the table is trained", "binary": "the input: the id's bits, no table",
              "affine": "the input: the id's bits through a fixed affine map over GF(2) (A and b stored)",
              "kronecker": "the byte x position code (the projection W is trained)",
              "frozen": "the input: sign bits of a learned table's top principal components, stored as bits"}[fields["input"]]
    body = ("BitNet b1.58 ternary Linears (weights stored at 2 bits with one scale each, activations quantised to "
            "int8 per token)" if fields["body"] == "ternary" else "float")
    head = {"untied": "a trained V x n_embd projection", "tied": "the input table, tied",
            "codes": "the frozen codes read back: logits = (W h) C^T / sqrt(D) + b, W and b trained"}[fields["head"]]
    return f"""---
library_name: transformers
tags: [tablefree]
---
# tablefree GPT: input `{fields['input']}`, head `{fields['head']}`, body `{fields['body']}`

Trained with tablefree (a from-scratch GPT without a trainable input table): {fields['n_layer']} layers, n_embd
{fields['n_embd']}, {fields['n_head']} heads, context {fields['block_size']}, vocabulary {fields['vocab_size']:,},
{ckpt.get('iter_num', 0):,} training steps on `{ckpt.get('settings', {}).get('dataset', '?')}`.

- Frozen: {frozen}.
- Head: {head}.
- Body: {body}.

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)  # modeling_tablefree.py
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)  # transformers 5 reads the config first
```

tablefree.json lists the sha256 of every file here: the model checks them when it loads from this
folder, and `python -m tools.export --verify FOLDER` (in a tablefree checkout) checks them without
loading. modeling_tablefree.py imports torch and transformers only (written for transformers 5.24). The codes: A. Bochkov, "Language Models
Without a Trainable Input Embedding Table: Learning from Fixed Minimal Binary Token Codes" (2026,
arXiv:2605.09751); frozen sign-PCA codes read back as the head, with a ternary body: the frozen-code
paper (one table of codes in and out, as in Gemma 3 270M's tied table); Kronecker Embeddings (2026,
arXiv:2605.29459).
"""


HF_FILES = ("model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
            "special_tokens_map.json", "README.md", "modeling_tablefree.py", "tablefree.json")  # all it may replace
EXPORT = "python -m tools.export"  # the mark of tablefree.json, the file that makes a folder ours (common.mark)
MODELING = Path(__file__).with_name("modeling_tablefree.py")  # the remote code, copied into the folder


def neox_cannot(config):
    """Why GPT-NeoX cannot hold this model ('' when it can)."""
    if config.head == "codes":
        return "its frozen codes are read back as its head, with a bias per token, which NeoX's output layer lacks"
    if config.body != "float":
        return f"its {config.body} body quantises its activations, which NeoX's float Linears cannot express"
    return ""


def remote_config(config, eot):
    """config.json of the remote-code folder: modeling_tablefree.TablefreeConfig's fields and auto_map."""
    bits = {"binary": code_bits(config.vocab_size) + config.extra_bits, "affine": code_bits(config.vocab_size) +
            config.extra_bits, "frozen": frozen_dim(config)}.get(config.input, 0)
    head = "codes" if config.head == "codes" else "tied" if config.tie_weights else "untied"
    return {"architectures": ["TablefreeForCausalLM"], "model_type": "tablefree",
            "auto_map": {"AutoConfig": "modeling_tablefree.TablefreeConfig",
                         "AutoModelForCausalLM": "modeling_tablefree.TablefreeForCausalLM"},
            "vocab_size": config.vocab_size, "block_size": config.block_size, "n_layer": config.n_layer,
            "n_head": config.n_head, "n_embd": config.n_embd, "mlp_hidden": config.mlp_hidden(), "bias": config.bias,
            "input": config.input, "head": head, "body": config.body, "bits": bits, "lift": config.lift,
            "code_values": config.code_values, "pos_dim": config.pos_dim, "rope_base": config.rope_base,
            "bos_token_id": eot, "eos_token_id": eot, "torch_dtype": "float32",
            "manifest": "tablefree.json"}  # so a folder that lost it is refused (modeling_tablefree.verify_folder)


def remote_weights(model, ckpt):
    """{name: tensor} of the remote-code folder, in model.py's names: a float body's state dict, or a
    ternary body's packed file (each ternary weight as `<layer>.packed`, 2 bits, and `<layer>.gamma`)."""
    if model.config.body == "float":
        return {k: v.contiguous() for k, v in model.state_dict().items() if k not in tied_head(model.config)}
    contents = packed_ternary(model, ckpt)
    weights = dict(contents["model"])
    for name, layer in contents["ternary"].items():
        weights |= {f"{name}.packed": layer["packed"], f"{name}.gamma": layer["gamma"].float().reshape(())}
    return {k: v.contiguous() for k, v in weights.items()}


def neox_head(config, where):
    """Refuse a model whose head GPT-NeoX's output layer (transformers' and llama.cpp's) cannot hold."""
    if config.head == "codes":
        raise UserError(f"the model reads its frozen codes back as its head (head='codes'), with a bias per token, "
                        f"which GPT-NeoX's output layer in {where} lacks; export --format ternary (a ternary body) or "
                        f"sample it with sample.py")


def export_hf(model, ckpt, out, flag="--out", remote=False, force=False):
    """Write the transformers folder `out` whole, or leave any old one as it was; refuse a folder
    that holds anything else (a run, a dataset), naming `flag`, the option that chose out. GPT-NeoX
    where it holds the model (no remote code); else, or when asked (remote), tablefree's own
    modelling file (trust_remote_code). Returns (out, the line saying which and why)."""
    if importlib.util.find_spec("safetensors") is None:  # checked before anything is written
        raise UserError("--format hf needs the safetensors package: pip install -r requirements-extras.txt")
    cannot = neox_cannot(model.config)
    out = check_output(out, flag, own=HF_FILES, marked=("tablefree.json", EXPORT))
    edited = [] if force else changed_since(out)
    if edited:  # a file of ours the user changed (the model card) is theirs now: never replaced without a word
        raise UserError(f"{out / edited[0]} was changed since tools.export wrote it"
                        f"{f' (and {len(edited) - 1} more)' if len(edited) > 1 else ''}; copy it elsewhere to keep "
                        f"it, then export again with --force to replace it")
    write = write_remote_folder if cannot or remote else write_folder
    replace_folder(out, lambda tmp: (write(model, ckpt, tmp), write_manifest(tmp)))
    if cannot or remote:
        why = f"GPT-NeoX cannot hold it: {cannot}" if cannot else "asked with --remote_code"
        return out, f"a tablefree folder with its own modelling file (load with trust_remote_code=True): {why}"
    return out, "a GPT-NeoX folder (transformers loads it without remote code)"


def verify(folder):
    """`python -m tools.export --verify FOLDER`: every file an hf export wrote is still the one it wrote
    (tablefree.json's sha256), and nothing is missing or added; the one line that says so, or a UserError."""
    folder = Path(folder)
    try:
        sums = json.loads((folder / "tablefree.json").read_text())["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        raise UserError(f"{folder} has no readable tablefree.json, so it is not a folder tools.export wrote (or that "
                        f"file is damaged); export it again") from None
    changed = [name for name, digest in sums.items()
               if not (folder / name).is_file() or hashlib.sha256((folder / name).read_bytes()).hexdigest() != digest]
    added = sorted(f.name for f in folder.iterdir() if f.name not in sums and f.name != "tablefree.json")
    if changed or added:
        raise UserError(f"{folder} is not as tools.export wrote it: {', '.join(changed[:3]) or 'nothing'} changed or "
                        f"missing, {', '.join(added[:3]) or 'nothing'} added; export it again")
    return f"{folder}: all {len(sums)} files are the ones tools.export wrote (sha256 in tablefree.json)"


def changed_since(folder):
    """The files of an earlier export in folder whose bytes are not those its tablefree.json lists (a user's
    edit); [] for a new folder, or one without a readable manifest (check_output has judged it already)."""
    try:
        sums = json.loads((Path(folder) / "tablefree.json").read_text())["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [name for name, digest in sums.items() if (Path(folder) / name).is_file()
            and hashlib.sha256((Path(folder) / name).read_bytes()).hexdigest() != digest]


def write_manifest(tmp):
    """tablefree.json: our mark (a later export may replace the folder, nothing else may) and the sha256
    of every other file in it, so a changed byte anywhere can be found."""
    sums = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(tmp.iterdir()) if f.is_file()}
    (tmp / "tablefree.json").write_bytes(json_report(EXPORT, {"sha256": sums}))


def write_folder(model, ckpt, tmp):
    """The GPT-NeoX folder's files, into tmp."""
    config, eot = model.config, ckpt["tokenizer"]["info"]["eot_id"]
    write_weights(tmp, neox_weights(model))
    (tmp / "config.json").write_text(json.dumps(neox_config(config, eot), indent=2))
    write_tokenizer(tmp, ckpt, config, eot)
    description = inspect.getdoc(type(model.wte)).split("\n\n")[0]  # the input module's own summary
    (tmp / "README.md").write_text(model_card(ckpt, config, description, eot))


def write_remote_folder(model, ckpt, tmp):
    """The remote-code folder's files, into tmp: modeling_tablefree.py beside the weights it reads."""
    config, eot = model.config, ckpt["tokenizer"]["info"]["eot_id"]
    write_weights(tmp, remote_weights(model, ckpt))
    (tmp / "config.json").write_text(json.dumps(remote_config(config, eot), indent=2))
    (tmp / "modeling_tablefree.py").write_bytes(MODELING.read_bytes())
    write_tokenizer(tmp, ckpt, config, eot)
    (tmp / "README.md").write_text(remote_card(ckpt, remote_config(config, eot)))


def write_weights(tmp, weights):
    from safetensors.torch import save  # optional: export_hf has checked it is there

    # written by Python, not the library's Rust writer, so a full disk is an OSError like any other write's
    (tmp / "model.safetensors").write_bytes(save(weights, metadata={"format": "pt"}))


def write_tokenizer(tmp, ckpt, config, eot):
    """tokenizer.json and its configs, and the generation config (end of text is eot)."""
    (tmp / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": eot, "eos_token_id": eot, "pad_token_id": eot}, indent=2))
    hf_tokenizer(ckpt["tokenizer"]).save(str(tmp / "tokenizer.json"))
    special = {"bos_token": EOT, "eos_token": EOT, "unk_token": EOT}
    (tmp / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", **special, "model_max_length": config.block_size,
         "add_prefix_space": False, "clean_up_tokenization_spaces": False}, indent=2))
    (tmp / "special_tokens_map.json").write_text(json.dumps(special, indent=2))
