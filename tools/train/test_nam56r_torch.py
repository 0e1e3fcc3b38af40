"""Checks of the PyTorch NAM56R (tools/train/nam56r_torch.py), meant for the GPU machine
(they also run on a CPU torch, without the throughput part):

  golden   each layer against the oracle data in tests/data/golden/{mamba3,nam56r}
  engine   the whole model against slm's C++ engine: export a random model with every layer
           kind (f32 weights), run `slm logits`, compare the logits
  train    a short training run (loss must fall) and a throughput figure at T = 512

  python3 tools/train/test_nam56r_torch.py golden engine --slm build-dev/bin/slm
  python3 tools/train/test_nam56r_torch.py train --steps 300

Exit status 0 only when every selected check passed; a JSON summary goes to --json."""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import nam56r_torch as nt  # noqa: E402
import st_io  # noqa: E402
from export import export  # noqa: E402

GOLD = os.path.join(ROOT, "tests", "data", "golden")
results = {}
failures = []


def report(name, value, tol, extra=""):
    ok = bool(value <= tol)
    results[name] = {"value": float(value), "tol": tol, "ok": ok}
    print("%-58s %.3e (tol %.0e) %s %s" % (name, value, tol, "ok" if ok else "FAIL", extra), flush=True)
    if not ok:
        failures.append(name)


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


# ------------------------------------------------------------------------------------------
# 1. Golden data, layer by layer (float32 on CPU: the oracles ran float32 on CPU)


def golden_mamba3(dev="cpu"):
    for case in ("m3_mimo_r4_g1_rf05_plain", "m3_mimo_r2_g2_rf10_fusednorm_prefill1", "m3_mimo_r4_g1_rf10_unfusednorm"):
        base = os.path.join(GOLD, "mamba3", case)
        note = json.load(open(base + ".json"))
        t = st_io.load(base + ".safetensors")
        kw = note["constructor_kwargs"]
        act = "heavy_tail" if note["derived"]["a_activation"].startswith("heavy_tail") else "softplus"
        norm = bool(kw.get("is_outproj_norm")) or bool(note["derived"].get("fuse_pregate_headwise_norm"))
        m = nt.Mamba3Mixer(kw["d_model"], kw["d_state"], kw["headdim"], kw["expand"], kw["ngroups"], kw["mimo_rank"],
                           kw["rope_fraction"], note["derived"]["A_floor"], act, 1e-5, outproj_norm=norm,
                           chunk=kw.get("chunk_size", 16))
        sd = {k: v for k, v in t.items() if not k.startswith(("io.", "state."))}
        m.load_state_dict(sd, strict=True)
        m.to(dev)
        u = t["io.u"].to(dev)
        with torch.no_grad():
            y = m(u).cpu()
            y_ref = m.cpu()(u.cpu(), reference=True)
        # f32 chunked scan vs the f32 oracle: rounding of ~50-90 accumulated steps
        report("golden[%s] mamba3 %s y_full (chunked)" % (dev, case), rel(y, t["io.y_full"]), 1e-4)
        if dev == "cpu":
            report("golden mamba3 %s y_full (sequential f64 scan)" % case, rel(y_ref, t["io.y_full"]), 1e-4)


def golden_m2rnn(dev="cpu"):
    t = {k: v.to(dev) for k, v in st_io.load(os.path.join(GOLD, "nam56r", "cppmega_m2rnn_scan__scan.safetensors")).items()}
    A_log, dt_bias, f_raw = t["in/A_log"], t["in/dt_bias"], t["in/f_raw"]
    xf = torch.exp(-(torch.exp(A_log) * F.softplus(f_raw + dt_bias)))
    report("golden[%s] m2rnn forget gate" % dev, rel(xf, t["in/xf"]), 1e-6)
    q, k = t["in/q"][:, :, 0], t["in/k"][:, :, 0]
    for suffix, h0 in (("", None), ("_h0", t["in/h0"])):
        y, M = nt.m2rnn_scan(q, k, t["in/v"], t["in/xf"], t["in/W"], h0)
        report("golden[%s] m2rnn scan out%s" % (dev, suffix), rel(y, t["out/seq_out" + suffix]), 1e-5)
        report("golden[%s] m2rnn scan state%s" % (dev, suffix), rel(M, t["out/seq_h" + suffix]), 1e-5)


