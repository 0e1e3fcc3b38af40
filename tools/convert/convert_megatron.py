#!/usr/bin/env python3
"""Megatron NAM56R checkpoint -> the canonical slm directory (config.json + safetensors).

Inputs (spec nam56r.md §4.1):
  * a `save` root holding latest_checkpointed_iteration.txt (or pick one with --iteration),
  * an iter_NNNNNNN/ directory in torch_dist format (.metadata, __*.distcp, common.pt),
  * an iter_NNNNNNN/ directory or model_optim_rng.pt file in the legacy torch format
    (one model-parallel rank only: TP=1, PP=1, EP=1).
Output: the format of include/slm/models/nam56r/model.hpp (see tools/convert/README.md): normalized
Megatron key names, dtypes kept, every dimension explicit in config.json.

Usage: convert_megatron.py SRC OUT_DIR [flags]; --help lists the flags and their defaults.
"""

import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ckpt_io import (ConversionError, args_to_dict, is_stub, lenient_torch_load, parse_size,  # noqa: E402
                     strip_wrappers, write_checkpoint_dir)

FORMAT_VERSION = 1
MODEL_PREFIXES = ("embedding.", "decoder.", "output_layer.", "mtp.")

# Production H200 NAM56R values (spec §1.2, §1.3), used where the checkpoint's args and
# tensors say nothing.
DEFAULTS = {
    "hidden_size": 4096, "num_layers": 52, "mtp_num_layers": 2,
    "layernorm_epsilon": 1e-5, "max_position_embeddings": 4096, "ffn_hidden_size": 21504,
    "num_attention_heads": 32, "q_lora_rank": 64, "kv_lora_rank": 64, "qk_head_dim": 64,
    "qk_pos_emb_head_dim": 64, "v_head_dim": 64, "rotary_base": 10000,
    "dsa_indexer_n_heads": 32, "dsa_indexer_head_dim": 64, "dsa_indexer_topk": 256,
    "num_moe_experts": 16, "moe_router_topk": 4, "moe_ffn_hidden_size": 896,
    "moe_shared_expert_intermediate_size": 1024, "moe_router_score_function": "softmax",
    "mamba_state_dim": 128, "mamba_head_dim": 64, "mamba_expand": 2, "mamba_num_groups": 8,
    "mamba3_mimo_rank": 4, "m2rnn_num_heads": 51, "m2rnn_conv_kernel": 4,
}

# config key -> Megatron argument names that may hold it (first non-None wins)
ARG_NAMES = {
    "hidden_size": ["hidden_size"], "num_layers": ["num_layers"], "mtp_num_layers": ["mtp_num_layers"],
    "layernorm_epsilon": ["norm_epsilon", "layernorm_epsilon"],
    "max_position_embeddings": ["max_position_embeddings", "seq_length"],
    "ffn_hidden_size": ["ffn_hidden_size"], "num_attention_heads": ["num_attention_heads"],
    "q_lora_rank": ["q_lora_rank"], "kv_lora_rank": ["kv_lora_rank"], "qk_head_dim": ["qk_head_dim"],
    "qk_pos_emb_head_dim": ["qk_pos_emb_head_dim"], "v_head_dim": ["v_head_dim"],
    "rotary_base": ["rotary_base"],
    "dsa_indexer_n_heads": ["dsa_indexer_n_heads", "dsa_indexer_heads"],
    "dsa_indexer_head_dim": ["dsa_indexer_head_dim", "dsa_indexer_dim"],
    "dsa_indexer_topk": ["dsa_indexer_topk", "dsa_topk", "dsa_indexer_top_k"],
    "num_moe_experts": ["num_moe_experts", "num_experts"], "moe_router_topk": ["moe_router_topk"],
    "moe_ffn_hidden_size": ["moe_ffn_hidden_size"],
    "moe_shared_expert_intermediate_size": ["moe_shared_expert_intermediate_size"],
    "moe_router_score_function": ["moe_router_score_function"],
    "mamba_state_dim": ["mamba_state_dim"], "mamba_head_dim": ["mamba_head_dim"],
    "mamba_num_groups": ["mamba_num_groups"], "mamba_expand": ["mamba_expand"],
    "padded_vocab_size": ["padded_vocab_size"],
}

FLOAT_DTYPES = ("torch.float32", "torch.bfloat16", "torch.float16")
FP8_DTYPE_NAMES = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu")


class Report:
    """Warnings and notes of one conversion, printed as they come and kept for the caller."""

    def __init__(self, quiet=False, silent=False):
        self.warnings, self.notes, self.quiet, self.silent = [], [], quiet or silent, silent

    def warn(self, msg):
        self.warnings.append(msg)
        if not self.silent:
            print("warning: " + msg, file=sys.stderr)

    def note(self, msg):
        self.notes.append(msg)
        if not self.quiet:
            print(msg, file=sys.stderr)


def int_list(text):
    text = text.strip()
    if text.lower() == "auto":
        return "auto"
    if text == "":
        return []
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError("expected comma-separated integers or 'auto', got %r" % text)


