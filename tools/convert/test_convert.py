#!/usr/bin/env python3
"""Tests of convert_megatron.py and convert_nanochat.py (unittest; needs torch + safetensors).

Synthetic checkpoints with the real key names at small dimensions: every NAM56R layer kind
(MLA, DSA, MoE, Mamba-3, M2RNN), 2 MTP depths, n-gram hash + structure embeddings. One
canonical state dict is built first; every layout variant is derived from it, saved in the
legacy .pt form or as torch_dist (DCP), converted, and the output must equal the canonical
dict exactly: same names, shapes, dtypes and bytes.

    python3 test_convert.py -v
"""

import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402

import convert_megatron  # noqa: E402
import convert_nanochat  # noqa: E402
from ckpt_io import ConversionError  # noqa: E402

# small dimensions, all different from each other where it helps catch a swapped axis
D, VPAD, VOCAB = 32, 64, 60
HEADS, QL, KVL, NOPE, ROPE, VD = 2, 8, 6, 4, 4, 3
NI, DI = 2, 4
E, TOPK, FE, FS, FFN = 3, 2, 6, 5, 12
N, P, EXPAND, G, R = 8, 4, 2, 2, 2
DIN, HM, ANGLES = EXPAND * D, EXPAND * D // P, 2
K2, V2, H2, KC = 4, 2, 5, 4
ORDERS, NG_HEADS, NG_DIM, NG_SIZES = [2, 3], 2, 3, [5, 7, 11, 13]
SB = 4
PATTERN, DEPTH, MTP = "AEMEAEMR", 8, 2
KINDS = ["mla", "moe", "mamba3", "moe", "dsa", "moe", "mamba3", "m2rnn"]
MLA_PREFIXES = ["decoder.layers.0.", "mtp.layers.0.mtp_model_layer.layers.0.", "mtp.layers.1.mtp_model_layer.layers.0."]
DSA_PREFIX = "decoder.layers.4."

FLAGS = ["--hybrid-pattern", PATTERN, "--dsa-a-layer-ranks", "1", "--r-layer-numbers", "8",
         "--dsa-index-cache-full-ranks", "0", "--vocab-size", str(VOCAB), "--ngram-heads", str(NG_HEADS),
         "--ngram-table-size", "9", "--m2rnn-k-head-dim", str(K2), "--m2rnn-v-head-dim", str(V2), "--quiet"]


def make_args(**over):
    a = dict(hidden_size=D, num_layers=DEPTH, num_attention_heads=HEADS, q_lora_rank=QL, kv_lora_rank=KVL,
             qk_head_dim=NOPE, qk_pos_emb_head_dim=ROPE, v_head_dim=VD, num_experts=E, moe_router_topk=TOPK,
             moe_ffn_hidden_size=FE, moe_shared_expert_intermediate_size=FS, ffn_hidden_size=FFN,
             mamba_state_dim=N, mamba_head_dim=P, mamba_num_groups=G, mtp_num_layers=MTP, norm_epsilon=1e-5,
             max_position_embeddings=128, seq_length=128, rotary_base=10000, padded_vocab_size=VPAD,
             vocab_size=None, bf16=True, normalization="RMSNorm", swiglu=False,
             hybrid_override_pattern="*EME*EMM/*-/*-", dsa_indexer_n_heads=NI, dsa_indexer_head_dim=DI,
             dsa_indexer_topk=16, moe_router_score_function="softmax")
    a.update(over)
    return argparse.Namespace(**a)