def golden_dsa(dev="cpu"):
    t = {k: v.to(dev) for k, v in st_io.load(os.path.join(GOLD, "nam56r", "cppmega_dsa__sparse_mla.safetensors")).items()}
    note = json.load(open(os.path.join(GOLD, "nam56r", "cppmega_dsa__sparse_mla.json")))
    q, w, k = t["in/index_q"], t["in/index_weights"], t["in/index_k"]  # [sq, b, h, d], [sq, b, h], [sk, b, d]
    dots = torch.einsum("tbhd,sbd->bths", q, k)
    for relu, name in ((True, "out/index_scores"), (False, "out/index_scores_norelu")):
        s = torch.einsum("bths,tbh->bts", F.relu(dots) if relu else dots, w)
        report("golden[%s] dsa %s" % (dev, name), rel(s, t[name]), 1e-5)
    # the selection as slm / nam56r_torch make it, against the oracle's top-k as sets
    s = torch.einsum("bths,tbh->bts", F.relu(dots), w)
    T = s.shape[-1]
    causal = torch.ones(T, T, dtype=torch.bool, device=dev).tril()
    ix = nt.Indexer.__new__(nt.Indexer)
    ix.top_k = note["config"]["index_topk"]
    sel = nt.Indexer.select(ix, s.masked_fill(~causal, float("-inf")))
    gold = torch.zeros_like(sel)
    ti, ts = t["out/topk_indices"], t["out/topk_scores"]
    gold.scatter_(-1, ti.clamp(0, T - 1), torch.isfinite(ts))
    gold &= causal
    report("golden[%s] dsa top-k set mismatches" % dev, float((sel != gold).sum()), 0)
    # sparse attention = dense attention masked to the selected keys
    qq, kk, vv = t["in/query"], t["in/key"], t["in/value"]  # [sq, b, np, hn]
    scale = note["config"]["softmax_scale"]
    att = torch.einsum("tbnd,sbnd->bnts", qq, kk) * scale
    p = torch.softmax(att.masked_fill(~gold[:, None], float("-inf")), -1)
    o = torch.einsum("bnts,sbnd->tbnd", p, vv).reshape(T, qq.shape[1], -1)
    report("golden[%s] dsa sparse attention (expanded)" % dev, rel(o, t["out/expanded"]), 1e-5)


def golden_ngram(dev="cpu"):
    for case in ("small_tables", "prod_hash"):
        base = os.path.join(GOLD, "nam56r", "cppmega_ngram_hash__" + case)
        note = json.load(open(base + ".json"))
        t = st_io.load(base + ".safetensors")
        c = note["config"]
        m = nt.NgramHash(c["hidden_size"], c["orders"], c["num_heads"], c["table_size"], c["embed_dim"])
        m.hash_mults.copy_(t["hash_mults"])
        m.hash_bias.copy_(t["hash_bias"])
        m.to(dev)
        t = {k: v.to(dev) for k, v in t.items()}
        report("golden[%s] ngram %s table_offsets" % (dev, case), float((m._offsets != t["table_offsets"]).sum()), 0)
        idx = m.indices(t["in/token_ids"])  # [B, T, J]; golden [B, J, T]
        report("golden[%s] ngram %s unified_indices" % (dev, case),
               float((idx != t["out/unified_indices"].transpose(1, 2)).sum()), 0)
        if "out/embedding" in t:
            with torch.no_grad():
                m.unified_table.weight.copy_(t["unified_table.weight"])
                m.out_proj.weight.copy_(t["out_proj.weight"])
                y = m(t["in/token_ids"])
            report("golden[%s] ngram %s embedding" % (dev, case), rel(y, t["out/embedding"]), 1e-5)


# ------------------------------------------------------------------------------------------
# 2. The whole model against slm's C++ engine


