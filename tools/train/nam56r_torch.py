"""NAM56R in PyTorch, for training: the module tree's state_dict() names ARE slm's canonical
NAM56R checkpoint names (docs: /work/notes/s4/nam56r_schema.md, include/slm/models/nam56r/model.hpp), so an
export is config.json + a safetensors of state_dict() (export.py).

The forward computes what slm computes (include/slm/models/nam56r/model.hpp and the headers it uses; that
C++ code is the contract, this file transcribes it):

  h0 = E[x] + NGram(x)                                       (layers/ngram_embedding.hpp)
  per layer, one pre-norm residual sublayer h += F(h):
    A  MLA / DSA-MLA(RMSNorm(h))   layers/mla.hpp: no latent norms, adjacent-pair RoPE, scale
                                   1/sqrt(nope+rope); layers/dsa.hpp: the Megatron lightning indexer,
                                   causal top-k with ties to the lower key index
    E  MoE(RMSNorm(h))             layers/moe.hpp: softmax over all logits -> top-k -> renormalised, or
                                   sigmoid -> top-k of (s + expert_bias) -> s / (sum + 1e-20);
                                   exact-erf GELU experts fc2(gelu(fc1 x)) + one shared expert
    M  Mamba3(RMSNorm(RMSNorm(h))) layers/mamba3.hpp, MIMO (chunked form of the trapezoidal recurrence)
    R  M2RNN(RMSNorm(h))           layers/m2rnn.hpp (a sequential scan: its tanh recurrence has no
                                   parallel form)
  logits = output_layer[:vocab_size] . RMSNorm_final(h)
  MTP depth k = 1..D: u = eh_proj[enorm(emb(x_{t+k})); hnorm(h^(k-1)_t)], u += MLA(norm u),
  u += fc2 gelu(fc1 norm u), h^(k) = final_layernorm(u), logits^(k) = output_layer h^(k)
  (predicts token t + k + 1; h^(0) = the final-normed hidden).

DSA in training: the forward uses exactly the inference path (the indexer's causal top-k as a
mask on the attention, so train and inference see the same keys). The top-k is not
differentiable; the indexer is trained by its own loss (`indexer_loss`): KL(p_attn || p_index)
over each query's selected keys, p_attn = the layer's attention probabilities summed over heads
and renormalised (detached), p_index = softmax of the index scores; the indexer's inputs are
detached so this loss trains the indexer only (DeepSeek-V3.2's sparse stage). Set
`dsa_dense_warmup=True` on the model to attend densely (no top-k) for a warm-up phase.

MoE aux loss (`moe_aux_loss`): the Switch-Transformer balance E * sum_e f_e P_e (f_e = share of
routed slots, P_e = mean routing probability; for sigmoid routers P uses s normalised per token).
For sigmoid routers `update_expert_bias(rate)` is the aux-free balancing step (bias += rate *
sign(mean load - load_e)); the bias is a buffer, exported as mlp.router.expert_bias.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# ------------------------------------------------------------------------------------------
# The layer plan (include/slm/models/nam56r/pattern.hpp)


def plan_layers(cfg):
    """[(kind, a_rank)] per main layer; kind in mla|dsa|moe|mamba3|m2rnn."""
    pattern = cfg["hybrid_pattern"].upper()
    depth = cfg["num_layers"]
    if "|" in pattern:
        symbols = pattern.replace("|", "")
        if len(symbols) != depth:
            raise ValueError("hybrid_pattern with '|' must hold exactly num_layers symbols")
    else:
        symbols = "".join(pattern[i % len(pattern)] for i in range(depth))
    dsa_ranks = set(cfg.get("dsa_a_layer_ranks") or [])
    r_layers = cfg.get("r_layer_numbers")
    plan, a_rank = [], 0
    for i, s in enumerate(symbols):
        if s == "A":
            plan.append(("dsa" if a_rank in dsa_ranks else "mla", a_rank))
            a_rank += 1
        elif s == "E":
            plan.append(("moe", None))
        elif s in "MR":
            is_r = (i + 1) in r_layers if r_layers is not None else s == "R"
            plan.append(("m2rnn" if is_r else "mamba3", None))
        else:
            raise ValueError("hybrid_pattern symbol %r is not supported" % s)
    return plan


# ------------------------------------------------------------------------------------------
# Small pieces


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * weight (layers/norm.hpp, plain weight)."""

    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).to(x.dtype)


