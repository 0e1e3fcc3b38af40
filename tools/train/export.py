"""Export a tools/train NAM56R model to slm's canonical NAM56R directory:
config.json (the keys slm reads, include/slm/models/nam56r/model.hpp nam56r_config::from_json) and
model.safetensors = state_dict() (its names are the canonical names), floating tensors in
`dtype` (bf16 to ship, f32 for exactness checks), int64 hash buffers as int64. The untied
head output_layer.weight is written whole, [padded_vocab_size, d]: slm uses its first
vocab_size rows.

  python3 tools/train/export.py CHECKPOINT.pt OUT_DIR [--dtype bf16|f32]
  (CHECKPOINT.pt: torch.save({"config": cfg, "model": model.state_dict()}))"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402

# The config keys slm reads (everything else in a training config is dropped).
CONFIG_KEYS = [
    "model_type", "format_version", "vocab_size", "padded_vocab_size", "hidden_size", "num_layers", "hybrid_pattern",
    "dsa_a_layer_ranks", "r_layer_numbers", "mtp_num_layers", "layernorm_epsilon", "max_position_embeddings",
    "ffn_hidden_size", "activation", "num_attention_heads", "q_lora_rank", "kv_lora_rank", "qk_head_dim",
    "qk_pos_emb_head_dim", "v_head_dim", "rotary_base", "dsa_indexer_n_heads", "dsa_indexer_head_dim",
    "dsa_indexer_topk", "dsa_indexer_scoring_relu", "dsa_index_cache", "dsa_index_cache_full_ranks",
    "num_moe_experts", "moe_router_topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size",
    "moe_router_score_function", "mamba_state_dim", "mamba_head_dim", "mamba_expand", "mamba_num_groups",
    "mamba3_mimo_rank", "mamba3_rope_fraction", "mamba3_a_floor", "mamba3_a_activation", "m2rnn_k_head_dim",
    "m2rnn_v_head_dim", "m2rnn_num_heads", "m2rnn_conv_kernel", "ngram_hash",
]


def canonical_config(cfg):
    out = {"model_type": "nam56r", "format_version": 1}
    for k in CONFIG_KEYS:
        if k in cfg and cfg[k] is not None:
            out[k] = cfg[k]
    return out


def export(model, out_dir, dtype=torch.bfloat16, metadata=None):
    """Writes out_dir/config.json and out_dir/model.safetensors; returns the tensor count."""
    os.makedirs(out_dir, exist_ok=True)
    tensors = {}
    for name, t in model.state_dict().items():
        t = t.detach().cpu()
        tensors[name] = t.to(dtype).contiguous() if t.is_floating_point() else t.contiguous()
    st_io.save(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt", **(metadata or {})})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(canonical_config(model.cfg), f, indent=2)
        f.write("\n")
    return len(tensors)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("out_dir")
    ap.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    a = ap.parse_args()
    import nam56r_torch as nt
    ck = torch.load(a.checkpoint, map_location="cpu")
    model = nt.NAM56R(ck["config"])
    model.load_state_dict(ck["model"], strict=True)
    n = export(model, a.out_dir, torch.bfloat16 if a.dtype == "bf16" else torch.float32)
    print("wrote %d tensors to %s" % (n, a.out_dir))


if __name__ == "__main__":
    main()
