"""The packed ternary file (`python -m tools.export` on a ternary run): each ternary weight at 2
bits, the rest as trained (floats in float16, the frozen codes as bits), its config and tokenizer,
and the sha256 of its weights. A dict of tensors and plain values like a checkpoint, so the one
loader reads it (checkpoint.load_checkpoint); inference_model builds either kind for inference.
"""

import sys

import torch

from model import GPT, BitLinear, GPTConfig, Rotary, absmean_ternary, make_input
from tablefree import kernel
from tablefree.checkpoint import build_model, weights_misfit
from tablefree.checksum import SHA256_COVERS, described, tensors_sha256, weights_id
from tablefree.common import UserError
from tablefree.ternary import PackedTernaryLinear, pack_ternary

FORMAT = "tablefree-ternary-1"


def packed_ternary(model, ckpt):
    """The packed file's contents for a trained model with a ternary body (tools/export.py writes it;
    build_packed reads it). source_crc32: the checkpoint's weights_id, which its GGUF exports share."""
    if model.config.body != "ternary":
        raise UserError(f"the checkpoint's body is {model.config.body!r}; only a ternary body packs to 2 bits "
                        f"(train one: python train.py ... --body=ternary)")
    layers, packed_names = {}, set()
    for name, module in model.named_modules():
        if isinstance(module, BitLinear):
            w_t, gamma = absmean_ternary(module.weight.detach().float())
            layers[name] = {"packed": pack_ternary(w_t), "in_features": module.in_features, "gamma": gamma}
            packed_names.add(f"{name}.weight")
    params = {name for name, _ in model.named_parameters()}
    rest = {name: (t.half() if name in params and t.dim() >= 2 and t.is_floating_point() else t)
            for name, t in model.state_dict().items() if name not in packed_names | tied_head(model.config)}
    return {"format": FORMAT, "model_config": ckpt["model_config"], "tokenizer": ckpt["tokenizer"],
            "settings": ckpt.get("settings", {}), "iter_num": ckpt.get("iter_num", 0), "model": rest, "ternary": layers,
            "sha256": tensors_sha256(rest, layers, described(ckpt)), "sha256_covers": SHA256_COVERS,
            "source_crc32": weights_id(ckpt)}


def tied_head(config):
    """A tied head's name, whose weight a packed file stores once, as the input table's."""
    return {"lm_head.weight"} if config.tie_weights else set()


def build_packed(config, ckpt):
    """A GPT from a packed ternary export whose body never exists in float: the model is built
    on the meta device (shapes, no memory), each ternary Linear is replaced by a packed one from
    its 2-bit weights (kept at 2 bits for the C kernel, else unpacked to int8; one line on stderr
    says which), and the rest is loaded in float32 from the file."""
    with torch.device("meta"):
        model = GPT(config)
    model.wte = make_input(config)  # real modules for the parts with derived (unsaved) buffers
    model.rotary = Rotary(config.n_embd // config.n_head, config.block_size, config.rope_base)
    rest = {k: v.float() if v.dtype == torch.float16 else v for k, v in ckpt["model"].items()}
    for name, layer in ckpt["ternary"].items():
        parent, child = name.rsplit(".", 1)
        setattr(model.get_submodule(parent), child, PackedTernaryLinear(
            layer["packed"], layer["in_features"], layer["gamma"], bias=rest.pop(f"{name}.bias", None), lib=kernel.kernel()))
    int8_buffers = {f"{name}.{buffer}" for name in ckpt["ternary"] for buffer in ("weight", "codes", "gamma")}
    if set(rest) & int8_buffers:
        raise ValueError("the packed file holds a float copy of a ternary layer's weight")
    missing, unexpected = model.load_state_dict(rest, strict=False, assign=True)
    if unexpected or any(k not in int8_buffers | tied_head(config) for k in missing):
        raise ValueError(f"the packed file does not fit its config (missing {missing[:3]}, unexpected {unexpected[:3]})")
    if config.tie_weights:
        model.lm_head.weight = model.wte.weight
    if any(t.is_meta for t in [*model.parameters(), *model.buffers()]):
        raise ValueError("the packed file leaves part of the model without weights")
    print(f"ternary matmul: {kernel.describe()}", file=sys.stderr)
    return model


def inference_model(ckpt, kernels=False):
    """The GPT a checkpoint or a packed export describes, for sampling, evaluation and export. A float
    model's Linears stay nn.Linear unless kernels (sample.py --kernels, the benchmarks): then one-row
    inference runs in the C kernel where there is one (kernel.fast_linears). A packed model's run
    there always: that is what it is packed for."""
    if "ternary" not in ckpt:
        model = build_model(ckpt)
        return kernel.fast_linears(model) if kernels else model
    try:
        return kernel.fast_linears(build_packed(GPTConfig(**ckpt["model_config"]), ckpt))
    except (TypeError, ValueError, RuntimeError, KeyError) as e:
        raise UserError(weights_misfit(e)) from None
