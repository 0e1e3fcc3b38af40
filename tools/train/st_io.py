"""Minimal safetensors reader / writer on torch + numpy (no `safetensors` package needed).

The format: 8-byte little-endian header length, a JSON header {name: {dtype, shape,
data_offsets}} (+ optional "__metadata__"), then the raw little-endian tensor bytes."""

import json
import struct

import numpy as np
import torch

_TO_ST = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.int64: "I64",
          torch.int32: "I32", torch.uint8: "U8", torch.int8: "I8", torch.float64: "F64"}
_FROM_ST = {v: k for k, v in _TO_ST.items()}


def _raw_bytes(t):
    t = t.detach().cpu().contiguous()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def save(tensors, path, metadata=None):
    """tensors: name -> torch.Tensor (written in name order)."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        b = _raw_bytes(t)
        header[name] = {"dtype": _TO_ST[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load(path):
    """name -> torch.Tensor (CPU)."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        dt = _FROM_ST[e["dtype"]]
        raw = data[base + a:base + b]
        if dt in (torch.bfloat16, torch.float16):
            t = torch.from_numpy(np.frombuffer(raw, dtype=np.int16).copy()).view(dt)
        else:
            npdt = {torch.float32: np.float32, torch.int64: np.int64, torch.int32: np.int32, torch.uint8: np.uint8,
                    torch.int8: np.int8, torch.float64: np.float64}[dt]
            t = torch.from_numpy(np.frombuffer(raw, dtype=npdt).copy())
        out[name] = t.reshape(e["shape"])
    return out