def rms(x, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def linear(n_out, n_in):
    return nn.Linear(n_in, n_out, bias=False)


def rope_inv_freq(dim, base):
    """layers/rope.hpp: 1 / base^(2i/dim) in double, stored as float32."""
    i = torch.arange(dim // 2, dtype=torch.float64)
    return (1.0 / torch.pow(torch.tensor(base, dtype=torch.float64), 2.0 * i / dim)).float()


def rope_cos_sin(T, inv_freq, device, offset=0):
    """cos, sin [T, dim/2] of the float32 angle pos * inv_freq (as layers/rope.hpp)."""
    pos = torch.arange(offset, offset + T, device=device, dtype=torch.float32)
    ang = pos[:, None] * inv_freq.to(device)[None, :]
    return torch.cos(ang.double()).float(), torch.sin(ang.double()).float()


def rope_interleaved(x, cos, sin):
    """Rotate pairs (2i, 2i+1) of the last dim; x [..., T, *, dim] with cos/sin [T, dim/2]
    broadcast over the dims between T and the last (caller shapes them)."""
    a = x[..., 0::2]
    b = x[..., 1::2]
    ra = a * cos - b * sin
    rb = b * cos + a * sin
    return torch.stack((ra, rb), dim=-1).flatten(-2)


def gelu(x):
    return F.gelu(x)  # exact erf GELU (layers/activation.hpp act_gelu)


# ------------------------------------------------------------------------------------------
# Attention: MLA (models/nam56r/bind.hpp load_mla) and the Megatron lightning indexer (layers/dsa.hpp)


class Indexer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, ql = cfg["hidden_size"], cfg["q_lora_rank"]
        self.nI, self.dI = cfg["dsa_indexer_n_heads"], cfg["dsa_indexer_head_dim"]
        self.top_k = cfg["dsa_indexer_topk"]
        self.relu = cfg.get("dsa_indexer_scoring_relu", True)
        self.linear_wq_b = linear(self.nI * self.dI, ql)
        self.linear_wk = linear(self.dI, d)
        self.k_norm = nn.LayerNorm(self.dI, eps=1e-5)
        self.linear_weights_proj = linear(self.nI, d)
        self.register_buffer("inv_freq", rope_inv_freq(self.dI, cfg["rotary_base"]), persistent=False)

    def scores(self, x, q_latent):
        """I(t, j) [B, T, T] (future keys -inf). x: attention input [B, T, d]; q_latent [B, T, q_lora]."""
        B, T, _ = x.shape
        q = self.linear_wq_b(q_latent).view(B, T, self.nI, self.dI).float()
        k = self.k_norm(self.linear_wk(x).float())
        w = self.linear_weights_proj(x).float() * (1.0 / math.sqrt(self.nI * self.dI))
        cos, sin = rope_cos_sin(T, self.inv_freq, x.device)
        q = rope_interleaved(q, cos[:, None, :], sin[:, None, :])
        k = rope_interleaved(k, cos, sin)
        dots = torch.einsum("bthi,bsi->bths", q, k)  # [B, T, nI, T]
        if self.relu:
            dots = F.relu(dots)
        s = torch.einsum("bths,bth->bts", dots, w)
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        return s.masked_fill(~causal, float("-inf"))

    def select(self, s):
        """Boolean [B, T, T]: the causal top-k of each query (all visible keys while t < top_k);
        equal scores rank the lower key index first (dsa_select_top_k, stable_ties)."""
        T = s.shape[-1]
        k = min(self.top_k, T)
        order = torch.sort(s, dim=-1, descending=True, stable=True).indices[..., :k]
        sel = torch.zeros_like(s, dtype=torch.bool).scatter_(-1, order, True)
        causal = torch.ones(T, T, dtype=torch.bool, device=s.device).tril()
        return sel & causal


class MLAAttention(nn.Module):
    """`...self_attention`: linear_q_down_proj, linear_q_up_proj, linear_kv_down_proj,
    linear_kv_up_proj (per head: nope K rows, then v rows), linear_proj; DSA adds
    core_attention.indexer."""

    def __init__(self, cfg, dsa):
        super().__init__()
        d = cfg["hidden_size"]
        self.H, self.nope, self.rope, self.v = (cfg["num_attention_heads"], cfg["qk_head_dim"],
                                                cfg["qk_pos_emb_head_dim"], cfg["v_head_dim"])
        self.kv_lora = cfg["kv_lora_rank"]
        self.linear_q_down_proj = linear(cfg["q_lora_rank"], d)
        self.linear_q_up_proj = linear(self.H * (self.nope + self.rope), cfg["q_lora_rank"])
        self.linear_kv_down_proj = linear(self.kv_lora + self.rope, d)
        self.linear_kv_up_proj = linear(self.H * (self.nope + self.v), self.kv_lora)
        self.linear_proj = linear(d, self.H * self.v)
        self.scale = 1.0 / math.sqrt(self.nope + self.rope)
        self.register_buffer("inv_freq", rope_inv_freq(self.rope, cfg["rotary_base"]), persistent=False)
        if dsa:
            self.core_attention = nn.Module()
            self.core_attention.indexer = Indexer(cfg)
        self.dsa = dsa

    def forward(self, x, shared_sel=None, dense=False):
        """x [B, T, d] -> (out [B, T, d], sel or None, indexer KL loss or None)."""
        B, T, _ = x.shape
        H, nope, rope, vd = self.H, self.nope, self.rope, self.v
        q_latent = self.linear_q_down_proj(x)
        q = self.linear_q_up_proj(q_latent).view(B, T, H, nope + rope)
        kv = self.linear_kv_down_proj(x)
        latent, kr = kv[..., :self.kv_lora], kv[..., self.kv_lora:]
        cos, sin = rope_cos_sin(T, self.inv_freq, x.device)
        q_rope = rope_interleaved(q[..., nope:], cos[:, None, :].to(q.dtype), sin[:, None, :].to(q.dtype))
        kr = rope_interleaved(kr, cos.to(kr.dtype), sin.to(kr.dtype))  # [B, T, rope], shared by the heads
        kvu = self.linear_kv_up_proj(latent).view(B, T, H, nope + vd)
        k_nope, v = kvu[..., :nope], kvu[..., nope:]
        qh = torch.cat((q[..., :nope], q_rope), -1).transpose(1, 2)                       # [B, H, T, qk]
        kh = torch.cat((k_nope, kr[:, :, None, :].expand(B, T, H, rope)), -1).transpose(1, 2)
        vh = v.transpose(1, 2)                                                            # [B, H, T, v]
        sel, idx_loss = None, None
        if self.dsa and shared_sel is None and not dense:
            ix = self.core_attention.indexer
            s = ix.scores(x.detach(), q_latent.detach())
            sel = ix.select(s.detach())
        elif shared_sel is not None and not dense:
            sel = shared_sel
        if sel is None:
            o = _sdpa_causal(qh, kh, vh, self.scale)
        else:
            # [B, H, T, T] scores: explicit, so the indexer loss can read the probabilities
            att = torch.matmul(qh, kh.transpose(-1, -2)).float() * self.scale
            att = att.masked_fill(~sel[:, None], float("-inf"))
            p = torch.softmax(att, -1)
            o = torch.matmul(p.to(vh.dtype), vh)
            if self.dsa and shared_sel is None and self.training:
                target = p.detach().sum(1)
                target = target / target.sum(-1, keepdim=True)
                logq = torch.log_softmax(s.masked_fill(~sel, float("-inf")), -1)
                kl = target * (torch.log(target.clamp_min(1e-20)) - logq)
                idx_loss = kl.masked_fill(~sel, 0.0).sum(-1).mean()
        out = self.linear_proj(o.transpose(1, 2).reshape(B, T, H * vd))
        return out, sel, idx_loss


def _sdpa_causal(q, k, v, scale):
    if hasattr(F, "scaled_dot_product_attention"):
        try:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        except TypeError:  # torch < 2.1: no scale argument
            pass
    T = q.shape[-2]
    att = torch.matmul(q, k.transpose(-1, -2)).float() * scale
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    p = torch.softmax(att.masked_fill(~causal, float("-inf")), -1)
    return torch.matmul(p.to(v.dtype), v)


class AttnLayer(nn.Module):
    def __init__(self, cfg, dsa):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg["hidden_size"], cfg["layernorm_epsilon"])
        self.self_attention = MLAAttention(cfg, dsa)

    def forward(self, h, shared_sel=None, dense=False):
        y, sel, loss = self.self_attention(self.input_layernorm(h), shared_sel, dense)
        return h + y, sel, loss


# ------------------------------------------------------------------------------------------
# MoE (models/nam56r/bind.hpp load_moe)


class _IndexedWeights(nn.Module):
    """Holds weight0 .. weight{E-1} (the canonical expert names)."""

    def __init__(self, E, n_out, n_in):
        super().__init__()
        for e in range(E):
            w = torch.empty(n_out, n_in)
            nn.init.kaiming_uniform_(w, a=math.sqrt(5))
            self.register_parameter("weight%d" % e, nn.Parameter(w))
        self.E = E

    def stacked(self):
        return torch.stack([getattr(self, "weight%d" % e) for e in range(self.E)])


class MoE(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, E = cfg["hidden_size"], cfg["num_moe_experts"]
        self.E, self.k = E, cfg["moe_router_topk"]
        self.sigmoid = cfg.get("moe_router_score_function", "softmax") == "sigmoid"
        self.router = nn.Module()
        self.router.weight = nn.Parameter(torch.empty(E, d).normal_(0, 0.02))
        if self.sigmoid:
            self.router.register_buffer("expert_bias", torch.zeros(E))
        self.experts = nn.Module()
        self.experts.linear_fc1 = _IndexedWeights(E, cfg["moe_ffn_hidden_size"], d)
        self.experts.linear_fc2 = _IndexedWeights(E, d, cfg["moe_ffn_hidden_size"])
        fs = cfg.get("moe_shared_expert_intermediate_size", 0)
        if fs:
            self.shared_experts = nn.Module()
            self.shared_experts.linear_fc1 = linear(fs, d)
            self.shared_experts.linear_fc2 = linear(d, fs)
        self.has_shared = bool(fs)
        self.last_load = None

    def forward(self, x):
        """x [B, T, d] -> (y, aux loss)."""
        B, T, d = x.shape
        xf = x.reshape(B * T, d)
        logits = F.linear(xf, self.router.weight).float()  # [N, E]
        if self.sigmoid:
            s = torch.sigmoid(logits)
            choice = s + self.router.expert_bias.float()
            idx = torch.topk(choice, self.k, dim=-1).indices
            ws = s.gather(-1, idx)
            ws = ws / (ws.sum(-1, keepdim=True) + 1e-20)
            probs = s / s.sum(-1, keepdim=True)
        else:
            p = torch.softmax(logits, -1)
            idx = torch.topk(p, self.k, dim=-1).indices
            ws = p.gather(-1, idx)
            ws = ws / ws.sum(-1, keepdim=True)
            probs = p
        combine = torch.zeros_like(logits).scatter(-1, idx, ws)  # [N, E], zero outside the top-k
        # Dense over the experts (E/k times the routed FLOPs; fine at this size, no gathers).
        w1 = self.experts.linear_fc1.stacked()  # [E, f, d]
        w2 = self.experts.linear_fc2.stacked()  # [E, d, f]
        hdn = gelu(torch.einsum("nd,efd->enf", xf, w1))
        ye = torch.einsum("enf,edf->end", hdn, w2)
        y = torch.einsum("end,ne->nd", ye, combine.to(ye.dtype))
        if self.has_shared:
            y = y + self.shared_experts.linear_fc2(gelu(self.shared_experts.linear_fc1(xf)))
        load = torch.zeros(self.E, device=x.device).scatter_add(0, idx.reshape(-1), torch.ones(idx.numel(), device=x.device))
        f = load / idx.numel()
        aux = self.E * (f.detach() * probs.mean(0)).sum()
        self.last_load = load.detach()
        return y.view(B, T, d), aux

    @torch.no_grad()
    def update_expert_bias(self, rate):
        if self.sigmoid and self.last_load is not None:
            self.router.expert_bias += rate * torch.sign(self.last_load.mean() - self.last_load)


class MoELayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.pre_mlp_layernorm = RMSNorm(cfg["hidden_size"], cfg["layernorm_epsilon"])
        self.mlp = MoE(cfg)

    def forward(self, h):
        y, aux = self.mlp(self.pre_mlp_layernorm(h))
        return h + y, aux


# ------------------------------------------------------------------------------------------
# Mamba-3 MIMO (layers/mamba3.hpp)


def mamba3_scan(q, k, v, adt, gam, dlt, chunk=32):
    """The trapezoidal MIMO recurrence from a zero state, chunked (layers/mamba3.hpp forward()).
    q, k [B, T, H, R, N]; v [B, T, H, R, P]; adt = A dt, gam = lambda dt, dlt = (1 - lambda) dt
    [B, T, H]. Returns y [B, T, H, R, P] without the D skip.
    With w_j = gam_j + dlt_{j+1} and c = the in-chunk cumsum of adt:
      y_i = exp(c_i) S_in q_i + sum_{j<i} exp(c_i - c_j) w_j (q_i . k_j) v_j + gam_i (q_i . k_i) v_i
      S_out = exp(c_last) S_in + sum_j exp(c_last - c_j) w_j v_j k_j^T."""
    B, T, H, R, N = q.shape
    P = v.shape[-1]
    w = gam + F.pad(dlt[:, 1:], (0, 0, 0, 1))
    L = min(chunk, T)
    nc = (T + L - 1) // L
    pad = nc * L - T
    if pad:
        q, k, v = (F.pad(t, (0, 0, 0, 0, 0, 0, 0, pad)) for t in (q, k, v))
        adt, gam, w = (F.pad(t, (0, 0, 0, pad)) for t in (adt, gam, w))
    q = q.view(B, nc, L, H, R, N)
    k = k.view(B, nc, L, H, R, N)
    v = v.view(B, nc, L, H, R, P)
    adt, gam, w = (t.view(B, nc, L, H).float() for t in (adt, gam, w))
    c = torch.cumsum(adt, 2)                                           # [B, nc, L, H]
    ci = c.permute(0, 1, 3, 2)                                         # [B, nc, H, L]
    diff = ci[..., :, None] - ci[..., None, :]                         # [B, nc, H, i, j]
    lower = torch.ones(L, L, dtype=torch.bool, device=q.device).tril(-1)
    eye = torch.eye(L, dtype=torch.bool, device=q.device)
    dec = torch.exp(diff.masked_fill(~lower, float("-inf"))) * w.permute(0, 1, 3, 2)[..., None, :]
    dec = dec + torch.diag_embed(gam.permute(0, 1, 3, 2)) * eye        # gamma_i on the diagonal
    scores = torch.einsum("bcihrn,bcjhsn->bchirjs", q, k)
    m = scores * dec[:, :, :, :, None, :, None].to(scores.dtype)
    y = torch.einsum("bchirjs,bcjhsp->bcihrp", m, v)
    # Chunk-local end states and their carry across chunks.
    last = c[:, :, -1:, :]                                             # [B, nc, 1, H]
    wt = (torch.exp(last - c) * w).to(v.dtype)                         # [B, nc, L, H]
    s_loc = torch.einsum("bcjhsn,bcjh,bcjhsp->bchnp", k, wt, v)        # [B, nc, H, N, P]
    el = torch.exp(last[:, :, 0, :]).to(v.dtype)                       # [B, nc, H]
    states = []
    S = torch.zeros(B, H, N, P, dtype=v.dtype, device=v.device)
    for ch in range(nc):
        states.append(S)
        S = S * el[:, ch, :, None, None] + s_loc[:, ch]
    S_in = torch.stack(states, 1)                                      # [B, nc, H, N, P]
    y = y + torch.einsum("bcihrn,bchnp,bcih->bcihrp", q, S_in, torch.exp(c).to(q.dtype))
    return y.reshape(B, nc * L, H, R, P)[:, :T]


mamba3_scan_fn = mamba3_scan


def mamba3_scan_reference(q, k, v, adt, gam, dlt):
    """The recurrence token by token (layers/mamba3.hpp ssm_sequential), for tests."""
    B, T, H, R, N = q.shape
    P = v.shape[-1]
    S = torch.zeros(B, H, P, N, dtype=torch.float64)
    kp = torch.zeros(B, H, R, N, dtype=torch.float64)
    vp = torch.zeros(B, H, R, P, dtype=torch.float64)
    ys = []
    for t in range(T):
        a = torch.exp(adt[:, t].double())[..., None, None]
        beta = dlt[:, t].double()[..., None, None] * a
        g = gam[:, t].double()[..., None, None]
        kt, vt = k[:, t].double(), v[:, t].double()
        S = a * S + beta * torch.einsum("bhrp,bhrn->bhpn", vp, kp) + g * torch.einsum("bhrp,bhrn->bhpn", vt, kt)
        ys.append(torch.einsum("bhpn,bhrn->bhrp", S, q[:, t].double()))
        kp, vp = kt, vt
    return torch.stack(ys, 1)


class Mamba3Mixer(nn.Module):
    """`mixer.impl.mixer`: in_proj (z | x | B | C | dd_dt | dd_A | trap | angles), dt_bias, D,
    B_bias, C_bias [H, R, N], B_norm, C_norm [N], mimo_x/z/o [H, R, P], out_proj
    (norm.weight [d_inner] only with outproj_norm, which NAM56R does not use)."""

    def __init__(self, d_model, d_state, headdim, expand, ngroups, rank, rope_fraction=0.5, a_floor=1e-4,
                 a_activation="softplus", eps=1e-5, outproj_norm=False, chunk=32):
        super().__init__()
        self.d, self.N, self.P, self.G, self.R = d_model, d_state, headdim, ngroups, rank
        self.Di = expand * d_model
        self.H = self.Di // headdim
        split = int(float(d_state) * rope_fraction)
        split -= split % 2
        self.S = split // 2
        self.a_floor, self.a_activation, self.eps, self.outproj_norm = a_floor, a_activation, eps, outproj_norm
        self.chunk = chunk
        H, R, N, P = self.H, self.R, self.N, self.P
        d_in = 2 * self.Di + 2 * R * ngroups * N + 3 * H + self.S
        self.in_proj = linear(d_in, d_model)
        # mamba_ssm-style init: dt in [1e-3, 1e-1] through the inverse softplus
        dt = torch.exp(torch.rand(H) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.D = nn.Parameter(torch.ones(H))
        self.B_bias = nn.Parameter(torch.ones(H, R, N))
        self.C_bias = nn.Parameter(torch.ones(H, R, N))
        self.B_norm = RMSNorm(N, eps)
        self.C_norm = RMSNorm(N, eps)
        self.mimo_x = nn.Parameter(torch.full((H, R, P), 1.0 / R))
        self.mimo_z = nn.Parameter(torch.ones(H, R, P))
        self.mimo_o = nn.Parameter(torch.full((H, R, P), 1.0 / R))
        if outproj_norm:
            self.norm = RMSNorm(self.Di, eps)
        self.out_proj = linear(d_model, self.Di)

    def forward(self, u, reference=False):
        B, T, _ = u.shape
        H, R, N, P, G, S, Di = self.H, self.R, self.N, self.P, self.G, self.S, self.Di
        zx = self.in_proj(u)
        RGN = R * G * N
        z, x, Bm, Cm, dd_dt, dd_A, trap, ang = torch.split(zx, [Di, Di, RGN, RGN, H, H, H, S], -1)
        dt = F.softplus(dd_dt.float() + self.dt_bias.float())
        if self.a_activation == "softplus":
            f = F.softplus(dd_A.float())
        else:  # heavy_tail
            a = dd_A.float()
            f = torch.where(a >= 0, 1.0 + a, 1.0 / (1.0 - a.clamp(max=0)))
        A = -torch.clamp(f, min=self.a_floor)
        adt = A * dt
        lam = torch.sigmoid(trap.float())
        gam, dlt = lam * dt, (1.0 - lam) * dt
        # Rotary angles: theta_h[s] = cumsum_t pi tanh(ang[s]) dt_h, wrapped to [0, 2 pi)
        rate = math.pi * torch.tanh(ang.float())                                   # [B, T, S]
        theta = torch.cumsum((rate[:, :, None, :] * dt[..., None]).double(), 1)     # [B, T, H, S]
        theta = torch.remainder(theta, 2 * math.pi).float()
        cos, sin = torch.cos(theta)[:, :, :, None, :], torch.sin(theta)[:, :, :, None, :]
        hpg = H // G
        gidx = torch.arange(H, device=u.device) // hpg

        def prep(M, norm_w, bias):
            M = rms(M.float().view(B, T, R, G, N), self.eps) * norm_w.float()
            M = M[:, :, :, gidx, :].permute(0, 1, 3, 2, 4) + bias.float()          # [B, T, H, R, N]
            a, b = M[..., :S], M[..., N // 2:N // 2 + S]                            # MIMO pairs (s, s + N/2)
            ra, rb = a * cos - b * sin, a * sin + b * cos
            return torch.cat((ra, M[..., S:N // 2], rb, M[..., N // 2 + S:]), -1)

        k = prep(Bm, self.B_norm.weight, self.B_bias)
        q = prep(Cm, self.C_norm.weight, self.C_bias)
        xh = x.float().view(B, T, H, P)
        v = xh[:, :, :, None, :] * self.mimo_x.float()                              # [B, T, H, R, P]
        if reference:
            y = mamba3_scan_reference(q, k, v, adt, gam, dlt).float()
        else:
            y = mamba3_scan_fn(q, k, v, adt, gam, dlt, self.chunk)
        y = y + self.D.float()[:, None, None] * v
        if self.outproj_norm:
            wn = self.norm.weight.float().view(H, 1, P)
            y = rms(y, self.eps) * wn
        zh = z.float().view(B, T, H, 1, P)
        o = (y * F.silu(zh * self.mimo_z.float()) * self.mimo_o.float()).sum(3)      # [B, T, H, P]
        return self.out_proj(o.reshape(B, T, Di).to(u.dtype))


class Mamba3Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, eps = cfg["hidden_size"], cfg["layernorm_epsilon"]
        self.norm = RMSNorm(d, eps)
        self.mixer = nn.Module()
        self.mixer.impl = nn.Module()
        self.mixer.impl.pre_norm = RMSNorm(d, eps)
        self.mixer.impl.mixer = Mamba3Mixer(d, cfg["mamba_state_dim"], cfg["mamba_head_dim"], cfg["mamba_expand"],
                                            cfg["mamba_num_groups"], cfg["mamba3_mimo_rank"],
                                            cfg.get("mamba3_rope_fraction", 0.5), cfg.get("mamba3_a_floor", 1e-4),
                                            cfg.get("mamba3_a_activation", "softplus"), eps)

    def forward(self, h):
        return h + self.mixer.impl.mixer(self.mixer.impl.pre_norm(self.norm(h)))


# ------------------------------------------------------------------------------------------
# M2RNN (layers/m2rnn.hpp)


def m2rnn_scan(q, k, v, f, W, h0=None):
    """q, k [B, T, K] (one q and one k head shared by all heads), v [B, T, H, V], f [B, T, H],
    W [H, V, V]. M_t = f M + (1 - f) tanh(M W + k v^T); y_t = M_t^T q_t. -> (y [B, T, H, V], M)."""
    B, T, K = q.shape
    H, V = v.shape[2], v.shape[3]
    M = torch.zeros(B, H, K, V, dtype=q.dtype, device=q.device) if h0 is None else h0
    ys = []
    for t in range(T):
        M, y = _m2rnn_step_fn(M, W, k[:, t], v[:, t], f[:, t], q[:, t])
        ys.append(y)
    return torch.stack(ys, 1), M


def _m2rnn_step(M, W, kt, vt, ft, qt):
    """One token: M [B, H, K, V], kt qt [B, K], vt [B, H, V], ft [B, H] -> (M, y [B, H, V])."""
    kv = kt[:, None, :, None] * vt[:, :, None, :]                          # [B, H, K, V]
    f = ft[:, :, None, None]
    M = f * M + (1 - f) * torch.tanh(torch.matmul(M, W) + kv)
    return M, torch.einsum("bhkv,bk->bhv", M, qt)


_m2rnn_step_fn = _m2rnn_step


def compile_hot_paths():
    """torch.compile the per-token M2RNN step and the Mamba-3 chunked scan (small graphs; the
    token loop itself stays in Python: compiling it would unroll T steps)."""
    global _m2rnn_step_fn, mamba3_scan_fn
    _m2rnn_step_fn = torch.compile(_m2rnn_step, dynamic=False)
    mamba3_scan_fn = torch.compile(mamba3_scan, dynamic=False)


class M2RNNMixer(nn.Module):
    """`mixer.impl`: input_projection (c | f~ | g), conv1d, A_log, dt_bias, state_weight, D,
    g_norm, output_projection (one q and one k head)."""

    def __init__(self, cfg):
        super().__init__()
        d = cfg["hidden_size"]
        self.K, self.V = cfg["m2rnn_k_head_dim"], cfg["m2rnn_v_head_dim"]
        self.H = cfg["m2rnn_num_heads"] or max(1, d // (self.K + self.V))
        self.Kc = cfg["m2rnn_conv_kernel"]
        H, K, V = self.H, self.K, self.V
        self.cd = 2 * K + H * V
        self.input_projection = linear(self.cd + H + H * V, d)
        if self.Kc > 0:
            self.conv1d = nn.Conv1d(self.cd, self.cd, self.Kc, groups=self.cd, bias=True)
        self.A_log = nn.Parameter(torch.log(torch.empty(H).uniform_(1, 16)))
        dt = torch.exp(torch.rand(H) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.state_weight = nn.Parameter(torch.randn(H, V, V) * (0.5 / math.sqrt(V)))
        self.D = nn.Parameter(torch.ones(H, V))
        self.g_norm = RMSNorm(H * V, cfg["layernorm_epsilon"])
        self.output_projection = linear(d, H * V)

    def forward(self, u):
        B, T, _ = u.shape
        H, K, V, cd = self.H, self.K, self.V, self.cd
        zx = self.input_projection(u)
        c, fr, g = torch.split(zx, [cd, H, H * V], -1)
        if self.Kc > 0:
            c = F.silu(self.conv1d(F.pad(c.transpose(1, 2), (self.Kc - 1, 0))).transpose(1, 2))
        q, k, v = torch.split(c.float(), [K, K, H * V], -1)
        v = v.reshape(B, T, H, V)
        f = torch.exp(-(torch.exp(self.A_log.float()) * F.softplus(fr.float() + self.dt_bias.float())))
        y, _ = m2rnn_scan(q, k, v, f, self.state_weight.float())
        y = y + v * self.D.float()
        y = y.reshape(B, T, H * V) * F.silu(g.float())
        return self.output_projection(self.g_norm(y).to(u.dtype))


class M2RNNLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.norm = RMSNorm(cfg["hidden_size"], cfg["layernorm_epsilon"])
        self.mixer = nn.Module()
        self.mixer.impl = M2RNNMixer(cfg)

    def forward(self, h):
        x = self.norm(h)
        g = getattr(self, "_graphed", None)
        if g is not None and self.training and tuple(x.shape) == g[1] and x.requires_grad:
            return h + g[0](x)
        return h + self.mixer.impl(x)


class _Call(nn.Module):
    def __init__(self, mod):
        super().__init__()
        self.mod = mod

    def forward(self, x):
        return self.mod(x)


def cuda_graph_m2rnn(model, batch, T):
    """Capture each M2RNN mixer's forward and backward as CUDA graphs for training inputs
    [batch, T, d] (the layer's f32 normed input) under bf16 autocast: the token loop is
    launch-bound (T steps of a few small kernels), a graph replays it without the launches.
    Used only in training mode at exactly that shape (eval / other shapes run eagerly).
    Training must then run autocast with cache_enabled=False."""
    d = model.cfg["hidden_size"]
    for layer in model.decoder.layers:
        if isinstance(layer, M2RNNLayer):
            call = _Call(layer.mixer.impl)
            x = torch.randn(batch, T, d, device="cuda", requires_grad=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
                call = torch.cuda.make_graphed_callables(call, (x,))
            layer._graphed = (call, (batch, T, d))


# ------------------------------------------------------------------------------------------
# N-gram hash embedding (layers/ngram_embedding.hpp)

_PRIMES = [499801, 499819, 499853, 499879, 499883, 499897, 499903, 499927,
           499943, 499957, 499969, 499973, 499979, 500009, 500029, 500041]


def ngram_table_sizes(table_size, J):
    near = [p for p in _PRIMES if 2 * abs(p - table_size) < table_size]
    return near[:J] if len(near) >= J else [table_size + j for j in range(J)]


class NgramHash(nn.Module):
    """embedding.cppmega_ngram_hash: unified_table [sum P_j, E], out_proj [d, J E],
    hash_mults [J, M], hash_bias [J] (int64 buffers, random at construction)."""

    def __init__(self, d, orders, num_heads, table_size, embed_dim, generator=None):
        super().__init__()
        self.orders, self.nh, self.E = list(orders), num_heads, embed_dim
        J, M = len(orders) * num_heads, max(orders)
        self.J, self.M = J, M
        sizes = ngram_table_sizes(table_size, J)
        offs = [sum(sizes[:j]) for j in range(J)]
        self.unified_table = nn.Embedding(sum(sizes), embed_dim)
        nn.init.normal_(self.unified_table.weight, 0, 1.0)
        self.out_proj = linear(d, J * embed_dim)
        nn.init.normal_(self.out_proj.weight, 0, 0.02 / math.sqrt(J))
        mults = torch.randint(0, 2 ** 30, (J, M), generator=generator, dtype=torch.int64) * 2 + 1
        bias = torch.randint(0, 2 ** 31, (J,), generator=generator, dtype=torch.int64)
        self.register_buffer("hash_mults", mults)
        self.register_buffer("hash_bias", bias)
        self.register_buffer("_sizes", torch.tensor(sizes, dtype=torch.int64), persistent=False)
        self.register_buffer("_offsets", torch.tensor(offs, dtype=torch.int64), persistent=False)
        order_of = [orders[j // num_heads] for j in range(J)]
        self.register_buffer("_order_mask", torch.tensor([[1 if p < order_of[j] else 0 for j in range(J)]
                                                          for p in range(M)], dtype=torch.int64), persistent=False)

    def indices(self, ids):
        """ids [B, T] -> unified rows [B, T, J] (zero padding before the start)."""
        ids = ids.long()
        B, T = ids.shape
        h = torch.zeros(B, T, self.J, dtype=torch.int64, device=ids.device)
        for p in range(self.M):
            u = F.pad(ids, (p, 0))[:, :T] if p else ids                      # x_{t-p}, 0 before the start
            term = u[..., None] * self.hash_mults[:, p] * self._order_mask[p]  # int64, wraps as torch does
            h = torch.bitwise_xor(h, term)
        h = torch.bitwise_xor(h, self.hash_bias)
        return self._offsets + torch.remainder(h, self._sizes)

    def forward(self, ids):
        e = self.unified_table(self.indices(ids))                            # [B, T, J, E]
        return self.out_proj(e.flatten(2))


# ------------------------------------------------------------------------------------------
# MTP (spec §2.7)


class MTPMLP(nn.Module):
    def __init__(self, d, ffn, eps):
        super().__init__()
        self.mlp = nn.Module()
        self.mlp.linear_fc1 = linear(ffn, d)
        self.mlp.linear_fc1.layer_norm_weight = nn.Parameter(torch.ones(d))
        self.mlp.linear_fc2 = linear(d, ffn)
        self.eps = eps

    def forward(self, h):
        fc1 = self.mlp.linear_fc1
        xn = (rms(h.float(), self.eps) * fc1.layer_norm_weight.float()).to(h.dtype)
        return h + self.mlp.linear_fc2(gelu(fc1(xn)))


class MTPDepth(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, eps = cfg["hidden_size"], cfg["layernorm_epsilon"]
        self.enorm = RMSNorm(d, eps)
        self.hnorm = RMSNorm(d, eps)
        self.eh_proj = linear(d, 2 * d)
        self.final_layernorm = RMSNorm(d, eps)
        self.mtp_model_layer = nn.Module()
        self.mtp_model_layer.layers = nn.ModuleList([AttnLayer(cfg, False), MTPMLP(d, cfg["ffn_hidden_size"], eps)])

    def forward(self, e, hprev):
        u = self.eh_proj(torch.cat((self.enorm(e), self.hnorm(hprev)), -1))
        u, _, _ = self.mtp_model_layer.layers[0](u)
        u = self.mtp_model_layer.layers[1](u)
        return self.final_layernorm(u)


# ------------------------------------------------------------------------------------------
# The model


class NAM56R(nn.Module):
    def __init__(self, cfg, seed=0):
        super().__init__()
        self.cfg = dict(cfg)
        d, eps = cfg["hidden_size"], cfg["layernorm_epsilon"]
        self.plan = plan_layers(cfg)
        g = torch.Generator().manual_seed(seed)
        self.embedding = nn.Module()
        self.embedding.word_embeddings = nn.Embedding(cfg["padded_vocab_size"], d)
        nn.init.normal_(self.embedding.word_embeddings.weight, 0, 1.0)
        ng = cfg.get("ngram_hash")
        if ng:
            self.embedding.cppmega_ngram_hash = NgramHash(d, ng["orders"], ng["num_heads"], ng["table_size"],
                                                          ng["embed_dim"], generator=g)
        self.has_ngram = bool(ng)
        if cfg.get("structure_embedding"):
            raise NotImplementedError("structure_embedding is not implemented in the PyTorch model")
        self.decoder = nn.Module()
        layers = []
        for kind, _ in self.plan:
            if kind in ("mla", "dsa"):
                layers.append(AttnLayer(cfg, kind == "dsa"))
            elif kind == "moe":
                layers.append(MoELayer(cfg))
            elif kind == "mamba3":
                layers.append(Mamba3Layer(cfg))
            else:
                layers.append(M2RNNLayer(cfg))
        self.decoder.layers = nn.ModuleList(layers)
        self.decoder.final_norm = RMSNorm(d, eps)
        self.output_layer = linear(cfg["padded_vocab_size"], d)
        nn.init.normal_(self.output_layer.weight, 0, 1.0 / math.sqrt(d))
        D = cfg.get("mtp_num_layers", 0)
        if D:
            self.mtp = nn.Module()
            self.mtp.layers = nn.ModuleList([MTPDepth(cfg) for _ in range(D)])
        self.V = cfg["vocab_size"]
        # IndexCache "causal": which DSA ranks run their indexer
        self.index_cache = cfg.get("dsa_index_cache", "off")
        self.full_ranks = set(cfg.get("dsa_index_cache_full_ranks") or [])
        self.dsa_dense_warmup = False

    def embed(self, ids):
        e = self.embedding.word_embeddings(ids)
        if self.has_ngram:
            e = e + self.embedding.cppmega_ngram_hash(ids).to(e.dtype)
        return e

    def head(self, h):
        return F.linear(h, self.output_layer.weight[:self.V])  # padding rows never computed

    def forward(self, ids, return_hidden=False):
        """ids [B, T] (int64) -> dict: logits [B, T, V]; mtp_logits: list, depth k (1-based) of
        [B, T - k, V] (row t predicts token t + k + 1); aux: MoE balance loss (sum over
        layers); indexer: DSA indexer KL loss (sum over layers, 0 when none)."""
        emb = self.embed(ids)
        h = emb
        aux = h.new_zeros((), dtype=torch.float32)
        idx_loss = h.new_zeros((), dtype=torch.float32)
        shared_sel, dsa_rank = None, 0
        hidden = []
        for (kind, _), layer in zip(self.plan, self.decoder.layers):
            if kind in ("mla", "dsa"):
                reuse = None
                if kind == "dsa" and self.index_cache == "causal" and dsa_rank not in self.full_ranks:
                    reuse = shared_sel
                h, sel, il = layer(h, shared_sel=reuse, dense=self.dsa_dense_warmup or kind == "mla")
                if kind == "dsa":
                    if reuse is None:
                        shared_sel = sel
                    dsa_rank += 1
                if il is not None:
                    idx_loss = idx_loss + il
            elif kind == "moe":
                h, a = layer(h)
                aux = aux + a
            else:
                h = layer(h)
            if return_hidden:
                hidden.append(h)
        hf = self.decoder.final_norm(h)
        out = {"logits": self.head(hf), "aux": aux, "indexer": idx_loss, "mtp_logits": []}
        if return_hidden:
            out["hidden"] = hidden
        if hasattr(self, "mtp"):
            T = ids.shape[1]
            hk = hf
            for k, depth in enumerate(self.mtp.layers, start=1):
                if T - k <= 0:
                    break
                hk = depth(emb[:, k:], hk[:, :T - k])
                out["mtp_logits"].append(self.head(hk))
        return out

    def moe_layers(self):
        return [l.mlp for l in self.decoder.layers if isinstance(l, MoELayer)]

    def loss(self, ids, mtp_weight=0.3, aux_weight=0.01, indexer_weight=1.0):
        """Next-token CE (+ MTP CE averaged over depths, MoE aux, indexer KL). ids [B, T + 1]
        or [B, T]: predicts ids[:, 1:] from ids[:, :-1]."""
        x, tgt = ids[:, :-1], ids[:, 1:]
        out = self.forward(x)
        V = self.V
        ce = F.cross_entropy(out["logits"].float().reshape(-1, V), tgt.reshape(-1))
        total = ce
        mtp = []
        for k, lg in enumerate(out["mtp_logits"], start=1):
            # row t of depth k predicts x_{t+k+1} = tgt[t + k]
            mtp.append(F.cross_entropy(lg.float().reshape(-1, V), tgt[:, k:].reshape(-1)))
        if mtp:
            total = total + mtp_weight * sum(mtp) / len(mtp)
        total = total + aux_weight * out["aux"] + indexer_weight * out["indexer"]
        return total, {"ce": ce.detach(), "mtp": [m.detach() for m in mtp], "aux": out["aux"].detach(),
                       "indexer": out["indexer"].detach()}


def specialist_config(vocab, max_pos):
    """The bundled specialist's shape (models/nam56r-cpp-14m): about 13.6M parameters at
    vocab 8192 (d 256, 12 layers AEMEAEMEAEMR: 3 MLA of which 2 DSA, 5 MoE of 16 experts
    top-4 + shared expert, 3 Mamba-3 MIMO, 1 M2RNN; n-gram hash; one MTP depth)."""
    return {
        "model_type": "nam56r", "format_version": 1, "vocab_size": vocab,
        "padded_vocab_size": (vocab + 63) // 64 * 64,
        "hidden_size": 256, "num_layers": 12, "hybrid_pattern": "AEMEAEMEAEMR", "dsa_a_layer_ranks": [1, 2],
        "mtp_num_layers": 1, "layernorm_epsilon": 1e-5, "max_position_embeddings": max_pos, "ffn_hidden_size": 512,
        "activation": "gelu", "num_attention_heads": 4, "q_lora_rank": 96, "kv_lora_rank": 64, "qk_head_dim": 32,
        "qk_pos_emb_head_dim": 32, "v_head_dim": 32, "rotary_base": 10000.0, "dsa_indexer_n_heads": 4,
        "dsa_indexer_head_dim": 32, "dsa_indexer_topk": 128, "dsa_index_cache": "off",
        "num_moe_experts": 16, "moe_router_topk": 4, "moe_ffn_hidden_size": 128,
        "moe_shared_expert_intermediate_size": 256, "moe_router_score_function": "softmax", "mamba_state_dim": 32,
        "mamba_head_dim": 32, "mamba_expand": 2, "mamba_num_groups": 1, "mamba3_mimo_rank": 4,
        "mamba3_rope_fraction": 0.5, "mamba3_a_floor": 1e-4, "mamba3_a_activation": "softplus",
        "m2rnn_k_head_dim": 32, "m2rnn_v_head_dim": 16, "m2rnn_num_heads": 4, "m2rnn_conv_kernel": 4,
        "ngram_hash": {"orders": [2, 3], "num_heads": 4, "table_size": 8192, "embed_dim": 16},
    }


def count_params(model):
    return sum(p.numel() for p in model.parameters())


def active_params(model):
    """Parameters a token touches (MoE: top-k of the routed experts)."""
    n = count_params(model)
    for m in model.moe_layers():
        per = sum(getattr(m.experts.linear_fc1, "weight%d" % e).numel() +
                  getattr(m.experts.linear_fc2, "weight%d" % e).numel() for e in range(1))
        n -= per * (m.E - m.k)
    return n
