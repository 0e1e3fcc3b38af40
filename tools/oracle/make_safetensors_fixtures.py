"""Oracle fixtures for slm's foundation tests, made with the reference implementations.

  python3 make_safetensors_fixtures.py OUT_DIR

writes into OUT_DIR:
  all_dtypes.safetensors / .json   one tensor per dtype the installed torch + safetensors
                                   can save, written by safetensors.torch.save_file (the
                                   Rust writer); the JSON lists every value exactly
                                   (float.hex) so slm's decoders are checked against torch.
  conversions.safetensors / .json  float32 inputs (boundaries, ties, specials, random over
                                   all magnitudes) and the codes torch's casts give for
                                   bf16, f16, float8_e4m3fn, float8_e5m2 (and e8m0 when
                                   supported): an oracle for slm's encoders.
  sharded_llama/                   a tiny LlamaForCausalLM saved by transformers'
                                   save_pretrained with a small max_shard_size: shards,
                                   model.safetensors.index.json, config.json; plus
                                   sums.json with every tensor's float64 sum.
"""
import json
import math
import os
import sys

import torch
import safetensors
from safetensors.torch import save_file

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
g = torch.Generator().manual_seed(20261121)


def hexlist(t):
    return [float(v).hex() for v in t.double().flatten().tolist()]


# ---- all dtypes --------------------------------------------------------------------
specials = [0.0, -0.0, 1.0, -2.5, 0.1, 448.0, -448.0, 3.0e-3, 1.0e-7, 65504.0, float("inf"), float("-inf"),
            float("nan")]
base = torch.tensor(specials + torch.randn(19, generator=g).mul(10).tolist(), dtype=torch.float64)  # 32 values
candidates = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
    "F8_E8M0": getattr(torch, "float8_e8m0fnu", None),
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "U16": getattr(torch, "uint16", None), "U32": getattr(torch, "uint32", None), "U64": getattr(torch, "uint64", None),
    "BOOL": torch.bool,
}
tensors, note, skipped = {}, {}, {}
ints = torch.tensor([0, 1, -1, 127, -128, 255, 7, -7] * 4, dtype=torch.int64)
for tag, dt in candidates.items():
    if dt is None:
        skipped[tag] = "torch has no such dtype"
        continue
    try:
        if dt.is_floating_point:
            src = base.abs().clamp(min=2.0**-120) if tag == "F8_E8M0" else base
            t = src.to(torch.float32).to(dt) if dt != torch.float64 else src.clone()
            vals = hexlist(t.float() if dt != torch.float64 else t)
        elif dt == torch.bool:
            t = (ints % 3 == 0)
            vals = [int(v) for v in t.tolist()]
        else:
            info = torch.iinfo(dt)
            t = ints.clamp(info.min, info.max).to(dt) if info.min < 0 else ints.abs().clamp(0, info.max).to(dt)
            vals = [int(v) for v in t.to(torch.int64).tolist()]
        t = t.reshape(4, 8)
        save_file({"probe": t}, os.path.join(out, "probe.tmp"))  # does safetensors accept it?
        tensors["t_" + tag] = t
        note["t_" + tag] = {"dtype": tag, "shape": [4, 8], "values": vals}
    except Exception as e:  # noqa: BLE001 - record why a dtype is missing
        skipped[tag] = repr(e)
if os.path.exists(os.path.join(out, "probe.tmp")):
    os.remove(os.path.join(out, "probe.tmp"))
meta = {"format": "pt", "producer": "slm tools/oracle"}
save_file(tensors, os.path.join(out, "all_dtypes.safetensors"), metadata=meta)
json.dump({"oracle": f"safetensors {safetensors.__version__} save_file, torch {torch.__version__}",
           "metadata": meta, "tensors": note, "skipped": skipped},
          open(os.path.join(out, "all_dtypes.json"), "w"), indent=1)

# ---- conversions -----------------------------------------------------------------------
def f32_from_bits(bits):
    return torch.tensor(bits, dtype=torch.int64).to(torch.int32).view(torch.float32)

inputs = []
for target in [torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2]:
    # every representable value and the midpoints between neighbours (ties) +- 1 ulp
    n = 1 << (16 if target in (torch.bfloat16, torch.float16) else 8)
    codes = torch.arange(n, dtype=torch.int64)
    if n == 1 << 16:
        vals = codes.to(torch.int16).view(target).float()
    else:
        vals = codes.to(torch.uint8).view(target).float()
    vals = vals[torch.isfinite(vals)].unique()
    mids = (vals[1:].double() + vals[:-1].double()) / 2
    mids = mids.float()
    step = 4096 if n == 1 << 16 else 1  # a sample of the 16-bit formats' ties, all of the 8-bit ones
    for m in mids[::step].tolist():
        x = torch.tensor([m], dtype=torch.float32)
        inputs += [m, torch.nextafter(x, torch.tensor([math.inf])).item(), torch.nextafter(x, torch.tensor([-math.inf])).item()]
    inputs += vals[::step].tolist()
bits = torch.randint(0, 2**32, (20000,), generator=g, dtype=torch.int64)
inputs += f32_from_bits(bits).tolist()
inputs += [0.0, -0.0, math.inf, -math.inf, math.nan, 464.0, 464.00003, 480.0, 57344.0, 61440.0, 65520.0, 1e-40, -1e-45]
x = torch.tensor(inputs, dtype=torch.float32)
conv = {"input_f32": x}
for name, dt in [("bf16", torch.bfloat16), ("f16", torch.float16)]:
    conv[name] = x.to(dt).view(torch.int16)
for name, dt in [("e4m3", torch.float8_e4m3fn), ("e5m2", torch.float8_e5m2)]:
    conv[name] = x.to(dt).view(torch.uint8)
if hasattr(torch, "float8_e8m0fnu"):
    try:
        pos = x.abs().nan_to_num(nan=1.0, posinf=1.0).clamp(min=2.0**-126)
        conv["e8m0_input"] = pos
        conv["e8m0"] = pos.to(torch.float8_e8m0fnu).view(torch.uint8)
    except Exception as e:  # noqa: BLE001
        print("e8m0 conversion unavailable:", e)
save_file({k: v.contiguous() for k, v in conv.items()}, os.path.join(out, "conversions.safetensors"))
json.dump({"oracle": f"torch {torch.__version__} Tensor.to(dtype) (non-saturating fp8 casts)",
           "tensors": {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in conv.items()},
           "note": "bf16/f16 codes stored as int16 bit patterns, fp8 as uint8; e8m0 (if present) converts e8m0_input"},
          open(os.path.join(out, "conversions.json"), "w"), indent=1)

# ---- sharded checkpoint -------------------------------------------------------------------
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False)
torch.manual_seed(7)
model = LlamaForCausalLM(cfg).to(torch.bfloat16)
d = os.path.join(out, "sharded_llama")
model.save_pretrained(d, max_shard_size="12KB", safe_serialization=True)
sums = {k: {"sum": float(v.double().sum().item()), "shape": list(v.shape), "dtype": str(v.dtype)}
        for k, v in model.state_dict().items()}
import transformers  # noqa: E402
json.dump({"oracle": f"transformers {transformers.__version__} save_pretrained(max_shard_size='12KB')", "tensors": sums},
          open(os.path.join(d, "sums.json"), "w"), indent=1)
print("files:", sorted(os.listdir(out)), sorted(os.listdir(d)))
print("skipped dtypes:", skipped)
