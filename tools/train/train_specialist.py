#!/usr/bin/env python3
"""Train the bundled NAM56R C++ specialist in one command on the GPU machine.

    python3 tools/train/train_specialist.py --corpus corpus_train.tar.xz --out runs/cpp \
        --minutes 8 --optimizer muon

1. Tokenizer: the NAM56R C++ tokenizer in its round-trip byte-level form (spec section 3:
   operators isolated longest first, newlines, blank runs and identifier runs as pieces;
   the special tokens with the spec's ids 0..19, FIM among them), trained with HF
   `tokenizers` on the corpus's train files of all three domains (C++, CMake, shell: the
   ensemble's other specialists share it), --vocab entries, a post-processor that puts
   <BOS> first.
2. Data: the C++ train files as one token stream. A document is `<BOS> text <EOS>`; with
   probability --fim-rate a document becomes fill-in-the-middle examples instead: cut at
   line ends into segments of 256..2048 characters, each segment split at two uniform
   character positions into prefix / middle / suffix and written in PSM order,
   `<FIM_PREFIX> prefix <FIM_SUFFIX> suffix <FIM_MIDDLE> middle <EOS>` (what slm's
   fim_prompt() builds, the middle then generated). Text is encoded with special-token
   matching off, so a literal "<EOS>" in a source file is text.
3. Training: random windows of T + 1 tokens, bf16 autocast, the M2RNN layer as a CUDA
   graph, loss = CE + 0.3 MTP CE + 0.01 MoE balance + DSA indexer KL (nam56r_torch.loss).
   Muon for the 2-D weight matrices of the blocks, AdamW for embeddings, head, n-gram
   tables, norms and scalars (--optimizer muon), or AdamW for everything. Warm-up-stable-
   decay schedule on wall-clock time: 3% warm-up, constant, linear decay to 0 over the last
   25% (the run length is a time budget, so the schedule is a function of elapsed time).
4. Evaluation on held-out C++ files (split by file): CE, top-1 accuracy and bits per byte
   (sum NLL / ln 2 / bytes of the predicted tokens; byte-level tokens decode exactly), in
   training precision and in float32 on the bf16-rounded weights (what ships); FIM middle
   CE; a few greedy samples.
5. Export: OUT/model/ = config.json + model.safetensors (bf16) + tokenizer.json +
   generation_config.json; OUT/train_log.json (config, steps, tokens, losses, metrics);
   OUT/ckpt.pt (weights + optimizer state, for --resume).

--smoke: a small data subset and short runs of both optimizers on the same data (the A/B
that chose the optimizer), no export."""

import argparse
import io
import json
import math
import os
import random
import sys
import tarfile
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tokenizer"))
import nam56r_torch as nt  # noqa: E402
import st_io  # noqa: E402
from export import export  # noqa: E402
from muon import Muon  # noqa: E402
from train_tokenizers import NAM56R_SPECIALS, nam56r_regex  # noqa: E402

PAD, UNK, BOS, EOS, FIM_PRE, FIM_MID, FIM_SUF = 0, 1, 2, 3, 4, 5, 6


def log(*a):
    print(*a, flush=True)


# ------------------------------------------------------------------------------------------
# Corpus and tokenizer


def load_corpus(path):
    """-> manifest, {(split, category): [(name, text)]}, sorted by name."""
    out = {}
    with tarfile.open(path) as tf:
        manifest = None
        for m in tf:
            if not m.isfile():
                continue
            data = tf.extractfile(m).read()
            if m.name.endswith("manifest.json"):
                manifest = json.loads(data)
                continue
            parts = m.name.split("/")  # corpus/<split>/<category>/<file>
            out.setdefault((parts[1], parts[2]), []).append((m.name, data.decode("utf-8")))
    for v in out.values():
        v.sort()
    return manifest, out


