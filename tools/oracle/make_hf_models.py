"""Oracle models for the architectures slm supports beyond ../shared/golden/hf: tiny random
instances made and run by HF transformers, in the same layout as the shared goldens.

  python3 make_hf_models.py OUT_DIR

For each case writes OUT_DIR/<name>/: config.json, generation_config.json,
model.safetensors (bf16, written by save_pretrained), golden.safetensors and golden.json:
  input_ids [T] (int64), prefill_len [1], logits_full [T, V] (one forward over all T
  tokens), logits_incremental [T, V] (rows 0..P-1 from the prefill forward of the first P
  tokens, then one token at a time through the model's own cache), greedy_tokens [12]
  (greedy continuation of the first P tokens with full forwards only).
As for the shared goldens, the model is created in bf16, saved, then computed in float32
(model.float(): the weights are exactly the saved bf16 values; transformers' inv_freq
buffer keeps its bf16 rounding, see include/slm/rope.hpp).

Cases: qwen2 (q/k/v biases, tied embeddings), mistral (sliding window 16 < T),
mixtral (softmax top-2 of 4 experts, always renormalized), and mixtral_stacked: the same
mixtral with its state_dict saved as transformers 5.x holds it in memory (experts
stacked as gate_up_proj [E, 2I, d] and down_proj [E, d, I]).
"""
import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file

out = sys.argv[1]
T, P, GREEDY, SEED = 48, 20, 12, 20261121

# Small on purpose: tests/data must stay under 20 MB with every golden in it.
common = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=1024, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2)
cases = {
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM,
              dict(common, rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False)),
    "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM,
                dict(common, head_dim=16, rope_theta=10000.0, sliding_window=16, tie_word_embeddings=False)),
    "mixtral": (transformers.MixtralConfig, transformers.MixtralForCausalLM,
                dict(common, intermediate_size=64, num_local_experts=4, num_experts_per_tok=2, rope_theta=10000.0,
                     sliding_window=None, tie_word_embeddings=False)),
}


@torch.no_grad()
def make(name, config_cls, model_cls, kw, stacked_copy=None):
    torch.manual_seed(SEED)
    config = config_cls(**kw)
    config._attn_implementation = "eager"
    model = model_cls(config).to(torch.bfloat16).eval()
    # Random init is small; widen the weights so logits spread and argmaxes are stable.
    for n, p in model.named_parameters():
        if p.dim() >= 2:
            p.normal_(0.0, 0.08)
        elif "bias" in n:
            p.normal_(0.0, 0.05)
        else:
            p.copy_(1.0 + 0.1 * torch.randn_like(p))
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    model = model.float()
    g = torch.Generator().manual_seed(SEED + 1)
    ids = torch.randint(3, config.vocab_size, (1, T), generator=g)
    full = model(ids).logits[0]
    pre = model(ids[:, :P], use_cache=True)
    rows = [pre.logits[0]]
    cache = pre.past_key_values
    for t in range(P, T):
        o = model(ids[:, t:t + 1], past_key_values=cache, use_cache=True)
        cache = o.past_key_values
        rows.append(o.logits[0])
    inc = torch.cat(rows, 0)
    seq = ids[:, :P]
    greedy = []
    for _ in range(GREEDY):
        nxt = model(seq).logits[0, -1].argmax()
        greedy.append(int(nxt))
        seq = torch.cat([seq, nxt.view(1, 1)], 1)
    save_file({"input_ids": ids[0].contiguous(), "prefill_len": torch.tensor([P]), "logits_full": full.contiguous(),
               "logits_incremental": inc.contiguous(), "greedy_tokens": torch.tensor(greedy)},
              os.path.join(d, "golden.safetensors"))
    note = {"name": name, "model_type": config.model_type, "transformers": transformers.__version__,
            "torch": torch.__version__, "seed": SEED, "T": T, "prefill": P, "greedy": GREEDY,
            "full_vs_incremental_maxabs": float((full - inc).abs().max()),
            "logits_absmax": float(full.abs().max()),
            "oracle": f"transformers {transformers.__version__} {model_cls.__name__}, eager attention, computed in "
                      "float32 on CPU from the bf16 weights stored in model.safetensors",
            "tensors": {"input_ids": "int64 [T]", "prefill_len": "int64 [1]", "logits_full": "float32 [T, V]",
                        "logits_incremental": "float32 [T, V]: rows < P from the prefill forward, then cached decode",
                        "greedy_tokens": "int64 [12]: greedy from the first P ids, full forwards"}}
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(note, f, indent=1)
    print(name, json.dumps({k: note[k] for k in ("full_vs_incremental_maxabs", "logits_absmax")}),
          sorted(os.listdir(d)))
    if stacked_copy:
        sd = {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
        sd = {k: v for k, v in sd.items() if "inv_freq" not in k}
        s = os.path.join(out, stacked_copy)
        os.makedirs(s, exist_ok=True)
        save_file(sd, os.path.join(s, "model.safetensors"), metadata={"format": "pt"})
        for f in ("config.json", "golden.safetensors", "golden.json"):
            with open(os.path.join(d, f), "rb") as src, open(os.path.join(s, f), "wb") as dst:
                dst.write(src.read())
        print(stacked_copy, sorted(sd)[:8])


for name, (cfg, cls, kw) in cases.items():
    make(name, cfg, cls, kw, stacked_copy="mixtral_stacked" if name == "mixtral" else None)
