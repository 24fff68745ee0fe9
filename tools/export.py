"""Export a trained checkpoint: to a Hugging Face transformers folder, a packed ternary file, or GGUF.

    python -m tools.export --ckpt out/                      # -> out/hf/, loads with AutoModelForCausalLM (hf.py)
    python -m tools.export --ckpt out-ternary/              # a body='ternary' run -> out-ternary/model.ternary.pt
    python sample.py --ckpt out-ternary/model.ternary.pt    # integer CPU inference from it
    python -m tools.export --ckpt out/ --format gguf --gguf_type Q8_0   # -> out/model.q8_0.gguf for llama.cpp

--format picks the kind; by default a float body goes to hf, a ternary body to ternary.

gguf: one file llama.cpp loads (architecture gptneox, the tokenizer inside); a float body as
F32, F16 or Q8_0, a ternary body as TQ2_0 or TQ1_0; what is stored and how is in gguf.py.

hf: GPT-NeoX weights (model.safetensors), config.json, generation_config.json, the tokenizer
as tokenizer.json, and a model card; how our GPT maps onto NeoX is in hf.py. A model NeoX cannot
hold (the frozen code head, a ternary body), or any with --remote_code, gets tablefree's own
modelling file instead (tools/modeling_tablefree.py, loaded with trust_remote_code=True): the
frozen codes as bits, a ternary body at 2 bits a weight; a line says which folder was written.

ternary: the packed BitNet b1.58 model. Each ternary Linear of the body becomes 2 bits a weight
(ternary.pack_ternary) and one float32 scale gamma; every float matrix outside the body (the
output head or the code head's projection, a learned input table, a Kronecker projection) is
stored in float16; norms, biases and the input code's buffers (nothing for binary, A and b for
affine, the codes as bits for frozen, V x D / 8 bytes, read as bits, never as a float table) as
trained; with the config and the tokenizer. It is a dict of tensors and plain
values, read with torch.load(weights_only=True) like a checkpoint, so sample.py and evaluate.py load
it as one: checkpoint.build_model gives a GPT whose ternary layers hold int8 weights and
multiply in integers (ternary.PackedTernaryLinear: at 2 bits in the C kernel, tablefree/kernel.py, or as int8).
"""

from tablefree.common import interrupt_quietly
interrupt_quietly(__name__, "export.py")  # is one line, not a traceback

import re
import sys
from pathlib import Path

import torch

from tablefree.checkpoint import find_checkpoint, load_checkpoint
from tablefree.common import ArgumentParser, UserError, check_output, user_errors, write_atomic, writing
from tablefree.packed import FORMAT, inference_model, packed_ternary
from tools.gguf import FLOAT_TYPES, TERNARY_TYPES, write_gguf
from tools.hf import export_hf, verify

# What an earlier export of each file format starts with: torch.save's zip whose first entry, the
# pickle, names our format; a GGUF header whose first keys name our input.
OURS = {"ternary": re.compile(rb"PK\x03\x04.{0,1000}?" + FORMAT.encode(), re.S),
        "gguf": re.compile(rb"GGUF.{0,3000}?tablefree\.input", re.S)}


def main(argv=None):
    p = ArgumentParser(prog="python -m tools.export", description=__doc__.split("\n\n")[0])
    p.add_argument("--ckpt", default="out", help="a run directory or a checkpoint file")
    p.add_argument("--format", choices=("hf", "ternary", "gguf"), help="default: hf for a float body, ternary for "
                   "a ternary one")
    p.add_argument("--gguf_type", choices=FLOAT_TYPES + TERNARY_TYPES, help="gguf: the body's weights (default: F32 "
                   "for a float body, TQ2_0 for a ternary one)")
    p.add_argument("--remote_code", action="store_true", help="hf: write tablefree's own modelling file even where "
                   "GPT-NeoX holds the model (loaded with trust_remote_code=True)")
    p.add_argument("--out", help="the folder (hf) or file (ternary, gguf) to write (default: hf/, model.ternary.pt "
                   "or model.<type>.gguf beside the checkpoint)")
    p.add_argument("--force", action="store_true", help="hf: replace the files of an earlier export that were "
                   "changed since it wrote them (the model card a user edited); without it they are kept and the "
                   "export refused")
    p.add_argument("--verify", metavar="FOLDER", help="check an hf export's files against its tablefree.json, and "
                   "write nothing")
    with user_errors("export.py"):
        args = p.parse_args(argv)
        if args.verify:
            print(verify(args.verify))
            return
        ckpt = load_checkpoint(args.ckpt)
        model = inference_model(ckpt)
        fmt = args.format or ("hf" if model.config.body == "float" else "ternary")
        gguf_type = args.gguf_type or ("F32" if model.config.body == "float" else "TQ2_0")
        if args.remote_code and fmt != "hf":
            raise UserError(f"--remote_code is for --format hf, not {fmt}; add --format hf or drop --remote_code")
        if args.gguf_type and fmt != "gguf":
            raise UserError(f"--gguf_type is for --format gguf, not {fmt}; add --format gguf or drop --gguf_type")
        names = {"hf": "hf", "ternary": "model.ternary.pt", "gguf": f"model.{gguf_type.lower()}.gguf"}
        out = Path(args.out) if args.out else find_checkpoint(args.ckpt).parent / names[fmt]
        with writing(out, "tools.export"):  # one writer of the folder or file, before it is checked
            if fmt == "hf":
                print(f"{out}: {export_hf(model, ckpt, out, remote=args.remote_code, force=args.force)[1]}", file=sys.stderr)
            else:
                check_output(out, "--out", ours=OURS[fmt])
            if fmt == "gguf":
                write_gguf(model, ckpt, out, gguf_type)
            elif fmt == "ternary":
                contents = packed_ternary(model, ckpt)  # refuses a float body before anything is written
                write_atomic(out, lambda f: torch.save(contents, f))
    size = sum(f.stat().st_size for f in out.iterdir()) if out.is_dir() else out.stat().st_size
    print(f"wrote {out}: {size / 1e6:.2f} MB", file=sys.stderr)


if __name__ == "__main__":
    main()