def build_parser():
    p = argparse.ArgumentParser(
        description="Convert a Megatron NAM56R checkpoint to the canonical slm directory.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("src", help="save root (with latest_checkpointed_iteration.txt), iter_NNNNNNN/ dir "
                               "(torch_dist or legacy), or a model_optim_rng.pt file")
    p.add_argument("out", help="output directory")
    p.add_argument("--iteration", type=int, default=None, help="iteration to take from a save root (default: latest)")
    p.add_argument("--max-shard-size", default="5GB", help="shard the safetensors above this size")
    p.add_argument("--overwrite", action="store_true", help="replace an existing converted checkpoint in OUT")
    g = p.add_argument_group("cppmega settings that live only in environment variables at training time")
    g.add_argument("--hybrid-pattern", default="AEMEAEMEAEMR", help="CPPMEGA pattern (tiled to num_layers)")
    g.add_argument("--dsa-a-layer-ranks", type=int_list, default=[1, 2, 3, 5, 6, 7, 9, 10, 11],
                   help="CPPMEGA_DSA_A_LAYER_RANKS: 0-based A-ranks that are DSA; 'auto' = the A layers "
                        "that carry indexer weights")
    g.add_argument("--r-layer-numbers", type=int_list, default=[12, 24, 36, 48],
                   help="CPPMEGA_R_LAYER_INDICES: 1-based M2RNN layer numbers; 'auto' = the layers "
                        "that carry M2RNN weights")
    g.add_argument("--dsa-index-cache", choices=["off", "causal"], default="causal",
                   help="CPPMEGA_INDEX_CACHE=1 -> causal (the documented production launches), 0 -> off")
    g.add_argument("--dsa-index-cache-full-ranks", type=int_list, default=[0, 3, 6],
                   help="with causal: DSA ranks that run their own indexer")
    g.add_argument("--vocab-size", type=int, default=None,
                   help="tokenizer vocabulary (logit columns); default: args.vocab_size, else the padded size")
    g.add_argument("--ngram-orders", default="2,3", help="n-gram hash orders (CPPMEGA_NGRAM_HASH_ORDERS)")
    g.add_argument("--ngram-heads", type=int, default=8, help="n-gram hash heads per order")
    g.add_argument("--ngram-table-size", type=int, default=500000, help="requested n-gram table size")
    g.add_argument("--structure-components", default="core", help="structure embedding components")
    g.add_argument("--mamba3-a-activation", choices=["softplus", "heavy_tail"], default="softplus",
                   help="Mamba-3 A activation (softplus = pinned mamba 31f3d7b, NAM56R)")
    g.add_argument("--mamba3-rope-fraction", type=float, default=0.5)
    g.add_argument("--mamba3-a-floor", type=float, default=1e-4)
    g.add_argument("--m2rnn-k-head-dim", type=int, default=64)
    g.add_argument("--m2rnn-v-head-dim", type=int, default=16)
    g.add_argument("--missing-mla-norm", choices=["unit", "none"], default="unit",
                   help="an MLA layer (not DSA) with no input norm weight - a fused down-projection whose "
                        "layer_norm_weight the dist-ckpt writer dropped (spec §2.2, §7.5) - gets a unit "
                        "weight (unit) or none (the loader then feeds h unnormalized); warned either way")
    p.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                   help="override one config value (e.g. --set qk_head_dim=64); checked against the tensors")
    p.add_argument("--quiet", action="store_true")
    return p


# ---------------------------------------------------------------------------------------
# Locating and loading


def _read_latest(root, iteration):
    if iteration is not None:
        d = os.path.join(root, "iter_%07d" % iteration)
    else:
        with open(os.path.join(root, "latest_checkpointed_iteration.txt")) as f:
            text = f.read().strip()
        d = os.path.join(root, "release" if text == "release" else "iter_%07d" % int(text))
    if not os.path.isdir(d):
        raise ConversionError("%s: iteration directory %s does not exist" % (root, d))
    return d


def locate(src, iteration=None):
    """-> ("torch_dist", iter_dir) or ("legacy", model_optim_rng.pt path)."""
    if os.path.isfile(src):
        parent = os.path.dirname(os.path.abspath(src))
        if os.path.basename(parent).startswith("mp_rank_"):
            _check_single_rank(os.path.dirname(parent))
        return "legacy", src
    if not os.path.isdir(src):
        raise ConversionError("%s: no such file or directory" % src)
    if os.path.exists(os.path.join(src, "latest_checkpointed_iteration.txt")) or (
            iteration is not None and os.path.isdir(os.path.join(src, "iter_%07d" % iteration))):
        return locate(_read_latest(src, iteration))
    if os.path.exists(os.path.join(src, ".metadata")):
        return "torch_dist", src
    for name in ("model_optim_rng.pt", "model_rng.pt"):
        if os.path.isfile(os.path.join(src, name)):
            return "legacy", os.path.join(src, name)
    rank = _check_single_rank(src)
    if rank:
        for name in ("model_optim_rng.pt", "model_rng.pt"):
            if os.path.isfile(os.path.join(src, rank, name)):
                return "legacy", os.path.join(src, rank, name)
        raise ConversionError("%s: no model_optim_rng.pt" % os.path.join(src, rank))
    raise ConversionError("%s: not a Megatron checkpoint (no latest_checkpointed_iteration.txt, .metadata, "
                          "mp_rank_* or model_optim_rng.pt)" % src)


def _check_single_rank(iter_dir):
    ranks = sorted(d for d in os.listdir(iter_dir) if d.startswith("mp_rank_"))
    if len(ranks) > 1:
        raise ConversionError(
            "%s: legacy checkpoint with %d model-parallel ranks (%s): only TP=1, PP=1, EP=1 is supported. "
            "Re-save it with --ckpt-format torch_dist (keys are global there) or merge the ranks with "
            "Megatron's tools/checkpoint first." % (iter_dir, len(ranks), ", ".join(ranks[:4]) + (
                ", ..." if len(ranks) > 4 else "")))
    return ranks[0] if ranks else None