def canonical():
    """name -> tensor in the canonical (converted) form."""
    g = torch.Generator().manual_seed(1234)

    def w(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, generator=g).to(dtype)

    sd = {"embedding.word_embeddings.weight": w(VPAD, D), "decoder.final_norm.weight": w(D),
          "output_layer.weight": w(VPAD, D)}
    ng = "embedding.cppmega_ngram_hash."
    J = len(ORDERS) * NG_HEADS
    sd[ng + "unified_table.weight"] = w(sum(NG_SIZES), NG_DIM)
    sd[ng + "out_proj.weight"] = w(D, J * NG_DIM)
    sd[ng + "hash_mults"] = torch.randint(1, 2 ** 31, (J, max(ORDERS)), generator=g, dtype=torch.int64) | 1
    sd[ng + "hash_bias"] = torch.randint(0, 2 ** 31, (J,), generator=g, dtype=torch.int64)
    sizes = torch.tensor(NG_SIZES, dtype=torch.int64)
    sd[ng + "table_sizes_t"] = sizes
    sd[ng + "table_offsets"] = torch.cumsum(sizes, 0) - sizes
    sd[ng + "order_for_table"] = torch.tensor([2, 2, 3, 3], dtype=torch.int64)
    sd[ng + "order_mask"] = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 1], [0, 0, 1, 1]], dtype=torch.int64)
    st = "embedding.cppmega_structure."
    sd[st + "stacked_emb.weight"] = w(25, SB)
    sd[st + "up_proj.weight"] = w(D, SB)
    sd[st + "component_scales"] = w(2, dtype=torch.float32)

    def mla(p, dsa):
        sd[p + "input_layernorm.weight"] = w(D)
        a = p + "self_attention."
        sd[a + "linear_q_down_proj.weight"] = w(QL, D)
        sd[a + "linear_q_up_proj.weight"] = w(HEADS * (NOPE + ROPE), QL)
        sd[a + "linear_kv_down_proj.weight"] = w(KVL + ROPE, D)
        sd[a + "linear_kv_up_proj.weight"] = w(HEADS * (NOPE + VD), KVL)
        sd[a + "linear_proj.weight"] = w(D, HEADS * VD)
        if dsa:
            i = a + "core_attention.indexer."
            sd[i + "linear_wq_b.weight"] = w(NI * DI, QL)
            sd[i + "linear_wk.weight"] = w(DI, D)
            sd[i + "k_norm.weight"] = w(DI)
            sd[i + "k_norm.bias"] = w(DI)
            sd[i + "linear_weights_proj.weight"] = w(NI, D)

    for L, kind in enumerate(KINDS):
        p = "decoder.layers.%d." % L
        if kind in ("mla", "dsa"):
            mla(p, kind == "dsa")
        elif kind == "moe":
            sd[p + "pre_mlp_layernorm.weight"] = w(D)
            sd[p + "mlp.router.weight"] = w(E, D)
            for e in range(E):
                sd[p + "mlp.experts.linear_fc1.weight%d" % e] = w(FE, D)
                sd[p + "mlp.experts.linear_fc2.weight%d" % e] = w(D, FE)
            sd[p + "mlp.shared_experts.linear_fc1.weight"] = w(FS, D)
            sd[p + "mlp.shared_experts.linear_fc2.weight"] = w(D, FS)
        elif kind == "mamba3":
            sd[p + "norm.weight"] = w(D)
            sd[p + "mixer.impl.pre_norm.weight"] = w(D)
            q = p + "mixer.impl.mixer."
            sd[q + "in_proj.weight"] = w(2 * DIN + 2 * R * G * N + 3 * HM + ANGLES, D)
            sd[q + "dt_bias"] = w(HM)
            sd[q + "B_bias"] = w(HM, R, N)
            sd[q + "C_bias"] = w(HM, R, N)
            sd[q + "B_norm.weight"] = w(N)
            sd[q + "C_norm.weight"] = w(N)
            for x in ("mimo_x", "mimo_z", "mimo_o"):
                sd[q + x] = w(HM, R, P)
            sd[q + "D"] = w(HM)
            sd[q + "out_proj.weight"] = w(D, DIN)
        else:
            conv = 2 * K2 + V2 * H2
            sd[p + "norm.weight"] = w(D)
            q = p + "mixer.impl."
            sd[q + "input_projection.weight"] = w(conv + H2 + V2 * H2, D)
            sd[q + "A_log"] = w(H2, dtype=torch.float32)
            sd[q + "dt_bias"] = w(H2, dtype=torch.float32)
            sd[q + "conv1d.weight"] = w(conv, 1, KC)
            sd[q + "conv1d.bias"] = w(conv)
            sd[q + "state_weight"] = w(H2, V2, V2)
            sd[q + "D"] = w(H2, V2)
            sd[q + "g_norm.weight"] = w(V2 * H2)
            sd[q + "output_projection.weight"] = w(D, V2 * H2)
    for k in range(MTP):
        p = "mtp.layers.%d." % k
        sd[p + "enorm.weight"] = w(D)
        sd[p + "hnorm.weight"] = w(D)
        sd[p + "eh_proj.weight"] = w(D, 2 * D)
        sd[p + "final_layernorm.weight"] = w(D)
        mla(p + "mtp_model_layer.layers.0.", False)
        m = p + "mtp_model_layer.layers.1.mlp."
        sd[m + "linear_fc1.layer_norm_weight"] = w(D)
        sd[m + "linear_fc1.weight"] = w(FFN, D)
        sd[m + "linear_fc2.weight"] = w(D, FFN)
    return sd