def engine_config(score="softmax", index_cache="off"):
    """Every layer kind: 13 layers AEMEAEMEAEMRA (4 MLA of which 2 DSA, 4 MoE, 3 Mamba-3, 1 M2RNN)."""
    return {
        "model_type": "nam56r", "format_version": 1, "vocab_size": 300, "padded_vocab_size": 320,
        "hidden_size": 64, "num_layers": 13, "hybrid_pattern": "AEMEAEMEAEMR", "dsa_a_layer_ranks": [1, 2],
        "mtp_num_layers": 2, "layernorm_epsilon": 1e-5, "max_position_embeddings": 256, "ffn_hidden_size": 96,
        "activation": "gelu", "num_attention_heads": 4, "q_lora_rank": 32, "kv_lora_rank": 32, "qk_head_dim": 16,
        "qk_pos_emb_head_dim": 16, "v_head_dim": 16, "rotary_base": 10000.0, "dsa_indexer_n_heads": 4,
        "dsa_indexer_head_dim": 16, "dsa_indexer_topk": 8, "dsa_index_cache": index_cache,
        "dsa_index_cache_full_ranks": [0], "num_moe_experts": 8, "moe_router_topk": 2, "moe_ffn_hidden_size": 32,
        "moe_shared_expert_intermediate_size": 48, "moe_router_score_function": score, "mamba_state_dim": 16,
        "mamba_head_dim": 16, "mamba_expand": 2, "mamba_num_groups": 2, "mamba3_mimo_rank": 2,
        "mamba3_rope_fraction": 0.5, "mamba3_a_floor": 1e-4, "mamba3_a_activation": "softplus",
        "m2rnn_k_head_dim": 16, "m2rnn_v_head_dim": 8, "m2rnn_num_heads": 2, "m2rnn_conv_kernel": 4,
        "ngram_hash": {"orders": [2, 3], "num_heads": 2, "table_size": 97, "embed_dim": 4},
    }


