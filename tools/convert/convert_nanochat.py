#!/usr/bin/env python3
"""nanochat checkpoint -> slm directory (config.json + safetensors), spec nam56r.md §4.2.

Input: a checkpoint directory holding model_{step:06d}.pt (a plain state_dict) and
meta_{step:06d}.json (its "model_config" = the GPTConfig kwargs), or the model_*.pt file
itself. Output: config.json = {"model_type": "nanochat", <every GPTConfig field>} and
model.safetensors (sharded above --max-shard-size) with the state-dict names unchanged
except for a stripped torch.compile `_orig_mod.` prefix; dtypes are kept. Rotary tables
are not saved by nanochat; any that appear are dropped.

Usage: convert_nanochat.py SRC OUT_DIR [--step N] [--max-shard-size 5GB] [--overwrite]
"""

import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ckpt_io import ConversionError, lenient_torch_load, parse_size, strip_wrappers, write_checkpoint_dir  # noqa: E402

ROTARY_NAMES = ("cos", "sin", "inv_freq", "cos_cached", "sin_cached")


def build_parser():
    p = argparse.ArgumentParser(description="Convert a nanochat checkpoint to an slm directory.",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("src", help="checkpoint directory (model_*.pt + meta_*.json) or a model_NNNNNN.pt file")
    p.add_argument("out", help="output directory")
    p.add_argument("--step", type=int, default=None, help="step to convert (default: the largest in SRC)")
    p.add_argument("--max-shard-size", default="5GB", help="shard the safetensors above this size")
    p.add_argument("--overwrite", action="store_true", help="replace an existing converted checkpoint in OUT")
    return p


def locate(src, step):
    """-> (model .pt path, meta .json path, step)."""
    if os.path.isfile(src):
        m = re.fullmatch(r"model_(\d+)\.pt", os.path.basename(src))
        if not m:
            raise ConversionError("%s: expected a file named model_NNNNNN.pt" % src)
        step = int(m.group(1))
        d = os.path.dirname(os.path.abspath(src))
        return src, os.path.join(d, "meta_%06d.json" % step), step
    if not os.path.isdir(src):
        raise ConversionError("%s: no such file or directory" % src)
    steps = sorted(int(m.group(1)) for m in (re.fullmatch(r"model_(\d+)\.pt", f) for f in os.listdir(src)) if m)
    if not steps:
        raise ConversionError("%s: no model_NNNNNN.pt" % src)
    if step is None:
        step = steps[-1]
    elif step not in steps:
        raise ConversionError("%s: no model_%06d.pt (steps present: %s)" % (src, step, steps))
    return os.path.join(src, "model_%06d.pt" % step), os.path.join(src, "meta_%06d.json" % step), step


def convert(argv):
    """Run one conversion; raises ConversionError. Returns (config, tensor names)."""
    import torch

    flags = build_parser().parse_args(argv)
    max_shard = parse_size(flags.max_shard_size)
    model_path, meta_path, step = locate(flags.src, flags.step)
    if not os.path.isfile(meta_path):
        raise ConversionError("%s: missing (it holds model_config, the GPTConfig kwargs)" % meta_path)
    with open(meta_path) as f:
        meta = json.load(f)
    model_config = meta.get("model_config") if isinstance(meta, dict) else None
    if not isinstance(model_config, dict) or not model_config:
        raise ConversionError("%s: no \"model_config\" object" % meta_path)
    if "model_type" in model_config and model_config["model_type"] != "nanochat":
        raise ConversionError("%s: model_config has model_type %r" % (meta_path, model_config["model_type"]))

    raw = lenient_torch_load(model_path)
    if isinstance(raw, dict) and "model" in raw and isinstance(raw["model"], dict):
        raw = raw["model"]
    if not isinstance(raw, dict):
        raise ConversionError("%s: expected a state_dict, got %s" % (model_path, type(raw).__name__))
    tensors, dropped = {}, []
    for raw_name, t in raw.items():
        name = strip_wrappers(raw_name)
        if name.split(".")[-1] in ROTARY_NAMES or name.startswith("rotary"):
            dropped.append(raw_name)
            continue
        if not isinstance(t, torch.Tensor) or type(t) not in (torch.Tensor, torch.nn.Parameter):
            raise ConversionError("entry '%s' is a %s, not a plain tensor" % (raw_name, type(t).__name__))
        if name in tensors:
            raise ConversionError("tensor '%s' appears twice (second time as '%s')" % (name, raw_name))
        tensors[name] = t.detach()
    if dropped:
        print("dropped rotary buffers: %s" % ", ".join(dropped), file=sys.stderr)

    # light cross-checks: the loader does the full ones
    wte = tensors.get("transformer.wte.weight")
    if wte is None:
        raise ConversionError("%s: no transformer.wte.weight (not a nanochat GPT state_dict?)" % model_path)
    n_embd, vocab, n_layer = model_config.get("n_embd"), model_config.get("vocab_size"), model_config.get("n_layer")
    if n_embd is not None and wte.shape[1] != n_embd:
        raise ConversionError("tensor 'transformer.wte.weight' has shape %s but model_config.n_embd = %d" %
                              (list(wte.shape), n_embd))
    if vocab is not None and wte.shape[0] < vocab:
        raise ConversionError("tensor 'transformer.wte.weight' has %d rows < model_config.vocab_size = %d" %
                              (wte.shape[0], vocab))
    blocks = {int(m.group(1)) for m in (re.match(r"transformer\.h\.(\d+)\.", n) for n in tensors) if m}
    if n_layer is not None and blocks and blocks != set(range(n_layer)):
        raise ConversionError("model_config.n_layer = %d but the state_dict has blocks %d..%d (%d blocks)" %
                              (n_layer, min(blocks), max(blocks), len(blocks)))

    config = {"model_type": "nanochat"}
    config.update(model_config)
    write_checkpoint_dir(flags.out, config, tensors, max_shard, overwrite=flags.overwrite,
                         metadata={"source": os.path.abspath(model_path), "step": step,
                                   "converter": "convert_nanochat.py"})
    print("wrote %s: %d tensors (step %d)" % (flags.out, len(tensors), step), file=sys.stderr)
    return config, sorted(tensors)


def main(argv=None):
    try:
        convert(sys.argv[1:] if argv is None else argv)
    except ConversionError as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