# ----- layout variants (canonical -> what a training run would have saved)

def with_prefix(sd, prefix):
    return {prefix + k: v for k, v in sd.items()}


def local_experts(sd):
    out = {}
    for k, v in sd.items():
        for fc in ("linear_fc1", "linear_fc2"):
            tag = "mlp.experts.%s.weight" % fc
            if tag in k and k[k.index(tag) + len(tag):].isdigit():
                e = int(k[k.index(tag) + len(tag):])
                k = k[:k.index(tag)] + "mlp.experts.local_experts.%d.%s.weight" % (e, fc)
        out[k] = v
    return out


def stacked_experts(sd):
    out = {k: v for k, v in sd.items() if ".mlp.experts.linear_fc" not in k}
    for L, kind in enumerate(KINDS):
        if kind == "moe":
            p = "decoder.layers.%d.mlp.experts." % L
            for fc in ("linear_fc1", "linear_fc2"):
                out[p + "experts.%s.weight" % fc] = torch.stack([sd[p + "%s.weight%d" % (fc, e)] for e in range(E)])
    return out


def fused_down(sd, keep_norm):
    out = dict(sd)
    for p in MLA_PREFIXES:
        a = p + "self_attention."
        out[a + "linear_qkv_down_proj.weight"] = torch.cat(
            [out.pop(a + "linear_q_down_proj.weight"), out.pop(a + "linear_kv_down_proj.weight")])
        norm = out.pop(p + "input_layernorm.weight")
        if keep_norm:
            out[a + "linear_qkv_down_proj.layer_norm_weight"] = norm
    del out[DSA_PREFIX + "input_layernorm.weight"]  # fused runs build DSA layers with an Identity norm
    return out


def split_kv_up(sd):
    out = dict(sd)
    for p in MLA_PREFIXES + [DSA_PREFIX]:
        a = p + "self_attention."
        kv = out.pop(a + "linear_kv_up_proj.weight").reshape(HEADS, NOPE + VD, KVL)
        out[a + "linear_k_up_proj.weight"] = kv[:, :NOPE].reshape(HEADS * NOPE, KVL).clone()
        out[a + "linear_v_up_proj.weight"] = kv[:, NOPE:].reshape(HEADS * VD, KVL).clone()
    return out


def add_extra_state(sd):
    out = dict(sd)
    out["decoder.layers.0.self_attention.linear_proj._extra_state"] = io.BytesIO(b"te fp8 meta")
    out["decoder.layers.1.mlp.experts._extra_state"] = None
    return out


def save_legacy(sd, path, args=None, iteration=100):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save({"model": sd, "args": args if args is not None else make_args(), "iteration": iteration,
                "checkpoint_version": 3.0}, path)


def dcp_save(sd, path):
    import torch.distributed.checkpoint as dcp
    try:
        dcp.save(sd, storage_writer=dcp.FileSystemWriter(path), no_dist=True)
    except TypeError:
        dcp.save(sd, storage_writer=dcp.FileSystemWriter(path))


def _probe_dcp():
    try:
        with tempfile.TemporaryDirectory() as d:
            dcp_save({"a": torch.zeros(2)}, os.path.join(d, "x"))
        return None
    except Exception as e:  # noqa: BLE001
        return "%s: %s" % (type(e).__name__, e)