def load_torch_dist(iter_dir, report):
    """Model tensors of a DCP directory (optimizer state and ShardedObjects are not read)."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    reader = dcp.FileSystemReader(iter_dir)
    md = reader.read_metadata()
    want, skipped = {}, 0
    for key, m in md.state_dict_metadata.items():
        if (not isinstance(m, TensorStorageMetadata) or not key.startswith(MODEL_PREFIXES)
                or "_extra_state" in key):
            skipped += 1
            continue
        want[key] = torch.empty(tuple(m.size), dtype=m.properties.dtype)
    if not want:
        raise ConversionError("%s: the DCP metadata lists no model tensors (keys starting with %s)" %
                              (iter_dir, ", ".join(MODEL_PREFIXES)))
    try:
        dcp.load(want, storage_reader=reader, no_dist=True)
    except TypeError:  # a torch without the no_dist argument detects the missing process group itself
        dcp.load(want, storage_reader=dcp.FileSystemReader(iter_dir))
    report.note("%s: read %d model tensors (skipped %d optimizer/object entries)" % (iter_dir, len(want), skipped))
    args, iteration = None, None
    common = os.path.join(iter_dir, "common.pt")
    if os.path.exists(common):
        c = lenient_torch_load(common)
        if isinstance(c, dict):
            args, iteration = c.get("args"), c.get("iteration")
    else:
        report.warn("%s: no common.pt, so no training args: dimensions come from the tensors and defaults" % iter_dir)
    return want, args, iteration


def load_legacy(path, report):
    state = lenient_torch_load(path)
    if not isinstance(state, dict):
        raise ConversionError("%s: expected a dict with a 'model' entry, got %s" % (path, type(state).__name__))
    if "model" in state:
        model = state["model"]
    elif "model0" in state:
        if "model1" in state:
            raise ConversionError("%s: virtual-pipeline checkpoint (model0, model1, ...): not supported" % path)
        model = state["model0"]
    else:
        raise ConversionError("%s: no 'model' entry (keys: %s)" % (path, ", ".join(map(str, list(state)[:10]))))
    if not isinstance(model, dict):
        raise ConversionError("%s: state['model'] is a %s, not a state dict" % (path, type(model).__name__))
    report.note("%s: %d model entries" % (path, len(model)))
    return dict(model), state.get("args"), state.get("iteration")


# ---------------------------------------------------------------------------------------
# Name normalization


def normalize_names(raw, report, params_dtype):
    """Strip wrappers, drop _extra_state, check value types, restack experts."""
    import torch

    out = {}

    def put(name, t, origin):
        if name in out:
            raise ConversionError("tensor '%s' appears twice (second time from '%s')" % (name, origin))
        out[name] = t

    dropped = 0
    for raw_name, t in raw.items():
        name = strip_wrappers(raw_name)
        if name.endswith("_extra_state") or ("._extra_state" in name):
            dropped += 1
            continue
        if name.endswith(".inv_freq") or name.startswith("rotary_pos_emb."):
            dropped += 1
            continue
        t = _as_plain_tensor(name, t, report, params_dtype)
        m = re.fullmatch(r"(.*\.mlp\.experts)\.experts\.(linear_fc[12])\.weight", name)
        if m:
            if t.dim() != 3:
                raise ConversionError("stacked expert tensor '%s' has shape %s: expected [experts, rows, cols]" %
                                      (raw_name, list(t.shape)))
            for e in range(t.shape[0]):
                put("%s.%s.weight%d" % (m.group(1), m.group(2), e), t[e], raw_name)
            continue
        m = re.fullmatch(r"(.*\.mlp\.experts)\.local_experts\.(\d+)\.(linear_fc[12])\.weight", name)
        if m:
            put("%s.%s.weight%d" % (m.group(1), m.group(3), int(m.group(2))), t, raw_name)
            continue
        put(name, t, raw_name)
    if dropped:
        report.note("dropped %d _extra_state / rotary entries" % dropped)
    return out


def _as_plain_tensor(name, t, report, params_dtype):
    import torch

    if isinstance(t, torch.Tensor) and type(t) in (torch.Tensor, torch.nn.Parameter):
        if any(str(t.dtype).endswith(n) for n in FP8_DTYPE_NAMES) or (
                t.dtype == torch.uint8 and name.endswith("weight")):
            raise ConversionError(
                "tensor '%s' is %s %s: an FP8/MXFP8 (TE quantized) primary weight without its scales; "
                "cannot be dequantized here. Convert from a checkpoint saved with high-precision weights "
                "(or dequantize with transformer_engine first)." % (name, str(t.dtype), list(t.shape)))
        return t.detach()
    if isinstance(t, torch.Tensor) and callable(getattr(t, "dequantize", None)):
        dq = t.dequantize()
        if type(dq) not in (torch.Tensor, torch.nn.Parameter):
            dq = torch.Tensor(dq)
        dq = dq.detach().to(params_dtype)
        report.warn("tensor '%s': %s dequantized to %s" % (name, type(t).__name__, params_dtype))
        return dq
    kind = ("unpickled stand-in for %s" % t._stub_of) if is_stub(t) else type(t).__name__
    raise ConversionError("entry '%s' is not a plain tensor (%s): a TE quantized (MXFP8/FP8) weight or an "
                          "unknown object; install transformer_engine to dequantize it, or convert from a "
                          "high-precision checkpoint" % (name, kind))


def normalize_attention(state, cfg, report):
    """Fused q/kv down-projection -> split; split k/v up-projections -> interleaved kv_up."""
    import torch

    q_lora, kv_lora, rope = cfg["q_lora_rank"], cfg["kv_lora_rank"], cfg["qk_pos_emb_head_dim"]
    heads, nope, v = cfg["num_attention_heads"], cfg["qk_head_dim"], cfg["v_head_dim"]
    fused_layers = []
    for name in sorted(state):
        m = re.fullmatch(r"(.*)self_attention\.linear_qkv_down_proj\.weight", name)
        if not m:
            continue
        p = m.group(1)
        w = state.pop(name)
        if w.dim() != 2 or w.shape[0] != q_lora + kv_lora + rope:
            raise ConversionError(
                "tensor '%s' has shape %s: expected [q_lora_rank + kv_lora_rank + qk_pos_emb_head_dim = %d + %d + %d, "
                "hidden]" % (name, list(w.shape), q_lora, kv_lora, rope))
        for part in ("linear_q_down_proj", "linear_kv_down_proj"):
            if p + "self_attention.%s.weight" % part in state:
                raise ConversionError("layer '%s' has both the fused linear_qkv_down_proj and %s" % (p, part))
        state[p + "self_attention.linear_q_down_proj.weight"] = w[:q_lora]
        state[p + "self_attention.linear_kv_down_proj.weight"] = w[q_lora:]
        norm = state.pop(p + "self_attention.linear_qkv_down_proj.layer_norm_weight", None)
        if norm is not None:
            if p + "input_layernorm.weight" in state:
                raise ConversionError("layer '%s' has both linear_qkv_down_proj.layer_norm_weight and "
                                      "input_layernorm.weight" % p)
            state[p + "input_layernorm.weight"] = norm
        fused_layers.append(p)
    if fused_layers:
        report.note("split the fused linear_qkv_down_proj of %d layers" % len(fused_layers))
    for name in [n for n in state if n.endswith("self_attention.linear_qkv_down_proj.layer_norm_weight")]:
        raise ConversionError("'%s' without its linear_qkv_down_proj.weight" % name)

    for name in sorted(state):
        m = re.fullmatch(r"(.*)self_attention\.linear_k_up_proj\.weight", name)
        if not m:
            continue
        p = m.group(1) + "self_attention."
        k = state.pop(name)
        vname = p + "linear_v_up_proj.weight"
        if vname not in state:
            raise ConversionError("'%s' without '%s'" % (name, vname))
        vw = state.pop(vname)
        if p + "linear_kv_up_proj.weight" in state:
            raise ConversionError("'%s' exists next to linear_k_up_proj/linear_v_up_proj" % (p + "linear_kv_up_proj.weight"))
        if list(k.shape) != [heads * nope, kv_lora]:
            raise ConversionError("tensor '%s' has shape %s: expected [num_attention_heads * qk_head_dim = %d * %d, "
                                  "kv_lora_rank = %d]" % (name, list(k.shape), heads, nope, kv_lora))
        if list(vw.shape) != [heads * v, kv_lora]:
            raise ConversionError("tensor '%s' has shape %s: expected [num_attention_heads * v_head_dim = %d * %d, "
                                  "kv_lora_rank = %d]" % (vname, list(vw.shape), heads, v, kv_lora))
        if k.dtype != vw.dtype:
            raise ConversionError("'%s' is %s but '%s' is %s" % (name, k.dtype, vname, vw.dtype))
        # per head h: rows [h*(nope+v), h*(nope+v)+nope) = K-up block, then the V-up block
        kv = torch.cat([k.reshape(heads, nope, kv_lora), vw.reshape(heads, v, kv_lora)], dim=1)
        state[p + "linear_kv_up_proj.weight"] = kv.reshape(heads * (nope + v), kv_lora)
    for name in state:
        if name.endswith("self_attention.linear_v_up_proj.weight"):
            raise ConversionError("'%s' without its linear_k_up_proj.weight" % name)


# ---------------------------------------------------------------------------------------
# Pattern


def expand_pattern(pattern, depth):
    p = pattern.upper()
    for ch in p:
        if ch in "DG":
            raise ConversionError("hybrid pattern %r: '%s' (Gated DeltaNet) is not part of NAM56R" % (pattern, ch))
        if ch not in "AEMR|":
            raise ConversionError("hybrid pattern %r: unknown symbol %r (allowed A, E, M, R, |)" % (pattern, ch))
    if "|" in p:
        syms = p.replace("|", "")
        if len(syms) != depth:
            raise ConversionError("hybrid pattern %r has %d symbols but num_layers is %d (a pattern with '|' is "
                                  "not tiled)" % (pattern, len(syms), depth))
        return syms
    if not p:
        raise ConversionError("empty hybrid pattern")
    return "".join(p[i % len(p)] for i in range(depth))


def layer_kinds(symbols, dsa_ranks, r_numbers):
    n_a = symbols.count("A")
    for r in dsa_ranks:
        if not 0 <= r < n_a:
            raise ConversionError("dsa_a_layer_ranks: rank %d is out of range: the pattern has %d A layers" % (r, n_a))
    for n in r_numbers:
        if not 1 <= n <= len(symbols):
            raise ConversionError("r_layer_numbers: layer %d is out of range 1..%d" % (n, len(symbols)))
        if symbols[n - 1] not in "MR":
            raise ConversionError("r_layer_numbers: layer %d is an %s layer, not M/R" % (n, symbols[n - 1]))
    kinds, a_rank = [], 0
    for i, s in enumerate(symbols):
        if s == "A":
            kinds.append("dsa" if a_rank in dsa_ranks else "mla")
            a_rank += 1
        elif s == "E":
            kinds.append("moe")
        else:
            kinds.append("m2rnn" if (i + 1) in r_numbers else "mamba3")
    return kinds


def detect_layer_kind(state, prefix):
    has = lambda sub: any(n.startswith(prefix + sub) for n in state)  # noqa: E731
    if has("mixer.impl.in_proj.layer_norm_weight") or has("mixer.impl.B_norm_weight"):
        return "noconv"
    found = []
    if has("self_attention."):
        found.append("dsa" if has("self_attention.core_attention.indexer.") else "mla")
    if has("mlp.router."):
        found.append("moe")
    if has("mixer.impl.mixer."):
        found.append("mamba3")
    if has("mixer.impl.input_projection."):
        found.append("m2rnn")
    if len(found) != 1:
        return "+".join(found) if found else "empty"
    return found[0]


# ---------------------------------------------------------------------------------------
# Config


def _first_shape(state, pattern):
    rx = re.compile(pattern)
    for n in sorted(state):
        if rx.fullmatch(n):
            return n, list(state[n].shape)
    return None, None


def infer_from_tensors(state, flags):
    """Dimensions readable directly off tensor shapes: key -> (value, tensor name)."""
    inf = {}

    def take(key, pattern, fn):
        n, s = _first_shape(state, pattern)
        if n is not None:
            try:
                val = fn(s)
            except (IndexError, ZeroDivisionError):
                return
            if val is not None:
                inf[key] = (val, n)

    take("hidden_size", r"embedding\.word_embeddings\.weight", lambda s: s[1])
    take("padded_vocab_size", r"embedding\.word_embeddings\.weight", lambda s: s[0])
    layers = {int(m.group(1)) for m in (re.match(r"decoder\.layers\.(\d+)\.", n) for n in state) if m}
    if layers:
        inf["num_layers"] = (max(layers) + 1, "decoder.layers.%d.*" % max(layers))
        missing = sorted(set(range(max(layers) + 1)) - layers)
        if missing:
            raise ConversionError("the checkpoint has decoder.layers up to %d but none for layer indices %s "
                                  "(a pipeline-parallel shard?)" % (max(layers), missing[:10]))
    mtps = {int(m.group(1)) for m in (re.match(r"mtp\.layers\.(\d+)\.", n) for n in state) if m}
    inf["mtp_num_layers"] = (max(mtps) + 1 if mtps else 0, "mtp.layers.*")
    take("q_lora_rank", r".*self_attention\.linear_q_down_proj\.weight", lambda s: s[0])
    take("num_moe_experts", r".*mlp\.router\.weight", lambda s: s[0])
    take("moe_ffn_hidden_size", r".*mlp\.experts\.linear_fc1\.weight0", lambda s: s[0])
    take("moe_shared_expert_intermediate_size", r".*mlp\.shared_experts\.linear_fc1\.weight", lambda s: s[0])
    take("ffn_hidden_size", r"mtp\.layers\.\d+\.mtp_model_layer\.layers\.1\.mlp\.linear_fc1\.weight", lambda s: s[0])
    take("mamba_state_dim", r".*mixer\.impl\.mixer\.B_norm\.weight", lambda s: s[0])
    take("mamba_head_dim", r".*mixer\.impl\.mixer\.mimo_x", lambda s: s[2])
    take("mamba3_mimo_rank", r".*mixer\.impl\.mixer\.mimo_x", lambda s: s[1])
    take("m2rnn_num_heads", r".*mixer\.impl\.A_log", lambda s: s[0])
    take("m2rnn_conv_kernel", r".*mixer\.impl\.conv1d\.weight", lambda s: s[2])
    take("dsa_indexer_head_dim", r".*indexer\.linear_wk\.weight", lambda s: s[0])
    take("dsa_indexer_n_heads", r".*indexer\.linear_weights_proj\.weight", lambda s: s[0])
    if "hidden_size" in inf:
        d = inf["hidden_size"][0]
        take("mamba_expand", r".*mixer\.impl\.mixer\.out_proj\.weight",
             lambda s: s[1] // d if s[1] % d == 0 else None)
        # in_proj rows = 2 d_in + 2 R G N + 3 H + angles  ->  G
        n_in, s_in = _first_shape(state, r".*mixer\.impl\.mixer\.in_proj\.weight")
        _, s_x = _first_shape(state, r".*mixer\.impl\.mixer\.mimo_x")
        _, s_b = _first_shape(state, r".*mixer\.impl\.mixer\.B_norm\.weight")
        _, s_o = _first_shape(state, r".*mixer\.impl\.mixer\.out_proj\.weight")
        if s_in and s_x and s_b and s_o and len(s_x) == 3:
            H, R, N, d_in = s_x[0], s_x[1], s_b[0], s_o[1]
            angles = int(N * flags.mamba3_rope_fraction) // 2
            rest = s_in[0] - 2 * d_in - 3 * H - angles
            if rest > 0 and rest % (2 * R * N) == 0:
                inf["mamba_num_groups"] = (rest // (2 * R * N), n_in)
    return inf


def resolve_dims(state, args, flags, report):
    """Every numeric dimension: --set, else the checkpoint args, else the tensors, else the
    production default; args / --set values that contradict a tensor shape are errors."""
    inferred = infer_from_tensors(state, flags)
    overrides = {}
    for item in flags.set:
        if "=" not in item:
            raise ConversionError("--set %r: expected KEY=JSON" % item)
        k, v = item.split("=", 1)
        try:
            overrides[k.strip()] = json.loads(v)
        except json.JSONDecodeError:
            overrides[k.strip()] = v
    cfg, sources = {}, {}
    keys = list(DEFAULTS) + ["padded_vocab_size"]
    for key in keys:
        arg_val, arg_name = None, None
        for a in ARG_NAMES.get(key, []):
            if args.get(a) is not None:
                arg_val, arg_name = args[a], a
                break
        inf = inferred.get(key)
        if key in overrides:
            val, src = overrides[key], "--set"
        elif arg_val is not None:
            val, src = arg_val, "args." + arg_name
        elif inf is not None:
            val, src = inf[0], "tensor " + inf[1]
        elif key in DEFAULTS:
            val, src = DEFAULTS[key], "default"
        else:
            val, src = None, "absent"
        if inf is not None and val != inf[0] and key != "num_layers":
            raise ConversionError("%s = %r (from %s) but tensor '%s' says %r" % (key, val, src, inf[1], inf[0]))
        if key == "num_layers" and inf is not None and val != inf[0]:
            raise ConversionError("num_layers = %r (from %s) but the checkpoint holds decoder.layers 0..%d" %
                                  (val, src, inf[0] - 1))
        cfg[key], sources[key] = val, src
    if cfg["padded_vocab_size"] is None:
        raise ConversionError("tensor 'embedding.word_embeddings.weight' is missing")
    for key, val in cfg.items():
        if sources[key] == "default" and key in ("hidden_size", "num_layers", "num_attention_heads",
                                                 "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim",
                                                 "kv_lora_rank", "moe_router_topk", "dsa_indexer_topk"):
            report.warn("%s not in the checkpoint args: using the production value %r (checked against the "
                        "tensor shapes where they depend on it)" % (key, val))
    return cfg, sources


def build_config(state, args, flags, report):
    cfg, sources = resolve_dims(state, args, flags, report)

    # tokenizer vocabulary
    if flags.vocab_size is not None:
        cfg["vocab_size"], sources["vocab_size"] = flags.vocab_size, "--vocab-size"
    elif args.get("vocab_size") is not None:
        cfg["vocab_size"], sources["vocab_size"] = int(args["vocab_size"]), "args.vocab_size"
    else:
        cfg["vocab_size"], sources["vocab_size"] = cfg["padded_vocab_size"], "padded_vocab_size"
        report.warn("tokenizer vocab size unknown (no --vocab-size, no args.vocab_size): using the padded size "
                    "%d, so padding rows are not masked" % cfg["padded_vocab_size"])
    if not 0 < cfg["vocab_size"] <= cfg["padded_vocab_size"]:
        raise ConversionError("vocab_size %d must be in 1..padded_vocab_size (%d, rows of "
                              "embedding.word_embeddings.weight)" % (cfg["vocab_size"], cfg["padded_vocab_size"]))

    # features read from args that the canonical format cannot express
    if args.get("swiglu") or args.get("gated_linear_unit"):
        raise ConversionError("args.swiglu is set: NAM56R's canonical format has GELU experts/MLPs only")
    if args.get("squared_relu"):
        raise ConversionError("args.squared_relu is set: NAM56R's canonical format has GELU experts/MLPs only")
    if args.get("normalization") not in (None, "RMSNorm"):
        raise ConversionError("args.normalization = %r: the canonical format has RMSNorm only" % args["normalization"])
    if args.get("qk_layernorm"):
        raise ConversionError("args.qk_layernorm is set: MLA latent norms are not in the canonical format")
    if args.get("rotary_scaling_factor") not in (None, 1, 1.0):
        report.warn("args.rotary_scaling_factor = %r: the canonical format assumes plain RoPE (factor 1)" %
                    args["rotary_scaling_factor"])
    if cfg["moe_router_score_function"] not in ("softmax", "sigmoid"):
        raise ConversionError("moe_router_score_function %r: expected softmax or sigmoid" %
                              cfg["moe_router_score_function"])

    # pattern (settings from the environment at training time)
    depth = cfg["num_layers"]
    symbols = expand_pattern(flags.hybrid_pattern, depth)
    detected = [detect_layer_kind(state, "decoder.layers.%d." % i) for i in range(depth)]
    a_layers = [i for i, s in enumerate(symbols) if s == "A"]
    dsa_ranks = flags.dsa_a_layer_ranks
    if dsa_ranks == "auto":
        dsa_ranks = [r for r, i in enumerate(a_layers) if detected[i] == "dsa"]
        sources["dsa_a_layer_ranks"] = "auto (indexer weights)"
    r_numbers = flags.r_layer_numbers
    if r_numbers == "auto":
        r_numbers = [i + 1 for i, k in enumerate(detected) if k == "m2rnn"]
        sources["r_layer_numbers"] = "auto (M2RNN weights)"
    kinds = layer_kinds(symbols, dsa_ranks, r_numbers)
    for i, (want, got) in enumerate(zip(kinds, detected)):
        if got == "noconv":
            raise ConversionError("layer %d (decoder.layers.%d) holds a NoConvMamba3BCMixer (GB10 quarter profile, "
                                  "spec §2.5b): not expressible in the canonical format" % (i + 1, i))
        if want != got:
            hint = ""
            if {want, got} == {"mla", "dsa"}:
                hint = "; the checkpoint's DSA A-ranks are %s (pass --dsa-a-layer-ranks, or 'auto')" % (
                    ",".join(str(r) for r, j in enumerate(a_layers) if detected[j] == "dsa") or "none")
            elif {want, got} == {"mamba3", "m2rnn"}:
                hint = "; the checkpoint's M2RNN layers are %s (pass --r-layer-numbers, or 'auto')" % (
                    ",".join(str(j + 1) for j, k in enumerate(detected) if k == "m2rnn") or "none")
            raise ConversionError("layer %d (decoder.layers.%d): pattern %r with DSA ranks %s and R layers %s makes it "
                                  "%s, but its tensors are those of %s%s" % (
                                      i + 1, i, flags.hybrid_pattern, dsa_ranks, r_numbers, want, got, hint))
    hop = args.get("hybrid_override_pattern")
    if isinstance(hop, str) and hop:
        main = hop.split("/")[0].replace("|", "")
        ours = "".join({"A": "*", "E": "E", "M": "M", "R": "M"}[s] for s in symbols)
        if main.replace("D", "*") != ours:
            raise ConversionError("args.hybrid_override_pattern %r does not match --hybrid-pattern %r expanded to "
                                  "%d layers (%s)" % (hop, flags.hybrid_pattern, depth, ours))
    n_dsa = kinds.count("dsa")
    cache, full = flags.dsa_index_cache, list(flags.dsa_index_cache_full_ranks or [])
    if full == "auto":
        raise ConversionError("--dsa-index-cache-full-ranks does not take 'auto'")
    if n_dsa == 0:
        cache, full = "off", []
    if cache == "causal":
        for r in full:
            if not 0 <= r < n_dsa:
                raise ConversionError("dsa_index_cache_full_ranks: rank %d is out of range: there are %d DSA layers" %
                                      (r, n_dsa))
        if 0 not in full:
            raise ConversionError("dsa_index_cache_full_ranks must contain 0: a shared DSA layer reuses the top-k of "
                                  "the nearest preceding full one")
    else:
        full = []

    out = {"model_type": "nam56r", "format_version": FORMAT_VERSION,
           "vocab_size": cfg["vocab_size"], "padded_vocab_size": cfg["padded_vocab_size"],
           "hidden_size": cfg["hidden_size"], "num_layers": depth,
           "hybrid_pattern": flags.hybrid_pattern, "dsa_a_layer_ranks": sorted(dsa_ranks),
           "r_layer_numbers": sorted(r_numbers), "mtp_num_layers": cfg["mtp_num_layers"],
           "layernorm_epsilon": cfg["layernorm_epsilon"], "max_position_embeddings": cfg["max_position_embeddings"],
           "ffn_hidden_size": cfg["ffn_hidden_size"], "activation": "gelu"}
    for k in ("num_attention_heads", "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim",
              "v_head_dim", "rotary_base", "dsa_indexer_n_heads", "dsa_indexer_head_dim", "dsa_indexer_topk"):
        out[k] = cfg[k]
    out["dsa_index_cache"], out["dsa_index_cache_full_ranks"] = cache, sorted(full)
    for k in ("num_moe_experts", "moe_router_topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size",
              "moe_router_score_function", "mamba_state_dim", "mamba_head_dim", "mamba_expand", "mamba_num_groups",
              "mamba3_mimo_rank"):
        out[k] = cfg[k]
    out["mamba3_rope_fraction"] = flags.mamba3_rope_fraction
    out["mamba3_a_floor"] = flags.mamba3_a_floor
    out["mamba3_a_activation"] = flags.mamba3_a_activation
    out["m2rnn_k_head_dim"], out["m2rnn_v_head_dim"] = flags.m2rnn_k_head_dim, flags.m2rnn_v_head_dim
    out["m2rnn_num_heads"], out["m2rnn_conv_kernel"] = cfg["m2rnn_num_heads"], cfg["m2rnn_conv_kernel"]
    if any(n.startswith("embedding.cppmega_ngram_hash.") for n in state):
        orders = [int(x) for x in flags.ngram_orders.split(",")]
        _, s = _first_shape(state, r"embedding\.cppmega_ngram_hash\.unified_table\.weight")
        out["ngram_hash"] = {"orders": orders, "num_heads": flags.ngram_heads, "table_size": flags.ngram_table_size,
                             "embed_dim": s[1] if s and len(s) == 2 else None}
    else:
        out["ngram_hash"] = None
    if any(n.startswith("embedding.cppmega_structure.") for n in state):
        _, s = _first_shape(state, r"embedding\.cppmega_structure\.stacked_emb\.weight")
        out["structure_embedding"] = {"components": flags.structure_components,
                                      "bottleneck": s[1] if s and len(s) == 2 else None}
    else:
        out["structure_embedding"] = None
    if out["moe_router_topk"] > out["num_moe_experts"] and "moe" in kinds:
        raise ConversionError("moe_router_topk %d > num_moe_experts %d" % (out["moe_router_topk"], out["num_moe_experts"]))
    sources.update({k: "flag" for k in ("hybrid_pattern", "dsa_index_cache", "mamba3_rope_fraction", "mamba3_a_floor",
                                        "mamba3_a_activation", "m2rnn_k_head_dim", "m2rnn_v_head_dim")})
    sources.setdefault("dsa_a_layer_ranks", "flag")
    sources.setdefault("r_layer_numbers", "flag")
    return out, kinds, sources


# ---------------------------------------------------------------------------------------
# Expected tensors


def mla_keys(p, c, dsa):
    d, H = c["hidden_size"], c["num_attention_heads"]
    nope, rope, v = c["qk_head_dim"], c["qk_pos_emb_head_dim"], c["v_head_dim"]
    ql, kvl = c["q_lora_rank"], c["kv_lora_rank"]
    req = {p + "self_attention.linear_q_down_proj.weight": [ql, d],
           p + "self_attention.linear_q_up_proj.weight": [H * (nope + rope), ql],
           p + "self_attention.linear_kv_down_proj.weight": [kvl + rope, d],
           p + "self_attention.linear_kv_up_proj.weight": [H * (nope + v), kvl],
           p + "self_attention.linear_proj.weight": [d, H * v]}
    if dsa:
        nI, dI = c["dsa_indexer_n_heads"], c["dsa_indexer_head_dim"]
        ip = p + "self_attention.core_attention.indexer."
        req.update({ip + "linear_wq_b.weight": [nI * dI, ql], ip + "linear_wk.weight": [dI, d],
                    ip + "k_norm.weight": [dI], ip + "k_norm.bias": [dI], ip + "linear_weights_proj.weight": [nI, d]})
    opt = {p + "input_layernorm.weight": [d]}
    return req, opt


def expected_tensors(c, kinds):
    """-> (required name -> shape, optional name -> shape, int64 names)."""
    d, V = c["hidden_size"], c["padded_vocab_size"]
    req = {"embedding.word_embeddings.weight": [V, d], "decoder.final_norm.weight": [d], "output_layer.weight": [V, d]}
    opt, ints = {}, set()
    for i, kind in enumerate(kinds):
        p = "decoder.layers.%d." % i
        if kind in ("mla", "dsa"):
            r, o = mla_keys(p, c, kind == "dsa")
            req.update(r)
            opt.update(o)
        elif kind == "moe":
            E, fe, fs = c["num_moe_experts"], c["moe_ffn_hidden_size"], c["moe_shared_expert_intermediate_size"]
            req[p + "pre_mlp_layernorm.weight"] = [d]
            req[p + "mlp.router.weight"] = [E, d]
            (req if c["moe_router_score_function"] == "sigmoid" else opt)[p + "mlp.router.expert_bias"] = [E]
            for e in range(E):
                req[p + "mlp.experts.linear_fc1.weight%d" % e] = [fe, d]
                req[p + "mlp.experts.linear_fc2.weight%d" % e] = [d, fe]
            if fs:
                req[p + "mlp.shared_experts.linear_fc1.weight"] = [fs, d]
                req[p + "mlp.shared_experts.linear_fc2.weight"] = [d, fs]
        elif kind == "mamba3":
            N, P, G, R = c["mamba_state_dim"], c["mamba_head_dim"], c["mamba_num_groups"], c["mamba3_mimo_rank"]
            d_in = c["mamba_expand"] * d
            H = d_in // P
            angles = int(N * c["mamba3_rope_fraction"]) // 2
            q = p + "mixer.impl.mixer."
            req.update({p + "norm.weight": [d], p + "mixer.impl.pre_norm.weight": [d],
                        q + "in_proj.weight": [2 * d_in + 2 * R * G * N + 3 * H + angles, d],
                        q + "dt_bias": [H], q + "B_bias": [H, R, N], q + "C_bias": [H, R, N],
                        q + "B_norm.weight": [N], q + "C_norm.weight": [N],
                        q + "mimo_x": [H, R, P], q + "mimo_z": [H, R, P], q + "mimo_o": [H, R, P],
                        q + "D": [H], q + "out_proj.weight": [d, d_in]})
        elif kind == "m2rnn":
            K, Vh, H, kc = c["m2rnn_k_head_dim"], c["m2rnn_v_head_dim"], c["m2rnn_num_heads"], c["m2rnn_conv_kernel"]
            conv = 2 * K + Vh * H
            q = p + "mixer.impl."
            req.update({p + "norm.weight": [d], q + "input_projection.weight": [conv + H + Vh * H, d],
                        q + "A_log": [H], q + "dt_bias": [H], q + "conv1d.weight": [conv, 1, kc],
                        q + "conv1d.bias": [conv], q + "state_weight": [H, Vh, Vh], q + "D": [H, Vh],
                        q + "g_norm.weight": [Vh * H], q + "output_projection.weight": [d, Vh * H]})
    for k in range(c["mtp_num_layers"]):
        p = "mtp.layers.%d." % k
        req.update({p + "enorm.weight": [d], p + "hnorm.weight": [d], p + "eh_proj.weight": [d, 2 * d],
                    p + "final_layernorm.weight": [d]})
        r, o = mla_keys(p + "mtp_model_layer.layers.0.", c, False)
        req.update(r)
        opt.update(o)
        f = c["ffn_hidden_size"]
        m = p + "mtp_model_layer.layers.1.mlp."
        req.update({m + "linear_fc1.layer_norm_weight": [d], m + "linear_fc1.weight": [f, d],
                    m + "linear_fc2.weight": [d, f]})
    ng = c.get("ngram_hash")
    if ng:
        J = len(ng["orders"]) * ng["num_heads"]
        q = "embedding.cppmega_ngram_hash."
        req[q + "out_proj.weight"] = [d, J * ng["embed_dim"]]
        req[q + "hash_mults"] = [J, max(ng["orders"])]
        req[q + "hash_bias"] = [J]
        ints.update({q + "hash_mults", q + "hash_bias"})
        for b, shape in (("table_offsets", [J]), ("table_sizes_t", [J]), ("order_for_table", [J]),
                         ("order_mask", [max(ng["orders"]), J])):
            opt[q + b] = shape
        # unified_table rows = the sum of the J prime table sizes: checked in check_tensors
        req[q + "unified_table.weight"] = None
    st = c.get("structure_embedding")
    if st:
        q = "embedding.cppmega_structure."
        b = st["bottleneck"]
        req[q + "up_proj.weight"] = [d, b]
        if st["components"] == "core":
            req[q + "stacked_emb.weight"] = [9 + 16, b]
            req[q + "component_scales"] = [2]
        else:
            req[q + "stacked_emb.weight"] = None
            req[q + "component_scales"] = None
    return req, opt, ints


def check_tensors(state, cfg, kinds, flags, report):
    import torch

    req, opt, ints = expected_tensors(cfg, kinds)
    d = cfg["hidden_size"]
    # main-stack attention layers written without an input norm: declared in config.json,
    # since the loader never takes a missing norm tensor to mean "no norm"
    bare, mtp_bare = [], []  # main-stack layers, MTP depths
    # unit input norms for MLA layers that lost theirs (fused run saved by a dropping writer)
    for name in list(opt):
        if not name.endswith("input_layernorm.weight") or name in state:
            continue
        p = name[:-len("input_layernorm.weight")]
        layer = "MTP attention layer" if p.startswith("mtp.") else "MLA layer %s" % p.rstrip(".")
        if p + "self_attention.core_attention.indexer.linear_wk.weight" in state:
            report.note("DSA layer %s has no input norm (a --mla-down-proj-fusion run: fed unnormalized, spec §2.3)"
                        % p.rstrip("."))
            if p.startswith("decoder.layers."):
                bare.append(int(p.split(".")[2]))
            continue
        ref = state.get(p + "self_attention.linear_q_down_proj.weight")
        if flags.missing_mla_norm == "unit" and ref is not None:
            state[name] = torch.ones(d, dtype=ref.dtype)
            report.warn("%s has no input norm weight (fused down-projection whose layer_norm_weight was not saved, "
                        "spec §2.2/§7.5): wrote a unit %s; the trained weight is lost" % (layer, name))
        else:
            report.warn("%s has no input norm weight (spec §2.2/§7.5): left without one, the loader will feed h "
                        "unnormalized" % layer)
            if p.startswith("decoder.layers."):
                bare.append(int(p.split(".")[2]))
            elif p.startswith("mtp.layers."):
                mtp_bare.append(int(p.split(".")[2]))
    if bare:
        cfg["attention_layers_without_input_norm"] = sorted(bare)
    if mtp_bare:
        cfg["mtp_attention_layers_without_input_norm"] = sorted(mtp_bare)
    if cfg["moe_router_score_function"] == "softmax":
        biased = [n for n in state if n.endswith("mlp.router.expert_bias")]
        if biased:
            report.warn("%d MoE layers carry mlp.router.expert_bias but the score function is softmax (spec §2.4: "
                        "expert bias belongs to sigmoid routing); kept - confirm with --set "
                        "moe_router_score_function=\"sigmoid\" if the run used sigmoid" % len(biased))
    # tied output layer
    if "output_layer.weight" not in state and "embedding.word_embeddings.weight" in state:
        raise ConversionError("missing tensor 'output_layer.weight' (tied embeddings are not a NAM56R layout; the "
                              "model was trained with --untie-embeddings-and-output-weights)")
    unknown = sorted(n for n in state if n not in req and n not in opt)
    if unknown:
        raise ConversionError("%d tensor(s) of an unknown layout (not part of the NAM56R format for this config), e.g. %s"
                              % (len(unknown), ", ".join("'%s' %s" % (n, list(state[n].shape)) for n in unknown[:5])))
    missing = sorted(n for n in req if n not in state)
    if missing:
        raise ConversionError("%d tensor(s) missing, e.g. %s" % (len(missing), ", ".join(
            "'%s' (expected %s)" % (n, req[n]) for n in missing[:5])))
    for n, t in state.items():
        want = req.get(n, opt.get(n))
        if want is not None and list(t.shape) != want:
            raise ConversionError("tensor '%s' has shape %s, expected %s from config %s" % (
                n, list(t.shape), want, _explain(n)))
        if n in ints:
            if t.dtype != torch.int64:
                raise ConversionError("tensor '%s' is %s: expected int64 (hash constants)" % (n, t.dtype))
        elif n in opt and n.startswith("embedding.cppmega_ngram_hash."):
            pass  # bookkeeping buffers (offsets, sizes, masks): kept as they are, the loader may ignore them
        elif t.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise ConversionError("tensor '%s' has dtype %s: expected float32, bfloat16 or float16" % (n, t.dtype))
    ng = cfg.get("ngram_hash")
    if ng:
        q = "embedding.cppmega_ngram_hash."
        u = state[q + "unified_table.weight"]
        if u.dim() != 2 or u.shape[1] != ng["embed_dim"]:
            raise ConversionError("tensor '%sunified_table.weight' has shape %s" % (q, list(u.shape)))
        sizes = state.get(q + "table_sizes_t")
        if sizes is not None and int(sizes.sum()) != u.shape[0]:
            raise ConversionError("tensor '%sunified_table.weight' has %d rows but %stable_sizes_t sums to %d" % (
                q, u.shape[0], q, int(sizes.sum())))
        if sizes is not None:
            lo, hi = ng["table_size"] * 0.5, ng["table_size"] * 1.5
            if any(not lo <= int(s) <= hi for s in sizes):
                raise ConversionError("%stable_sizes_t %s is not within +-50%% of --ngram-table-size %d" % (
                    q, sizes.tolist(), ng["table_size"]))


def _explain(name):
    if "self_attention" in name:
        return "(num_attention_heads, q_lora_rank, kv_lora_rank, qk_head_dim, qk_pos_emb_head_dim, v_head_dim, " \
               "dsa_indexer_*)"
    if "mixer.impl.mixer" in name:
        return "(mamba_state_dim, mamba_head_dim, mamba_expand, mamba_num_groups, mamba3_mimo_rank, " \
               "mamba3_rope_fraction)"
    if "mixer.impl" in name:
        return "(m2rnn_k_head_dim, m2rnn_v_head_dim, m2rnn_num_heads, m2rnn_conv_kernel)"
    if ".mlp." in name:
        return "(num_moe_experts, moe_ffn_hidden_size, moe_shared_expert_intermediate_size, ffn_hidden_size)"
    return "(hidden_size, padded_vocab_size, ngram_hash, structure_embedding)"


# ---------------------------------------------------------------------------------------


def convert(argv, report=None):
    """Run one conversion; raises ConversionError. Returns (config, tensor names, report)."""
    import torch

    flags = build_parser().parse_args(argv)
    report = report or Report(quiet=flags.quiet)
    max_shard = parse_size(flags.max_shard_size)
    kind, where = locate(flags.src, flags.iteration)
    if kind == "torch_dist":
        raw, args, iteration = load_torch_dist(where, report)
    else:
        raw, args, iteration = load_legacy(where, report)
    args = args_to_dict(args)
    params_dtype = torch.bfloat16 if args.get("bf16") else (torch.float16 if args.get("fp16") else torch.float32)
    state = normalize_names(raw, report, params_dtype)
    del raw
    # attention normalization needs the MLA dims: take them provisionally from the args/defaults
    pre_cfg, _ = resolve_dims(state, args, flags, Report(silent=True))
    normalize_attention(state, pre_cfg, report)
    cfg, kinds, sources = build_config(state, args, flags, report)
    check_tensors(state, cfg, kinds, flags, report)
    cfg["conversion"] = {
        "tool": "slm tools/convert/convert_megatron.py", "source": os.path.abspath(flags.src),
        "source_format": kind, "iteration": iteration if isinstance(iteration, (int, str)) else None,
        "value_sources": sources, "warnings": report.warnings}
    write_checkpoint_dir(flags.out, cfg, state, max_shard, overwrite=flags.overwrite,
                         metadata={"source": os.path.abspath(flags.src), "converter": "convert_megatron.py"})
    report.note("wrote %s: %d tensors, %d layers (%s)" % (flags.out, len(state), len(kinds), " ".join(
        "%s=%d" % (k, kinds.count(k)) for k in ("mla", "dsa", "moe", "mamba3", "m2rnn"))))
    return cfg, sorted(state), report


def main(argv=None):
    try:
        convert(sys.argv[1:] if argv is None else argv)
    except ConversionError as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
