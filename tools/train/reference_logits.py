#!/usr/bin/env python3
"""PyTorch reference logits for a shipped NAM56R checkpoint (bf16 or NVFP4), the oracle
of the C++ engine on the bundled specialist.

    python3 tools/train/reference_logits.py --model DIR --ids IDS.json --out OUT.safetensors

Loads DIR/config.json + DIR/model.safetensors into tools/train's PyTorch NAM56R in float32
(TF32 off): bf16 tensors are widened exactly; NVFP4 linears in ModelOpt's layout
(`weight` uint8 [N, K/2], two E2M1 codes per byte, element 2i in the low nibble;
`weight_scale` E4M3 [N, K/16]; `weight_scale_2` f32; grouped experts suffix the expert
index: weight<e>, weight_scale<e>, weight_scale_2<e>) are dequantized as
e2m1 x (e4m3 x weight_scale_2), ModelOpt's order of products (spec nvfp4.md). So the
reference runs the very weights the engine runs, and any difference is the engine's
arithmetic, not quantization. Writes `ids` I32 [T] and `logits` F32 [T, vocab_size] for
each sequence of IDS.json (a list of id lists), or of each --text file encoded by HF
`tokenizers` with --tokenizer (its post-processor puts BOS first), cut to --max-tokens:
tensors ids_<i> and logits_<i>."""

import argparse
import json
import os
import re
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import nam56r_torch as nt  # noqa: E402
import st_io  # noqa: E402

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def e4m3_table():
    out = np.zeros(256, dtype=np.float32)
    for b in range(256):
        s, e, m = b >> 7, (b >> 3) & 15, b & 7
        if e == 15 and m == 7:
            v = float("nan")
        elif e == 0:
            v = m / 8.0 * 2.0 ** -6
        else:
            v = (1 + m / 8.0) * 2.0 ** (e - 7)
        out[b] = -v if s else v
    return out


def read_raw(path):
    """name -> (dtype string, shape, raw bytes) for every tensor (float8 included)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        out[name] = (e["dtype"], e["shape"], data[a:b])
    return out


def to_tensor(dtype, shape, raw):
    if dtype == "BF16":
        return torch.from_numpy(np.frombuffer(raw, dtype=np.int16).copy()).view(torch.bfloat16).float().reshape(shape)
    npdt = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32, "U8": np.uint8}[dtype]
    t = torch.from_numpy(np.frombuffer(raw, dtype=npdt).copy()).reshape(shape)
    return t.float() if dtype in ("F32", "F16") else t


def load_state(model_dir):
    raw = read_raw(os.path.join(model_dir, "model.safetensors"))
    lut, e4 = np.asarray(E2M1, dtype=np.float32), e4m3_table()
    state, nvfp4 = {}, 0
    for name, (dt, shape, b) in raw.items():
        if re.search(r"\.(weight_scale|weight_scale_2|input_scale)\d*$", name):
            continue
        w = re.search(r"\.weight(\d*)$", name)  # grouped experts: weight<e>, weight_scale<e>, weight_scale_2<e>
        base, e = (name[: w.start()], w.group(1)) if w else (None, "")
        if base and dt == "U8" and base + ".weight_scale" + e in raw:
            codes = np.frombuffer(b, dtype=np.uint8).reshape(shape)
            N, K = shape[0], shape[1] * 2
            vals = np.empty((N, K), dtype=np.float32)
            vals[:, 0::2] = lut[codes & 15]
            vals[:, 1::2] = lut[codes >> 4]
            sdt, sshape, sb = raw[base + ".weight_scale" + e]
            assert sdt == "F8_E4M3", (name, sdt)
            scale = e4[np.frombuffer(sb, dtype=np.uint8)].reshape(sshape)
            s2 = np.frombuffer(raw[base + ".weight_scale_2" + e][2], dtype=np.float32)[0]
            block = (scale * s2).astype(np.float32)  # ModelOpt: fp8 scale x per-tensor scale first
            vals = (vals.reshape(N, K // 16, 16) * block[:, :, None]).reshape(N, K)
            state[name] = torch.from_numpy(vals)
            nvfp4 += 1
        else:
            state[name] = to_tensor(dt, shape, b)
    return state, nvfp4


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", help="JSON list of id lists")
    ap.add_argument("--text", action="append", default=[], help="or: text files, encoded with --tokenizer (BOS first)")
    ap.add_argument("--tokenizer")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    with open(os.path.join(a.model, "config.json")) as f:
        cfg = json.load(f)
    model = nt.NAM56R(cfg)
    state, nvfp4 = load_state(a.model)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        sys.exit("state mismatch: missing %s unexpected %s" % (missing[:5], unexpected[:5]))
    model = model.to(a.device).eval()
    if a.ids:
        with open(a.ids) as f:
            seqs = json.load(f)
    else:
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(a.tokenizer)
        seqs = []
        for path in a.text:
            with open(path, encoding="utf-8") as f:
                seqs.append(tok.encode(f.read()).ids[: a.max_tokens])
    out = {}
    with torch.no_grad():
        for i, ids in enumerate(seqs):
            x = torch.tensor([ids], device=a.device)
            out["ids_%d" % i] = torch.tensor(ids, dtype=torch.int32)
            out["logits_%d" % i] = model(x)["logits"][0].float().cpu().contiguous()
    st_io.save(out, a.out, metadata={"model": os.path.basename(os.path.normpath(a.model)),
                                    "nvfp4_tensors": str(nvfp4), "oracle": "tools/train/nam56r_torch.py float32"})
    print("%s: %d NVFP4 tensors dequantized, %d sequences -> %s" % (a.model, nvfp4, len(seqs), a.out))


if __name__ == "__main__":
    main()