DCP_SKIP = _probe_dcp()
if DCP_SKIP:
    print("torch_dist tests skipped: torch.distributed.checkpoint.save without a process group failed: " + DCP_SKIP)


def save_torch_dist(sd, iter_dir, args=None, iteration=100):
    full = dict(sd)
    # what else a Megatron DCP holds: optimizer state, ShardedObjects (bytes)
    full["optimizer.state.exp_avg.decoder.final_norm.weight"] = torch.zeros(D)
    full["decoder.layers.0.self_attention.linear_proj._extra_state/shard_0_1"] = io.BytesIO(b"te")
    dcp_save(full, iter_dir)
    torch.save({"args": args if args is not None else make_args(), "iteration": iteration}, os.path.join(iter_dir, "common.pt"))


def load_json(path):
    with open(path) as f:
        return json.load(f)


def read_out(out_dir):
    """-> name -> tensor of a converted directory (single file or sharded)."""
    idx = os.path.join(out_dir, "model.safetensors.index.json")
    files = sorted(set(load_json(idx)["weight_map"].values())) if os.path.exists(idx) else ["model.safetensors"]
    out = {}
    for f in files:
        with safe_open(os.path.join(out_dir, f), framework="pt") as h:
            for k in h.keys():
                assert k not in out, k
                out[k] = h.get_tensor(k)
    return out


def raw_bytes(t):
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="slm_convert_test_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def convert(self, src, *extra, flags=FLAGS):
        out = self.path("out")
        buf = io.StringIO()
        with contextlib.redirect_stderr(buf):
            cfg, names, report = convert_megatron.convert([src, out, "--overwrite"] + list(flags) + list(extra))
        return out, cfg, report

    def assertConverted(self, out, expected):
        got = read_out(out)
        self.assertEqual(sorted(got), sorted(expected), "tensor names")
        for k, t in expected.items():
            g = got[k]
            self.assertEqual(g.dtype, t.dtype, k)
            self.assertEqual(list(g.shape), list(t.shape), k)
            self.assertEqual(raw_bytes(g), raw_bytes(t), "bytes of " + k)

    def assertFails(self, fn, *needles):
        with contextlib.redirect_stderr(io.StringIO()):
            with self.assertRaises(ConversionError) as cm:
                fn()
        msg = str(cm.exception)
        for n in needles:
            self.assertIn(n, msg)
        return msg


