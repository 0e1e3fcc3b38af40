"""Shared helpers of the slm checkpoint converters (tools/convert/).

- lenient_torch_load: torch.load of a training pickle whose classes (Megatron enums,
  cppmega configs) may not be importable here: a missing class becomes an inert stub.
- write_checkpoint_dir: config.json + model.safetensors, or Hugging Face style shards
  (model-0000i-of-0000n.safetensors + model.safetensors.index.json) above a size limit.
"""

import json
import os
import pickle
import re
import sys
import types


class ConversionError(Exception):
    """A checkpoint that cannot be converted; the message says which tensor / key and why."""


def warn(msg):
    print("warning: " + msg, file=sys.stderr)


def info(msg):
    print(msg, file=sys.stderr)


# ---------------------------------------------------------------------------------------
# Lenient unpickling


class _StubBase:
    """Stand-in for a class that cannot be imported. Keeps whatever state it is given."""

    def __init__(self, *args, **kwargs):
        self._stub_args = args
        self.__dict__.update(kwargs)

    def __setstate__(self, state):
        if isinstance(state, dict):
            self.__dict__.update(state)
        elif isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
            if isinstance(state[0], dict):
                self.__dict__.update(state[0])
            self.__dict__.update(state[1])
        else:
            self._stub_state = state

    def __repr__(self):
        return "<unimportable %s>" % type(self).__qualname__


_stub_cache = {}


def _stub_class(module, name):
    key = (module, name)
    if key not in _stub_cache:
        _stub_cache[key] = type(name, (_StubBase,), {"__module__": "stub." + module, "_stub_of": module + "." + name})
    return _stub_cache[key]


class _LenientUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        try:
            return super().find_class(module, name)
        except (ImportError, AttributeError):
            return _stub_class(module, name)


_shim = types.ModuleType("slm_lenient_pickle")
_shim.Unpickler = _LenientUnpickler
_shim.Pickler = pickle.Pickler
_shim.load = lambda f, **kw: _LenientUnpickler(f, **kw).load()
_shim.loads = pickle.loads
_shim.dump = pickle.dump
_shim.dumps = pickle.dumps
_shim.__name__ = "slm_lenient_pickle"


def is_stub(obj):
    return isinstance(obj, _StubBase)


def lenient_torch_load(path):
    """torch.load(path) on CPU. Executes pickle code: only load checkpoints you trust."""
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=False, pickle_module=_shim)
    except Exception as e:  # noqa: BLE001 - re-raised with the file name
        raise ConversionError("%s: cannot unpickle (%s: %s). A checkpoint holding Transformer Engine "
                              "quantized tensors needs transformer_engine installed to load." %
                              (path, type(e).__name__, e)) from e


def args_to_dict(args):
    """Megatron's argparse.Namespace (or a stub of it) -> dict; None -> {}."""
    if args is None:
        return {}
    if isinstance(args, dict):
        return dict(args)
    d = getattr(args, "__dict__", None)
    if isinstance(d, dict):
        return {k: v for k, v in d.items() if not k.startswith("_stub")}
    raise ConversionError("checkpoint args are a %s, not a namespace" % type(args).__name__)


# ---------------------------------------------------------------------------------------
# Names


def strip_wrappers(name):
    """Drop DDP / Float16Module `module.` prefixes and torch.compile `_orig_mod.` components."""
    parts = name.split(".")
    while parts and parts[0] in ("module", "_orig_mod"):
        parts.pop(0)
    parts = [p for p in parts if p != "_orig_mod"]
    return ".".join(parts)


# ---------------------------------------------------------------------------------------
# Output


def parse_size(text):
    """'5GB', '500MB', '64KiB', '123' -> bytes (decimal units as HF; KiB/MiB/GiB binary)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?i?B?)\s*", str(text), re.IGNORECASE)
    if not m:
        raise ConversionError("bad size %r (examples: 5GB, 500MB, 1048576)" % text)
    num, unit = float(m.group(1)), m.group(2).upper()
    base = 1024 if "I" in unit else 1000
    power = {"": 0, "B": 0, "K": 1, "M": 2, "G": 3, "T": 4}[unit.replace("I", "").replace("B", "") or ""]
    size = int(num * base ** power)
    if size <= 0:
        raise ConversionError("size must be positive: %r" % text)
    return size


def tensor_nbytes(t):
    return t.numel() * t.element_size()


def write_checkpoint_dir(out_dir, config, tensors, max_shard_bytes, metadata=None, overwrite=False):
    """Write config.json and the tensors (name -> torch.Tensor, names sorted) as safetensors.

    One model.safetensors when the total fits in max_shard_bytes, else greedy shards in name
    order (a tensor larger than the limit gets a shard of its own) plus the HF index."""
    from safetensors.torch import save_file

    os.makedirs(out_dir, exist_ok=True)
    existing = [f for f in os.listdir(out_dir) if f.endswith(".safetensors") or f in
                ("config.json", "model.safetensors.index.json")]
    if existing and not overwrite:
        raise ConversionError("%s already holds %s; pass --overwrite to replace" % (out_dir, ", ".join(sorted(existing))))
    for f in existing:
        os.remove(os.path.join(out_dir, f))

    names = sorted(tensors)
    shards, cur, cur_bytes = [], [], 0
    for n in names:
        b = tensor_nbytes(tensors[n])
        if cur and cur_bytes + b > max_shard_bytes:
            shards.append(cur)
            cur, cur_bytes = [], 0
        cur.append(n)
        cur_bytes += b
    if cur or not shards:
        shards.append(cur)

    meta = {"format": "pt"}
    meta.update({k: str(v) for k, v in (metadata or {}).items()})

    def save(names_in_shard, path):
        # clone: split / stacked sources are views sharing storage, which save_file refuses
        part = {n: tensors[n].detach().contiguous().clone() for n in names_in_shard}
        save_file(part, path, metadata=meta)

    files = []
    if len(shards) == 1:
        save(shards[0], os.path.join(out_dir, "model.safetensors"))
        files.append("model.safetensors")
    else:
        weight_map = {}
        for i, s in enumerate(shards):
            fname = "model-%05d-of-%05d.safetensors" % (i + 1, len(shards))
            save(s, os.path.join(out_dir, fname))
            files.append(fname)
            for n in s:
                weight_map[n] = fname
        index = {"metadata": {"total_size": sum(tensor_nbytes(tensors[n]) for n in names)},
                 "weight_map": weight_map}
        with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f, indent=2, sort_keys=True)
            f.write("\n")
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    return files