def train_tokenizer(texts, vocab):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    t = Tokenizer(models.BPE())
    split = pre_tokenizers.Split(Regex(nam56r_regex(True)), behavior="isolated", invert=False)
    t.pre_tokenizer = pre_tokenizers.Sequence([split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, special_tokens=NAM56R_SPECIALS,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    t.train_from_iterator(texts, trainer=tr, length=len(texts))
    t.post_processor = processors.TemplateProcessing(single="<BOS> $A", pair="<BOS> $A $B:1",
                                                     special_tokens=[("<BOS>", BOS)])
    for i, s in enumerate(NAM56R_SPECIALS):
        assert t.token_to_id(s) == i, (s, t.token_to_id(s))
    return t


def token_bytes(tok):
    """Bytes each id decodes to (byte-level: one byte per alphabet character; specials 0)."""
    V = tok.get_vocab_size()
    n = np.zeros(V, dtype=np.int64)
    for i in range(len(NAM56R_SPECIALS), V):
        s = tok.id_to_token(i)
        n[i] = len(s) if s is not None else 0
    return n


def encode_all(tok, texts):
    if hasattr(tok, "encode_special_tokens"):
        tok.encode_special_tokens = True  # corpus text is data: "<EOS>" in a file is text
    out = []
    for i in range(0, len(texts), 4096):  # chunks: HF Encodings are large, keep only the ids
        out += [np.asarray(e.ids, dtype=np.uint16) for e in tok.encode_batch(texts[i:i + 4096], add_special_tokens=False)]
    if hasattr(tok, "encode_special_tokens"):
        tok.encode_special_tokens = False
    return out


def segments(text, rng, lo=256, hi=2048):
    """Cut at line ends into pieces of lo..hi characters (a longer line is one piece)."""
    out, start = [], 0
    while start < len(text):
        want = rng.randint(lo, hi)
        end = min(len(text), start + want)
        if end < len(text):
            nl = text.rfind("\n", start + 1, end)
            end = nl + 1 if nl > start else end
        out.append(text[start:end])
        start = end
    return out


def fim_split(seg, rng):
    a, b = sorted((rng.randint(0, len(seg)), rng.randint(0, len(seg))))
    return seg[:a], seg[a:b], seg[b:]


def build_stream(tok, docs, fim_rate, seed, spm_rate=0.0):
    """docs [(name, text)] -> (uint16 stream, stats). Plain `<BOS> doc <EOS>` or FIM pieces,
    PSM or (with probability spm_rate) SPM as slm's fim_prompt() writes it:
    `<FIM_PREFIX> <FIM_SUFFIX> suffix <FIM_MIDDLE> prefix middle <EOS>`."""
    rng = random.Random(seed)
    pieces, recipe = [], []  # recipe: ("plain", i) or ("fim", i_pre, i_mid, i_suf)
    for _, text in docs:
        if rng.random() < fim_rate:
            for seg in segments(text, rng):
                p, m, s = fim_split(seg, rng)
                i = len(pieces)
                pieces += [p, m, s]
                recipe.append(("spm" if rng.random() < spm_rate else "fim", i, i + 1, i + 2))
        else:
            recipe.append(("plain", len(pieces)))
            pieces.append(text)
    ids = encode_all(tok, pieces)
    tag = {t: np.asarray([t], dtype=np.uint16) for t in (BOS, EOS, FIM_PRE, FIM_SUF, FIM_MID)}
    out, n_fim, n_spm = [], 0, 0
    for r in recipe:
        if r[0] == "plain":
            out += [tag[BOS], ids[r[1]], tag[EOS]]
        elif r[0] == "spm":
            n_spm += 1
            out += [tag[FIM_PRE], tag[FIM_SUF], ids[r[3]], tag[FIM_MID], ids[r[1]], ids[r[2]], tag[EOS]]
        else:
            n_fim += 1
            out += [tag[FIM_PRE], ids[r[1]], tag[FIM_SUF], ids[r[3]], tag[FIM_MID], ids[r[2]], tag[EOS]]
    return np.concatenate(out), {"pieces": len(pieces), "fim_examples": n_fim + n_spm, "spm_examples": n_spm}


# ------------------------------------------------------------------------------------------
# Training


def split_params(model):
    muon, adam = [], []
    for name, p in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        embedding_like = any(s in name for s in ("word_embeddings", "output_layer", "unified_table"))
        if p.ndim == 2 and leaf.startswith("weight") and not embedding_like and min(p.shape) >= 16:
            muon.append((name, p))
        else:
            adam.append((name, p))
    return muon, adam


def make_optimizers(model, kind, lr_adam, lr_muon):
    if kind == "adamw":
        return [torch.optim.AdamW(model.parameters(), lr=lr_adam, betas=(0.9, 0.95), weight_decay=0.01,
                                  fused=torch.cuda.is_available())]
    muon, adam = split_params(model)
    return [Muon([p for _, p in muon], lr=lr_muon, momentum=0.95),
            torch.optim.AdamW([p for _, p in adam], lr=lr_adam, betas=(0.9, 0.95), weight_decay=0.01,
                              fused=torch.cuda.is_available())]


def lr_multiplier(frac, warmup=0.03, decay=0.25):
    if frac < warmup:
        return frac / warmup
    if frac < 1 - decay:
        return 1.0
    return max(0.0, (1 - frac) / decay)


def train_run(cfg, stream, args, seconds, optimizer, seed, dev, resume=None, log_every=100):
    torch.manual_seed(seed)
    model = nt.NAM56R(cfg, seed=seed).to(dev)
    opts = make_optimizers(model, optimizer, args.lr_adam, args.lr_muon)
    step0, offset = 0, 0.0
    if args.init:
        sd = st_io.load(os.path.join(args.init, "model.safetensors"))
        own = model.state_dict()
        model.load_state_dict({k: v.to(own[k].dtype) for k, v in sd.items()})
    if resume:
        model.load_state_dict(resume["model"])
        for o, s in zip(opts, resume["optim"]):
            o.load_state_dict(s)
        step0, offset = resume["step"], resume["elapsed"]
    total = max(seconds, args.schedule_minutes * 60) if args.schedule_minutes else seconds
    base = [[g["lr"] for g in o.param_groups] for o in opts]
    if dev == "cuda":
        nt.cuda_graph_m2rnn(model, args.batch, args.T)
    # stream: one token array, or [(array, weight)] per domain (each row of a batch picks a
    # domain by weight, then a window inside that domain's stream)
    parts_ = stream if isinstance(stream, list) else [(stream, 1.0)]
    data = torch.from_numpy(np.concatenate([a for a, _ in parts_]).astype(np.int32)).to(dev)
    lens = torch.tensor([len(a) for a, _ in parts_], dtype=torch.float64)
    offs0 = torch.cumsum(torch.cat([torch.zeros(1, dtype=torch.float64), lens[:-1]]), 0)
    wts = torch.tensor([w for _, w in parts_], dtype=torch.float64)
    g = torch.Generator(device="cpu").manual_seed(seed + 1 + step0)
    T, B = args.T, args.batch
    offs = torch.arange(T + 1, device=dev)
    hist, t0, step, tokens = [], time.time(), 0, 0
    rate_t, rate_tok = None, 0
    while True:
        el = time.time() - t0
        if el >= seconds or (args.max_tokens and tokens >= args.max_tokens):
            break
        mult = lr_multiplier(tokens / args.max_tokens if args.max_tokens else (offset + el) / total)
        for o, lrs in zip(opts, base):
            for grp, lr in zip(o.param_groups, lrs):
                grp["lr"] = lr * mult
        dom = torch.multinomial(wts, B, replacement=True, generator=g)
        starts = (offs0[dom] + torch.floor(torch.rand(B, generator=g, dtype=torch.float64) * (lens[dom] - T - 1))).long().to(dev)
        x = data[starts[:, None] + offs[None, :]].long()
        with torch.autocast(device_type=dev, dtype=torch.bfloat16, enabled=dev == "cuda", cache_enabled=False):
            loss, parts = model.loss(x)
        for o in opts:
            o.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for o in opts:
            o.step()
        step += 1
        tokens += B * T
        if step == 5:
            if dev == "cuda":
                torch.cuda.synchronize()
            rate_t, rate_tok = time.time(), tokens
        if step % log_every == 0 or step == 1:
            rec = {"step": step0 + step, "seconds": round(time.time() - t0, 1), "tokens": tokens, "lr_mult": round(mult, 4),
                   "ce": round(parts["ce"].item(), 4), "mtp": [round(m.item(), 4) for m in parts["mtp"]],
                   "aux": round(parts["aux"].item(), 4), "indexer": round(parts["indexer"].item(), 4),
                   "grad_norm": round(gn.item(), 3)}
            hist.append(rec)
            log("  " + json.dumps(rec))
    if dev == "cuda":
        torch.cuda.synchronize()
    tps = (tokens - rate_tok) / (time.time() - rate_t) if rate_t else 0.0
    for layer in model.decoder.layers:  # the graphs hold training-shape buffers; eval runs eagerly
        if hasattr(layer, "_graphed"):
            del layer._graphed
    return model, opts, {"steps": step, "tokens": tokens, "tokens_per_s": tps, "history": hist,
                         "seconds": time.time() - t0, "schedule_seconds": total, "schedule_offset": offset,
                         "final_lr_mult": mult}


# ------------------------------------------------------------------------------------------
# Evaluation


@torch.no_grad()
def evaluate(model, stream, tbytes, T, dev, autocast, max_windows=256):
    """Non-overlapping windows of T + 1 tokens over the held-out stream: CE (nats/token),
    top-1, bits per byte of the predicted tokens."""
    model.eval()
    n = min(max_windows, (len(stream) - 1) // T)
    data = torch.from_numpy(stream[: n * T + 1].astype(np.int64))
    nll_sum, correct, count, nbytes = 0.0, 0, 0, 0
    tb = torch.from_numpy(tbytes)
    for i in range(0, n, 16):
        rows = [data[j * T: j * T + T + 1] for j in range(i, min(n, i + 16))]
        x = torch.stack(rows).to(dev)
        with torch.autocast(device_type=dev, dtype=torch.bfloat16, enabled=autocast):
            lg = model(x[:, :-1])["logits"].float()
        tgt = x[:, 1:]
        nll = F.cross_entropy(lg.reshape(-1, lg.shape[-1]), tgt.reshape(-1), reduction="none")
        nll_sum += nll.double().sum().item()
        correct += (lg.argmax(-1) == tgt).sum().item()
        count += tgt.numel()
        nbytes += int(tb[tgt.cpu()].sum())
    model.train()
    return {"tokens": count, "bytes": nbytes, "ce": nll_sum / count, "top1": correct / count,
            "bits_per_byte": nll_sum / math.log(2) / nbytes}


@torch.no_grad()
def fim_eval(model, tok, docs, dev, n=200, seed=5, T=512, order="psm"):
    """CE of the middle tokens (and the closing <EOS>) of PSM or SPM examples from held-out
    files, and of the same middles after the prefix alone (plain left-to-right: a FIM
    order that uses the suffix must do better)."""
    model.eval()
    rng = random.Random(seed)
    tot, cnt, examples, plain = 0.0, 0, 0, 0.0
    for _, text in docs:
        if examples >= n:
            break
        if not text.strip():
            continue
        seg = segments(text, rng, 200, 800)[0]
        p, m, s = fim_split(seg, rng)
        ids = [a.tolist() for a in encode_all(tok, [p, m, s])]
        if order == "psm":
            x = [FIM_PRE] + ids[0] + [FIM_SUF] + ids[2] + [FIM_MID]
        else:
            x = [FIM_PRE, FIM_SUF] + ids[2] + [FIM_MID] + ids[0]
        full = x + ids[1] + [EOS]
        if len(full) > T + 1 or not ids[1]:
            continue
        t = torch.tensor([full], device=dev)
        lg = model(t[:, :-1])["logits"].float()[0]
        tgt = t[0, 1:]
        ce = F.cross_entropy(lg[len(x) - 1:], tgt[len(x) - 1:], reduction="sum")
        tot += ce.item()
        y = [BOS] + ids[0] + ids[1] + [EOS]
        ty = torch.tensor([y], device=dev)
        ly = model(ty[:, :-1])["logits"].float()[0]
        plain += F.cross_entropy(ly[len(ids[0]):], ty[0, len(ids[0]) + 1:], reduction="sum").item()
        cnt += len(full) - len(x)
        examples += 1
    model.train()
    return {"order": order, "examples": examples, "middle_tokens": cnt, "ce": tot / max(1, cnt),
            "plain_prefix_ce": plain / max(1, cnt)}


@torch.no_grad()
def sample(model, tok, prompt, n, dev, T=512, temperature=0.0, seed=0):
    model.eval()
    g = torch.Generator(device="cpu").manual_seed(seed)
    ids = tok.encode(prompt).ids
    for _ in range(n):
        x = torch.tensor([ids[-T:]], device=dev)
        lg = model(x)["logits"][0, -1].float().cpu()
        if temperature > 0:
            nxt = int(torch.multinomial(torch.softmax(lg / temperature, -1), 1, generator=g))
        else:
            nxt = int(lg.argmax())
        if nxt == EOS:
            break
        ids.append(nxt)
    model.train()
    return tok.decode(ids, skip_special_tokens=False)


def rounded_bf16_copy(model, cfg, dev):
    m = nt.NAM56R(cfg).to(dev)
    sd = {k: (v.to(torch.bfloat16).float() if v.is_floating_point() else v) for k, v in model.state_dict().items()}
    m.load_state_dict(sd)
    return m


# ------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--domain", default="cpp", help="a category, or several comma-separated (a generalist)")
    ap.add_argument("--domain-weights", default="", help="comma-separated sampling weights (default: equal)")
    ap.add_argument("--max-train-mb", type=float, default=0.0, help="per domain: train files up to this many MB (hash order)")
    ap.add_argument("--max-tokens", type=float, default=0.0, help="a token budget instead of --minutes (the schedule follows it)")
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--eval-domains", default="cpp,cmake,shell")
    ap.add_argument("--no-samples", action="store_true")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--tokenizer", help="use this tokenizer.json instead of training one")
    ap.add_argument("--tokenizer-mb", type=float, default=60.0, help="C++ text the tokenizer trains on (plus all CMake/shell)")
    ap.add_argument("--minutes", type=float, default=8.0)
    ap.add_argument("--T", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--optimizer", choices=["muon", "adamw"], default="muon")
    ap.add_argument("--lr-adam", type=float, default=3e-3)
    ap.add_argument("--lr-muon", type=float, default=0.02)
    ap.add_argument("--fim-rate", type=float, default=0.5)
    ap.add_argument("--spm-rate", type=float, default=0.0, help="share of the FIM examples in SPM order")
    ap.add_argument("--data-epoch", type=int, default=0, help="another seed for the FIM choices and cuts")
    ap.add_argument("--init", help="start from this exported model directory (model.safetensors), fresh optimizer state")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--smoke-seconds", type=float, default=60)
    ap.add_argument("--resume", help="ckpt.pt of an earlier run (pass its --tokenizer too): continue its schedule")
    ap.add_argument("--schedule-minutes", type=float, default=0.0,
                    help="the whole schedule's length when a run is split over several commands (default: --minutes)")
    args = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.makedirs(args.out, exist_ok=True)
    t_all = time.time()
    report = {"args": vars(args), "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
              "torch": torch.__version__}

    manifest, corpus = load_corpus(args.corpus)
    report["corpus"] = {"packed_by": manifest.get("packed_by"), "created_by": manifest.get("created_by"),
                        "totals": manifest.get("totals"), "packages": len({f["package"] for f in manifest["files"]})}
    domains = args.domain.split(",")
    weights = [float(w) for w in args.domain_weights.split(",")] if args.domain_weights else [1.0] * len(domains)
    train_by = {}
    for d in domains:
        docs, mb = [], 0.0
        for name, text in corpus[("train", d)]:
            if args.max_train_mb and mb + len(text) / 1e6 > args.max_train_mb:
                continue
            docs.append((name, text))
            mb += len(text) / 1e6
        train_by[d] = docs
    train_docs = [x for d in domains for x in train_by[d]]
    held_docs = corpus[("heldout", domains[0])]
    if args.smoke:
        rng = random.Random(0)
        train_docs = rng.sample(train_docs, min(len(train_docs), 3000))
        held_docs = held_docs[:200]
    log("corpus: %d train / %d held-out %s files (%.1f / %.1f MB), %.0f s" % (
        len(train_docs), len(held_docs), args.domain, sum(len(t) for _, t in train_docs) / 1e6,
        sum(len(t) for _, t in held_docs) / 1e6, time.time() - t_all))

    from tokenizers import Tokenizer
    t0 = time.time()
    if args.tokenizer:
        tok = Tokenizer.from_file(args.tokenizer)
    else:
        rng = random.Random(1)
        cpp = [t for _, t in corpus[("train", "cpp")]]
        rng.shuffle(cpp)
        budget, tok_texts = args.tokenizer_mb * 1e6 * (0.2 if args.smoke else 1.0), []
        for t in cpp:
            if budget <= 0:
                break
            tok_texts.append(t)
            budget -= len(t)
        for cat in ("cmake", "shell"):
            tok_texts += [t for _, t in corpus.get(("train", cat), [])]
        tok = train_tokenizer(tok_texts, args.vocab)
        report["tokenizer"] = {"trained_on_chars": sum(len(t) for t in tok_texts), "files": len(tok_texts)}
    tok.save(os.path.join(args.out, "tokenizer.json"))
    V = tok.get_vocab_size()
    tbytes = token_bytes(tok)
    log("tokenizer: vocab %d, %.0f s" % (V, time.time() - t0))

    t0 = time.time()
    streams, sstats = [], {}
    for d, w in zip(domains, weights):
        st_d, ss = build_stream(tok, train_by[d], args.fim_rate, args.seed + args.data_epoch, args.spm_rate)
        streams.append((st_d, w))
        sstats[d] = {"tokens": int(len(st_d)), "files": len(train_by[d]), "bytes": sum(len(t.encode()) for _, t in train_by[d]),
                     "weight": w, **ss}
    stream = streams if len(streams) > 1 else streams[0][0]
    held, _ = build_stream(tok, held_docs, 0.0, args.seed)
    held_by = {d: build_stream(tok, corpus[("heldout", d)], 0.0, args.seed)[0]
               for d in args.eval_domains.split(",") if ("heldout", d) in corpus}
    train_bytes = sum(v["bytes"] for v in sstats.values())
    train_tokens = sum(v["tokens"] for v in sstats.values())
    report["data"] = {"train_tokens": train_tokens, "train_bytes": train_bytes, "heldout_tokens": int(len(held)),
                      "bytes_per_token": train_bytes / train_tokens, "domains": sstats, "fim_rate": args.fim_rate,
                      "spm_rate": args.spm_rate, "seconds": time.time() - t0}
    log("data: " + json.dumps(report["data"]))

    cfg = nt.specialist_config(V, args.T)
    cfg["hidden_size"] = args.d_model
    report["config"] = cfg
    if args.smoke:
        results = {}
        for opt in ("muon", "adamw"):
            model, _, st = train_run(cfg, stream, args, args.smoke_seconds, opt, args.seed, dev, log_every=50)
            ev = evaluate(model, held, tbytes, args.T, dev, autocast=dev == "cuda", max_windows=64)
            results[opt] = {"steps": st["steps"], "tokens": st["tokens"], "tokens_per_s": st["tokens_per_s"],
                            "last_ce": st["history"][-1]["ce"], "heldout": ev}
            log("smoke %s: %s" % (opt, json.dumps(results[opt])))
            del model
            torch.cuda.empty_cache() if dev == "cuda" else None
        report["smoke"] = results
        report["params"] = nt.count_params(nt.NAM56R(cfg))
        m = nt.NAM56R(cfg)
        report["optimizer_split"] = {k: sum(p.numel() for _, p in v) for k, v in zip(("muon", "adam"), split_params(m))}
        with open(os.path.join(args.out, "train_log.json"), "w") as f:
            json.dump(report, f, indent=1)
        return

    resume = torch.load(args.resume, map_location=dev) if args.resume else None
    model, opts, st = train_run(cfg, stream, args, args.minutes * 60, args.optimizer, args.seed, dev, resume=resume)
    report["train"] = st
    report["params"] = nt.count_params(model)
    report["active_params"] = nt.active_params(model)
    log("trained: %d steps, %.1fM tokens, %.0f tokens/s" % (st["steps"], st["tokens"] / 1e6, st["tokens_per_s"]))
    torch.save({"config": cfg, "model": model.state_dict(), "optim": [o.state_dict() for o in opts],
                "step": st["steps"] + (resume["step"] if resume else 0),
                "tokens": st["tokens"] + (resume["tokens"] if resume else 0),
                "elapsed": st["seconds"] + st["schedule_offset"]}, os.path.join(args.out, "ckpt.pt"))
    report["train"]["total_steps"] = st["steps"] + (resume["step"] if resume else 0)
    report["train"]["total_tokens"] = st["tokens"] + (resume["tokens"] if resume else 0)

    t0 = time.time()
    ev = {"bf16_autocast": evaluate(model, held, tbytes, args.T, dev, autocast=dev == "cuda")}
    ref = rounded_bf16_copy(model, cfg, dev)
    ev["f32_on_bf16_weights"] = evaluate(ref, held, tbytes, args.T, dev, autocast=False)
    ev["by_domain"] = {d: evaluate(ref, h, tbytes, args.T, dev, autocast=False, max_windows=128) for d, h in held_by.items()}
    ev["fim_psm"] = fim_eval(ref, tok, held_docs, dev, T=args.T, order="psm")
    ev["fim_spm"] = fim_eval(ref, tok, held_docs, dev, T=args.T, order="spm")
    report["eval"] = ev
    log("eval: " + json.dumps(ev) + " (%.0f s)" % (time.time() - t0))
    prompts = ["#include <vector>\n\ntemplate <typename T>\nclass", "// Returns the sum of the elements.\nint sum(const std::vector<int>& v) {\n",
               "namespace detail {\n\n"]
    report["samples"] = [] if args.no_samples else [{"prompt": p, "greedy": sample(ref, tok, p, 60, dev, T=args.T),
                          "t0.7": sample(ref, tok, p, 60, dev, T=args.T, temperature=0.7)} for p in prompts[:2]]
    for s in report["samples"]:
        log("---- greedy ----\n" + s["greedy"] + "\n---- t=0.7 ----\n" + s["t0.7"])

    mdir = os.path.join(args.out, "model")
    export(ref, mdir, torch.bfloat16)
    tok.save(os.path.join(mdir, "tokenizer.json"))
    with open(os.path.join(mdir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": BOS, "eos_token_id": EOS, "pad_token_id": PAD, "do_sample": True,
                   "temperature": 0.7, "top_k": 40, "top_p": 0.95}, f, indent=2)
        f.write("\n")
    report["seconds_total"] = time.time() - t_all
    with open(os.path.join(args.out, "train_log.json"), "w") as f:
        json.dump(report, f, indent=1)
    log("done in %.0f s" % (time.time() - t_all))


if __name__ == "__main__":
    main()