class MegatronLegacy(Base):
    def test_canonical_with_prefix_extra_state_local_experts(self):
        sd = canonical()
        raw = with_prefix(add_extra_state(local_experts(sd)), "module.")
        save_legacy(raw, self.path("ckpt", "iter_0000100", "mp_rank_00", "model_optim_rng.pt"))
        out, cfg, report = self.convert(self.path("ckpt", "iter_0000100"))
        self.assertConverted(out, sd)
        self.assertEqual(report.warnings, [])
        want = {"model_type": "nam56r", "format_version": 1, "vocab_size": VOCAB, "padded_vocab_size": VPAD,
                "hidden_size": D, "num_layers": DEPTH, "hybrid_pattern": PATTERN, "dsa_a_layer_ranks": [1],
                "r_layer_numbers": [8], "mtp_num_layers": MTP, "layernorm_epsilon": 1e-5,
                "max_position_embeddings": 128, "ffn_hidden_size": FFN, "activation": "gelu",
                "num_attention_heads": HEADS, "q_lora_rank": QL, "kv_lora_rank": KVL, "qk_head_dim": NOPE,
                "qk_pos_emb_head_dim": ROPE, "v_head_dim": VD, "rotary_base": 10000, "dsa_indexer_n_heads": NI,
                "dsa_indexer_head_dim": DI, "dsa_indexer_topk": 16, "dsa_index_cache": "causal",
                "dsa_index_cache_full_ranks": [0], "num_moe_experts": E, "moe_router_topk": TOPK,
                "moe_ffn_hidden_size": FE, "moe_shared_expert_intermediate_size": FS,
                "moe_router_score_function": "softmax", "mamba_state_dim": N, "mamba_head_dim": P,
                "mamba_expand": EXPAND, "mamba_num_groups": G, "mamba3_mimo_rank": R, "mamba3_rope_fraction": 0.5,
                "mamba3_a_floor": 1e-4, "mamba3_a_activation": "softplus", "m2rnn_k_head_dim": K2,
                "m2rnn_v_head_dim": V2, "m2rnn_num_heads": H2, "m2rnn_conv_kernel": KC,
                "ngram_hash": {"orders": ORDERS, "num_heads": NG_HEADS, "table_size": 9, "embed_dim": NG_DIM},
                "structure_embedding": {"components": "core", "bottleneck": SB}}
        on_disk = load_json(os.path.join(out, "config.json"))
        for k, v in want.items():
            self.assertEqual(on_disk.get(k), v, k)
        self.assertEqual(on_disk["conversion"]["source_format"], "legacy")
        self.assertEqual(on_disk["conversion"]["iteration"], 100)
        self.assertTrue(os.path.exists(os.path.join(out, "model.safetensors")))

    def test_save_root_latest_and_orig_mod(self):
        sd = canonical()
        root = self.path("save")
        save_legacy(with_prefix(sd, "module._orig_mod."),
                    os.path.join(root, "iter_0000200", "mp_rank_00", "model_optim_rng.pt"), iteration=200)
        save_legacy({}, os.path.join(root, "iter_0000100", "mp_rank_00", "model_optim_rng.pt"), iteration=100)
        with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write("200\n")
        out, cfg, _ = self.convert(root)
        self.assertConverted(out, sd)
        self.assertEqual(cfg["conversion"]["iteration"], 200)

    def test_fused_down_proj_with_norm(self):
        sd = canonical()
        save_legacy(fused_down(sd, keep_norm=True), self.path("m.pt"))
        out, cfg, report = self.convert(self.path("m.pt"))
        expected = dict(sd)
        del expected[DSA_PREFIX + "input_layernorm.weight"]
        self.assertConverted(out, expected)
        self.assertEqual(report.warnings, [])
        # the loader takes no missing norm for "no norm": the bare DSA layer is declared
        self.assertEqual(cfg["attention_layers_without_input_norm"], [4])

    def test_fused_down_proj_without_norm_gets_unit_weight(self):
        sd = canonical()
        save_legacy(fused_down(sd, keep_norm=False), self.path("m.pt"))
        out, _, report = self.convert(self.path("m.pt"))
        expected = dict(sd)
        del expected[DSA_PREFIX + "input_layernorm.weight"]
        for p in MLA_PREFIXES:
            expected[p + "input_layernorm.weight"] = torch.ones(D, dtype=torch.bfloat16)
        self.assertConverted(out, expected)
        self.assertEqual(len(report.warnings), len(MLA_PREFIXES))
        self.assertTrue(all("§7.5" in w for w in report.warnings))

    def test_fused_down_proj_without_norm_left_out(self):
        sd = canonical()
        save_legacy(fused_down(sd, keep_norm=False), self.path("m.pt"))
        out, cfg, report = self.convert(self.path("m.pt"), "--missing-mla-norm", "none")
        expected = {k: v for k, v in sd.items() if not k.endswith("input_layernorm.weight")}
        self.assertConverted(out, expected)
        self.assertEqual(cfg["attention_layers_without_input_norm"], [0, 4])
        self.assertEqual(cfg["mtp_attention_layers_without_input_norm"], [0, 1])
        self.assertEqual(len(report.warnings), len(MLA_PREFIXES))

    def test_split_k_v_up_proj(self):
        sd = canonical()
        save_legacy(split_kv_up(sd), self.path("m.pt"))
        out, _, _ = self.convert(self.path("m.pt"))
        self.assertConverted(out, sd)

    def test_all_variants_together_sharded(self):
        sd = canonical()
        raw = with_prefix(add_extra_state(local_experts(split_kv_up(fused_down(sd, True)))), "module.")
        save_legacy(raw, self.path("m.pt"))
        out, _, _ = self.convert(self.path("m.pt"), "--max-shard-size", "4KB")
        expected = dict(sd)
        del expected[DSA_PREFIX + "input_layernorm.weight"]
        self.assertConverted(out, expected)
        idx = load_json(os.path.join(out, "model.safetensors.index.json"))
        files = sorted(set(idx["weight_map"].values()))
        self.assertGreater(len(files), 3)
        self.assertEqual(files[0], "model-00001-of-%05d.safetensors" % len(files))
        self.assertFalse(os.path.exists(os.path.join(out, "model.safetensors")))
        total = sum(t.numel() * t.element_size() for t in expected.values())
        self.assertEqual(idx["metadata"]["total_size"], total)
        for f in files:  # tensor data per shard within the limit, unless one tensor alone exceeds it
            names = [n for n, s in idx["weight_map"].items() if s == f]
            data = sum(expected[n].numel() * expected[n].element_size() for n in names)
            self.assertTrue(data <= 4000 or len(names) == 1, (f, data, len(names)))

    def test_auto_pattern_lists_and_dims_without_args(self):
        sd = canonical()
        torch.save({"model": sd}, self.path("m.pt"))  # no args at all: dims from the tensors + --set
        flags = ["--hybrid-pattern", PATTERN, "--dsa-a-layer-ranks", "auto", "--r-layer-numbers", "auto",
                 "--dsa-index-cache", "off", "--ngram-heads", "2", "--ngram-table-size", "9",
                 "--m2rnn-k-head-dim", "4", "--m2rnn-v-head-dim", "2",
                 "--set", "num_attention_heads=2", "--set", "kv_lora_rank=6", "--set", "qk_head_dim=4",
                 "--set", "qk_pos_emb_head_dim=4", "--set", "v_head_dim=3", "--set", "moe_router_topk=2"]
        out, cfg, report = self.convert(self.path("m.pt"), flags=flags)
        self.assertConverted(out, sd)
        self.assertEqual(cfg["dsa_a_layer_ranks"], [1])
        self.assertEqual(cfg["r_layer_numbers"], [8])
        self.assertEqual(cfg["dsa_index_cache_full_ranks"], [])
        self.assertEqual((cfg["hidden_size"], cfg["mamba_num_groups"], cfg["m2rnn_num_heads"]), (D, G, H2))
        self.assertEqual(cfg["vocab_size"], VPAD)  # unknown tokenizer size: the padded one, with a warning
        self.assertTrue(any("vocab" in w for w in report.warnings))

    def test_cli_exit_codes(self):
        sd = canonical()
        save_legacy(sd, self.path("m.pt"))
        script = os.path.join(HERE, "convert_megatron.py")
        ok = subprocess.run([sys.executable, script, self.path("m.pt"), self.path("o1")] + FLAGS,
                            capture_output=True, text=True)
        self.assertEqual(ok.returncode, 0, ok.stderr)
        again = subprocess.run([sys.executable, script, self.path("m.pt"), self.path("o1")] + FLAGS,
                               capture_output=True, text=True)
        self.assertEqual(again.returncode, 2)
        self.assertIn("--overwrite", again.stderr)