def randomize(model, seed):
    """Random weights that keep activations O(1) (as tests/test_nam56r.cpp's generator); MoE
    routers and Mamba biases made non-trivial so every path matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2 and "table" not in name and "word_embeddings" not in name:
                fan_in = p.shape[-1] if p.dim() == 2 else p[0].numel()
                a = math.sqrt(3.0 / fan_in)
                if name.endswith(("linear_proj.weight", "linear_fc2.weight", "out_proj.weight",
                                  "output_projection.weight")) or ".linear_fc2.weight" in name:
                    a *= 0.5
                if "router" in name:
                    a *= 2.0
                p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * a)
            elif "norm" in name and name.endswith("weight") or name.endswith("layer_norm_weight"):
                p.copy_(1.0 + 0.1 * (torch.rand(p.shape, generator=g) * 2 - 1))
            elif name.endswith("k_norm.bias"):
                p.copy_(0.1 * (torch.rand(p.shape, generator=g) * 2 - 1))
            elif "word_embeddings" in name or "unified_table" in name:
                p.copy_(torch.rand(p.shape, generator=g) * 2 - 1)
            elif name.endswith("dt_bias"):
                p.copy_(-2.0 + 0.5 * (torch.rand(p.shape, generator=g) * 2 - 1))
            elif name.endswith(("B_bias", "C_bias")):
                p.copy_(0.1 * (torch.rand(p.shape, generator=g) * 2 - 1))
            elif name.endswith(("mimo_x", "mimo_z", "mimo_o")):
                p.copy_(1.0 + 0.2 * (torch.rand(p.shape, generator=g) * 2 - 1))
            elif name.endswith(".D") or name.endswith("A_log"):
                p.copy_(0.5 + 0.5 * torch.rand(p.shape, generator=g))
            elif p.dim() == 3 and "conv1d" in name:
                p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * 0.5)
            else:
                p.copy_(0.1 * (torch.rand(p.shape, generator=g) * 2 - 1))
        for m in model.moe_layers():
            if m.sigmoid:
                m.router.expert_bias.copy_(0.2 * (torch.rand(m.E, generator=g) * 2 - 1))


def run_slm(slm, model_dir, ids, out):
    cmd = [slm, "logits", "--model", model_dir, "--ids", ",".join(str(int(i)) for i in ids), "--out", out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("slm logits failed (%d): %s %s" % (r.returncode, r.stdout, r.stderr))
    return st_io.load(out)["logits"]


def engine(slm, T=96, workdir=None):
    """Several variants (softmax / sigmoid router, IndexCache off / causal). T > top_k so the
    DSA layers really select; T < max_position_embeddings."""
    workdir = workdir or tempfile.mkdtemp(prefix="nam56r_engine_")
    variants = [("softmax", "off", 1), ("sigmoid", "off", 2), ("softmax", "causal", 3)]
    for score, cache, seed in variants:
        cfg = engine_config(score, cache)
        torch.manual_seed(seed)
        model = nt.NAM56R(cfg, seed=seed).eval()
        randomize(model, seed)
        g = torch.Generator().manual_seed(100 + seed)
        ids = torch.randint(0, cfg["vocab_size"], (1, T), generator=g)
        with torch.no_grad():
            out = model(ids, return_hidden=True)
        ref = out["logits"][0].double()
        d = os.path.join(workdir, "m_%s_%s" % (score, cache))
        export(model, d, dtype=torch.float32)
        got = run_slm(slm, d, ids[0].tolist(), os.path.join(workdir, "logits_%s_%s.safetensors" % (score, cache)))
        diff = (got.double() - ref).abs().max().item()
        scale = ref.abs().max().item()
        report("engine %s router, IndexCache %s: max|diff| / max|logit|" % (score, cache), diff / scale, 1e-3,
               "(max|diff| %.3e, max|logit| %.3f, argmax agree %.3f)" % (
                   diff, scale, (got.argmax(-1) == ref.argmax(-1)).double().mean().item()))
        if diff / scale > 1e-3:
            localize(model, ids, slm, workdir, cfg)
        # negative control: the same model attending densely in its DSA layers must NOT match,
        # else the check would not see the top-k selection
        model.dsa_dense_warmup = True
        with torch.no_grad():
            dense = model(ids)["logits"][0].double()
        model.dsa_dense_warmup = False
        ctrl = (got.double() - dense).abs().max().item() / scale
        results["engine control %s %s" % (score, cache)] = ctrl
        print("   control: DSA forced dense differs from slm by %.3e of max|logit| (must be >> 1e-3)" % ctrl)
        if ctrl < 1e-2:
            failures.append("engine control %s %s" % (score, cache))
        if torch.cuda.is_available():
            mc = nt.NAM56R(cfg, seed=seed).eval()
            mc.load_state_dict(model.state_dict())
            mc.cuda()
            with torch.no_grad():
                gl = mc(ids.cuda())["logits"][0].double().cpu()
            report("engine %s router, IndexCache %s: PyTorch on CUDA (f32) vs slm" % (score, cache),
                   (got.double() - gl).abs().max().item() / scale, 1e-3)
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                gb = mc(ids.cuda())["logits"][0].double().cpu()
            e = (got.double() - gb).abs().max().item() / scale
            results["info: CUDA bf16 autocast vs slm f32 %s %s" % (score, cache)] = e
            print("   info: PyTorch CUDA bf16 autocast vs slm f32: %.3e of max|logit|" % e)
        # bf16 export: the shipping dtype; slm reads the bf16 weights, PyTorch uses the same rounded weights
        mb = nt.NAM56R(cfg, seed=seed).eval()
        mb.load_state_dict({k: (v.to(torch.bfloat16).float() if v.is_floating_point() else v)
                            for k, v in model.state_dict().items()})
        with torch.no_grad():
            refb = mb(ids)["logits"][0].double()
        db = d + "_bf16"
        export(mb, db, dtype=torch.bfloat16)
        gotb = run_slm(slm, db, ids[0].tolist(), os.path.join(workdir, "logits_bf16.safetensors"))
        report("engine %s router, IndexCache %s, bf16 weights" % (score, cache),
               (gotb.double() - refb).abs().max().item() / refb.abs().max().item(), 1e-3)


def localize(model, ids, slm, workdir, cfg):
    """On a mismatch: truncate the model to its first n layers (same weights) and compare
    again, to name the first layer that differs."""
    full_sd = model.state_dict()
    for n in range(1, cfg["num_layers"] + 1):
        c = dict(cfg, num_layers=n, mtp_num_layers=0)
        m = nt.NAM56R(c).eval()
        sd = {k: v for k, v in full_sd.items() if not k.startswith("mtp.")}
        sd = {k: v for k, v in sd.items()
              if not k.startswith("decoder.layers.") or int(k.split(".")[2]) < n}
        m.load_state_dict(sd, strict=True)
        with torch.no_grad():
            ref = m(ids)["logits"][0].double()
        d = os.path.join(workdir, "prefix_%d" % n)
        export(m, d, dtype=torch.float32)
        got = run_slm(slm, d, ids[0].tolist(), os.path.join(workdir, "prefix.safetensors"))
        e = (got.double() - ref).abs().max().item() / ref.abs().max().item()
        print("   first %2d layers (last: %s): rel err %.3e" % (n, m.plan[-1][0], e), flush=True)
        results.setdefault("localize", []).append({"layers": n, "kind": m.plan[-1][0], "rel": e})
        if e > 1e-3:
            break


def causality_check():
    """Changing token t0 must leave every main logit row < t0 and every MTP depth-k row
    < t0 - k unchanged (training-mode forward: DSA top-k masks, chunked Mamba-3 scan), and
    change row t0."""
    cfg = engine_config()
    m = nt.NAM56R(cfg, seed=6)
    randomize(m, 6)
    m.train()
    ids = torch.randint(0, cfg["vocab_size"], (2, 80), generator=torch.Generator().manual_seed(3))
    t0 = 50
    ids2 = ids.clone()
    ids2[:, t0] = (ids2[:, t0] + 1) % cfg["vocab_size"]
    with torch.no_grad():
        a, b = m(ids), m(ids2)
    report("causality: main rows < t0 unchanged", (a["logits"][:, :t0] - b["logits"][:, :t0]).abs().max().item(), 0)
    for k, (x, y) in enumerate(zip(a["mtp_logits"], b["mtp_logits"]), start=1):
        report("causality: MTP depth %d rows < t0 - %d unchanged" % (k, k),
               (x[:, :t0 - k] - y[:, :t0 - k]).abs().max().item(), 0)
    moved = (a["logits"][:, t0] - b["logits"][:, t0]).abs().max().item()
    report("causality: row t0 changes (1 / max|diff|)", 1.0 / max(moved, 1e-30), 1e3)


def mtp_self_check():
    """The MTP rows as slm's draft() defines them, recomputed by hand: depth 1 at position t
    from the final-normed hidden at t and the embedding of token t + 1."""
    cfg = engine_config()
    m = nt.NAM56R(cfg, seed=5).eval()
    randomize(m, 5)
    ids = torch.randint(0, cfg["vocab_size"], (1, 40))
    with torch.no_grad():
        out = m(ids)
        # prefix consistency: a model run on ids[:, :20] gives the same MTP rows 0..20-k-1
        out2 = m(ids[:, :20])
    for k in (1, 2):
        a, b = out["mtp_logits"][k - 1][0, :20 - k], out2["mtp_logits"][k - 1][0]
        report("mtp depth %d causal (prefix run equals full run)" % k, rel(a, b), 1e-5)


# ------------------------------------------------------------------------------------------
# 3. Training smoke test and throughput


def train_config_15m():
    """About 18M parameters (the bundled specialist's shape at vocab 16384, context 2048)."""
    return nt.specialist_config(16384, 2048)


def smoke_data(n_tokens, vocab, seed=0, walk_seed=None):
    """Learnable synthetic text: a random Markov chain, 4 possible successors per token
    (entropy ln 4 = 1.39 nats once learnt)."""
    g = torch.Generator().manual_seed(seed)
    nxt = torch.randint(0, vocab, (vocab, 4), generator=g).tolist()
    if walk_seed is not None:
        g = torch.Generator().manual_seed(walk_seed)
    choice = torch.randint(0, 4, (n_tokens,), generator=g).tolist()
    ids = [1]
    for i in range(1, n_tokens):
        ids.append(nxt[ids[-1]][choice[i]])
    return torch.tensor(ids, dtype=torch.long)


def train(steps, T, batch, compile_model, max_seconds=1e9, m2rnn_graph=False):
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    cfg = train_config_15m()
    if dev == "cpu":  # a CPU run only checks that the loss falls
        cfg.update(vocab_size=512, padded_vocab_size=512, hidden_size=64, num_layers=12, ffn_hidden_size=128,
                   moe_ffn_hidden_size=32, moe_shared_expert_intermediate_size=64, dsa_indexer_topk=16)
        T, batch = min(T, 64), min(batch, 4)
    torch.manual_seed(0)
    model = nt.NAM56R(cfg).to(dev)
    n_par = nt.count_params(model)
    print("train: %s, %.2fM parameters (%.2fM in the n-gram tables), T %d, batch %d" % (
        dev, n_par / 1e6, (model.embedding.cppmega_ngram_hash.unified_table.weight.numel() / 1e6), T, batch), flush=True)
    data = smoke_data(200_000 if dev == "cuda" else 20_000, min(cfg["vocab_size"], 4096)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.95), weight_decay=0.01)
    if compile_model and hasattr(torch, "compile") and dev == "cuda":
        nt.compile_hot_paths()
    if m2rnn_graph and dev == "cuda":
        nt.cuda_graph_m2rnn(model, batch, T)
    g = torch.Generator(device="cpu").manual_seed(1)
    losses = []
    t_start, tokens = None, 0
    wall0 = time.time()
    for s in range(steps):
        if s > 10 and time.time() - wall0 > max_seconds:
            print("  (stopping at step %d: --max-seconds %.0f)" % (s, max_seconds), flush=True)
            break
        starts = torch.randint(0, data.numel() - T - 2, (batch,), generator=g)
        x = torch.stack([data[i:i + T + 1] for i in starts.tolist()])
        with torch.autocast(device_type=dev, dtype=torch.bfloat16, enabled=dev == "cuda", cache_enabled=False):
            loss, parts = model.loss(x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        for m in model.moe_layers():
            m.update_expert_bias(1e-3)
        if s == 5:  # time after the warm-up / compilation steps
            if dev == "cuda":
                torch.cuda.synchronize()
            t_start, tokens = time.time(), 0
        elif t_start is not None:
            tokens += batch * T
        losses.append(parts["ce"].item())
        if s % 50 == 0 or s == steps - 1:
            print("  step %4d  ce %.4f  mtp %s  aux %.3f  indexer %.4f" % (
                s, losses[-1], ["%.3f" % m.item() for m in parts["mtp"]], parts["aux"].item(),
                parts["indexer"].item()), flush=True)
    if dev == "cuda":
        torch.cuda.synchronize()
    dt = time.time() - t_start
    # Held-out: a fresh walk of the same chain (another choice seed). The training stream is
    # small enough to be memorised (its CE can fall far below ln 4); held-out CE cannot go
    # below the chain's entropy, ~ln 4 = 1.386, unless the model sees the future.
    held = smoke_data(20 * (T + 1), min(cfg["vocab_size"], 4096), seed=0, walk_seed=7).to(dev).view(20, T + 1)
    model.eval()
    with torch.no_grad(), torch.autocast(device_type=dev, dtype=torch.bfloat16, enabled=dev == "cuda"):
        held_ce = model.loss(held)[1]["ce"].item()
    model.train()
    print("train: held-out CE %.3f (chain entropy ~ %.3f)" % (held_ce, math.log(4)), flush=True)
    tps = tokens / dt
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    results["train"] = {"device": dev, "params": n_par, "T": T, "batch": batch, "steps": steps,
                        "loss_first10": first, "loss_last10": last, "tokens_per_s": tps, "held_out_ce": held_ce,
                        "compiled": bool(compile_model), "m2rnn_graph": bool(m2rnn_graph), "steps_done": len(losses),
                        "max_mem_gb": torch.cuda.max_memory_allocated() / 2**30 if dev == "cuda" else 0}
    print("train: loss %.3f -> %.3f, %.0f tokens/s" % (first, last, tps), flush=True)
    report("train: last-10 loss / first-10 loss", last / first, 0.8)
    report("train: held-out CE >= chain entropy - 0.05 (no look-ahead), margin", math.log(4) - 0.05 - held_ce, 0.0)


def profile_layers(T, batch):
    """Forward + backward time of one layer of each kind (and the head) at the 15M config:
    where a training step's time goes (bf16 autocast on CUDA)."""
    global _PROFILE_SHAPE
    _PROFILE_SHAPE = (batch, T)
    dev = "cuda"
    cfg = train_config_15m()
    model = nt.NAM56R(cfg).to(dev)
    seen, prof = set(), {}
    for (kind, _), layer in list(zip(model.plan, model.decoder.layers)) + [(("head", None), None)]:
        if kind in seen:
            continue
        seen.add(kind)
        h = torch.randn(batch, T, cfg["hidden_size"], device=dev, requires_grad=True)

        def run():
            with torch.autocast(device_type=dev, dtype=torch.bfloat16, cache_enabled=False):
                if kind == "head":
                    y = model.head(model.decoder.final_norm(h))
                elif kind in ("mla", "dsa"):
                    y = layer(h, dense=kind == "mla")[0]
                elif kind == "moe":
                    y = layer(h)[0]
                else:
                    y = layer(h)
            y.float().square().mean().backward()
        for _ in range(2):
            run()
        torch.cuda.synchronize()
        t0 = time.time()
        n = 5
        for _ in range(n):
            run()
        torch.cuda.synchronize()
        prof[kind] = (time.time() - t0) / n * 1e3
        print("  profile %-7s fwd+bwd %8.2f ms  (batch %d x T %d)" % (kind, prof[kind], batch, T), flush=True)
        if kind == "m2rnn":
            prof.update(_m2rnn_variants(model, layer, run, n))
    counts = {}
    for kind, _ in model.plan:
        counts[kind] = counts.get(kind, 0) + 1
    est = sum(prof[k] * c for k, c in counts.items()) + prof["head"]
    print("  profile: layer sum for the 12-layer stack + head ~ %.1f ms per step of %d tokens" % (est, batch * T))
    results["profile_ms"] = {"per_layer": prof, "counts": counts, "batch": batch, "T": T, "stack_estimate_ms": est}


def _m2rnn_variants(model, layer, run, n):
    """The launch-bound M2RNN scan: compiled step, CUDA graph, both."""
    out = {}

    def timed(name):
        try:
            for _ in range(2):
                run()
            torch.cuda.synchronize()
            t0 = time.time()
            for _ in range(n):
                run()
            torch.cuda.synchronize()
            out[name] = (time.time() - t0) / n * 1e3
            print("  profile %-20s fwd+bwd %8.2f ms" % (name, out[name]), flush=True)
        except Exception as e:  # report, keep going
            print("  profile %s failed: %s: %s" % (name, type(e).__name__, str(e)[:300]), flush=True)
            out[name] = None

    nt._m2rnn_step_fn = torch.compile(nt._m2rnn_step, dynamic=False)
    timed("m2rnn+compiled-step")
    nt._m2rnn_step_fn = nt._m2rnn_step
    try:
        nt.cuda_graph_m2rnn(model, *_PROFILE_SHAPE)
        timed("m2rnn+cuda-graph")
        layer._graphed = None
        nt._m2rnn_step_fn = torch.compile(nt._m2rnn_step, dynamic=False)
        nt.cuda_graph_m2rnn(model, *_PROFILE_SHAPE)
        timed("m2rnn+graph+compiled")
    except Exception as e:
        print("  profile cuda graph failed: %s: %s" % (type(e).__name__, str(e)[:300]), flush=True)
    layer._graphed = None
    nt._m2rnn_step_fn = nt._m2rnn_step
    return out


_PROFILE_SHAPE = (16, 512)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checks", nargs="*", default=["golden", "engine", "train"])
    ap.add_argument("--slm", default=os.path.join(ROOT, "build-dev", "bin", "slm"))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--T", type=int, default=512)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--compile", action="store_true", help="torch.compile the M2RNN step and the Mamba-3 scan")
    ap.add_argument("--m2rnn-graph", action="store_true", help="CUDA-graph the M2RNN layers in training")
    ap.add_argument("--max-seconds", type=float, default=1e9, help="stop training after this wall time")
    ap.add_argument("--json", default="")
    ap.add_argument("--workdir", default="")
    a = ap.parse_args()
    torch.set_num_threads(max(1, min(16, os.cpu_count() or 1)))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    devs = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    if "golden" in a.checks:
        for dev in devs:
            golden_mamba3(dev)
            golden_m2rnn(dev)
            golden_dsa(dev)
            golden_ngram(dev)
    if "engine" in a.checks:
        causality_check()
        mtp_self_check()
        engine(a.slm, workdir=a.workdir or None)
    if "train" in a.checks:
        train(a.steps, a.T, a.batch, a.compile, a.max_seconds, a.m2rnn_graph)
    if "profile" in a.checks and torch.cuda.is_available():
        profile_layers(a.T, a.batch)
    results["failures"] = failures
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    print("%d passed, %d failed" % (sum(1 for v in results.values() if isinstance(v, dict) and v.get("ok")),
                                    len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