@unittest.skipIf(DCP_SKIP is not None, "torch.distributed.checkpoint.save needs a process group here: %s" % DCP_SKIP)
class MegatronTorchDist(Base):
    def test_stacked_experts_dcp(self):
        sd = canonical()
        save_torch_dist(stacked_experts(sd), self.path("save", "iter_0000300"), iteration=300)
        with open(self.path("save", "latest_checkpointed_iteration.txt"), "w") as f:
            f.write("300")
        out, cfg, _ = self.convert(self.path("save"))
        self.assertConverted(out, sd)
        self.assertEqual(cfg["conversion"]["source_format"], "torch_dist")
        self.assertEqual(cfg["conversion"]["iteration"], 300)

    def test_dcp_split_down_proj_without_norm(self):
        # what Megatron 980211ae's dist-ckpt writer makes of a fused run: split down-projections, no norm
        sd = canonical()
        raw = stacked_experts(sd)
        for p in MLA_PREFIXES + [DSA_PREFIX]:
            del raw[p + "input_layernorm.weight"]
        save_torch_dist(raw, self.path("iter_0000001"))
        out, _, report = self.convert(self.path("iter_0000001"))
        expected = dict(sd)
        del expected[DSA_PREFIX + "input_layernorm.weight"]
        for p in MLA_PREFIXES:
            expected[p + "input_layernorm.weight"] = torch.ones(D, dtype=torch.bfloat16)
        self.assertConverted(out, expected)
        self.assertEqual(len(report.warnings), len(MLA_PREFIXES))

    def test_dcp_shape_mismatch(self):
        sd = stacked_experts(canonical())
        save_torch_dist(sd, self.path("iter_0000001"), args=make_args(moe_ffn_hidden_size=7))
        self.assertFails(lambda: self.convert(self.path("iter_0000001")), "moe_ffn_hidden_size = 7", "says 6")


class MegatronErrors(Base):
    def legacy(self, sd, args=None):
        save_legacy(sd, self.path("m.pt"), args=args)
        return self.path("m.pt")

    def test_hidden_size_mismatch(self):
        src = self.legacy(canonical(), make_args(hidden_size=48))
        self.assertFails(lambda: self.convert(src), "hidden_size = 48", "embedding.word_embeddings.weight", "32")

    def test_head_count_mismatch_names_tensor_and_shapes(self):
        src = self.legacy(canonical(), make_args(num_attention_heads=3))
        msg = self.assertFails(lambda: self.convert(src), "has shape", "expected")
        self.assertIn("self_attention", msg)

    def test_wrong_tensor_shape(self):
        sd = canonical()
        sd["decoder.layers.7.mixer.impl.state_weight"] = torch.zeros(H2, V2, V2 + 1, dtype=torch.bfloat16)
        src = self.legacy(sd)
        self.assertFails(lambda: self.convert(src), "decoder.layers.7.mixer.impl.state_weight", "[5, 2, 3]", "[5, 2, 2]")

    def test_fused_down_proj_wrong_rows(self):
        sd = fused_down(canonical(), True)
        k = "decoder.layers.0.self_attention.linear_qkv_down_proj.weight"
        sd[k] = torch.cat([sd[k], sd[k][:1]])
        src = self.legacy(sd)
        self.assertFails(lambda: self.convert(src), k, "[19, 32]")

    def test_unknown_layout(self):
        sd = canonical()
        sd["decoder.layers.0.self_attention.q_layernorm.weight"] = torch.ones(QL, dtype=torch.bfloat16)
        src = self.legacy(sd)
        self.assertFails(lambda: self.convert(src), "unknown layout", "q_layernorm")

    def test_missing_tensor(self):
        sd = canonical()
        del sd["decoder.layers.2.mixer.impl.mixer.D"]
        src = self.legacy(sd)
        self.assertFails(lambda: self.convert(src), "missing", "decoder.layers.2.mixer.impl.mixer.D")

    def test_k_up_without_v_up(self):
        sd = split_kv_up(canonical())
        del sd["decoder.layers.0.self_attention.linear_v_up_proj.weight"]
        src = self.legacy(sd)
        self.assertFails(lambda: self.convert(src), "linear_v_up_proj")

    def test_dsa_ranks_out_of_range_with_production_defaults(self):
        src = self.legacy(canonical())
        flags = [f for f in FLAGS]
        i = flags.index("--dsa-a-layer-ranks")
        del flags[i:i + 2]
        self.assertFails(lambda: self.convert(src, flags=flags), "dsa_a_layer_ranks", "out of range")

    def test_dsa_ranks_disagree_with_tensors(self):
        src = self.legacy(canonical())
        self.assertFails(lambda: self.convert(src, "--dsa-a-layer-ranks", "0"), "DSA A-ranks are 1")

    def test_r_layers_disagree_with_tensors(self):
        src = self.legacy(canonical())
        self.assertFails(lambda: self.convert(src, "--r-layer-numbers", "7"), "M2RNN layers are 8")

    def test_multi_rank_legacy(self):
        sd = canonical()
        for r in ("mp_rank_00", "mp_rank_01"):
            save_legacy(sd, self.path("iter_0000001", r, "model_optim_rng.pt"))
        self.assertFails(lambda: self.convert(self.path("iter_0000001")), "2 model-parallel ranks")

    @unittest.skipUnless(hasattr(torch, "float8_e4m3fn"), "no float8 in this torch")
    def test_fp8_primary_weight(self):
        sd = canonical()
        k = "decoder.layers.2.mixer.impl.mixer.in_proj.weight"
        sd[k] = sd[k].float().to(torch.float8_e4m3fn)
        src = self.legacy(sd)
        self.assertFails(lambda: self.convert(src), k, "MXFP8")

    def test_swiglu_refused(self):
        src = self.legacy(canonical(), make_args(swiglu=True))
        self.assertFails(lambda: self.convert(src), "swiglu")


class Nanochat(Base):
    CONFIG = {"sequence_len": 64, "vocab_size": 60, "n_layer": 2, "n_head": 2, "n_kv_head": 1, "n_embd": 16,
              "window_pattern": "SL", "mamba_pattern": None, "mtp_depth": 0, "rope_theta": 10000.0}

    def make(self, n_layer=2):
        g = torch.Generator().manual_seed(7)
        C, V = 16, 64
        sd = {"transformer.wte.weight": torch.randn(V, C, generator=g).bfloat16(),
              "lm_head.weight": torch.randn(V, C, generator=g).bfloat16(),
              "resid_lambdas": torch.ones(n_layer), "x0_lambdas": torch.zeros(n_layer)}
        for i in range(n_layer):
            p = "transformer.h.%d." % i
            sd[p + "attn.c_q.weight"] = torch.randn(C, C, generator=g).bfloat16()
            sd[p + "attn.c_k.weight"] = torch.randn(C // 2, C, generator=g).bfloat16()
            sd[p + "attn.c_v.weight"] = torch.randn(C // 2, C, generator=g).bfloat16()
            sd[p + "attn.c_proj.weight"] = torch.randn(C, C, generator=g).bfloat16()
            sd[p + "mlp.c_fc.weight"] = torch.randn(4 * C, C, generator=g).bfloat16()
            sd[p + "mlp.c_proj.weight"] = torch.randn(C, 4 * C, generator=g).bfloat16()
        return sd

    def save(self, d, step, sd, config):
        os.makedirs(d, exist_ok=True)
        torch.save(sd, os.path.join(d, "model_%06d.pt" % step))
        with open(os.path.join(d, "meta_%06d.json" % step), "w") as f:
            json.dump({"step": step, "model_config": config, "user_config": {}}, f)

    def run_nc(self, *argv):
        with contextlib.redirect_stderr(io.StringIO()):
            return convert_nanochat.convert(list(argv))

    def test_round_trip_latest_step(self):
        sd = self.make()
        d = self.path("base_checkpoints", "d2")
        self.save(d, 50, {}, self.CONFIG)
        raw = {"_orig_mod." + k: v for k, v in sd.items()}
        raw["_orig_mod.cos"] = torch.zeros(1, 64, 1, 4)
        raw["_orig_mod.sin"] = torch.zeros(1, 64, 1, 4)
        self.save(d, 100, raw, self.CONFIG)
        out = self.path("out")
        cfg, names = self.run_nc(d, out)
        self.assertConverted(out, sd)
        on_disk = load_json(os.path.join(out, "config.json"))
        self.assertEqual(on_disk, dict({"model_type": "nanochat"}, **self.CONFIG))
        with safe_open(os.path.join(out, "model.safetensors"), framework="pt") as h:
            self.assertEqual(h.metadata()["step"], "100")

    def test_explicit_file_and_sharding(self):
        sd = self.make()
        self.save(self.tmp, 7, sd, self.CONFIG)
        out = self.path("out")
        self.run_nc(self.path("model_000007.pt"), out, "--max-shard-size", "2KB")
        self.assertConverted(out, sd)
        self.assertTrue(os.path.exists(os.path.join(out, "model.safetensors.index.json")))

    def test_layer_count_mismatch(self):
        self.save(self.tmp, 1, self.make(n_layer=3), self.CONFIG)
        self.assertFails(lambda: self.run_nc(self.tmp, self.path("out")), "n_layer = 2")

    def test_missing_meta(self):
        torch.save(self.make(), self.path("model_000001.pt"))
        self.assertFails(lambda: self.run_nc(self.tmp, self.path("out")), "meta_000001.json")


if __name__ == "__main__":
    unittest.main()
