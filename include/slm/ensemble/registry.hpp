// slm/ensemble/registry.hpp - the ensemble's members, loaded on demand under a memory budget.
//
//   auto reg = slm::ensemble::registry::from_config(cfg);        // result<registry>; loads nothing
//   auto m = reg->acquire(reg->find("cpp").value());              // result<shared_ptr<const loaded_member>>
//   auto s = (*m)->model.new_session();                           // the caller's session
//
// Lazy: a member is loaded (member_model::load: the weights read into memory, or mapped
// with checkpoint_options::weights = load_mode::map) on its first acquire(). Accounting, in
// bytes: each resident member's *.safetensors files (member_model::weight_file_bytes: what
// loading reads or maps) plus the memory of each distinct tokenizer of the resident
// members, counted once: tokenizer::memory_bytes(), the heap the loaded tokenizer holds
// (the bundled models' 540 KB tokenizer.json holds about 1.4 MB, 2.7 times its file; other
// tokenizers up to 8 times theirs, and no ratio bounds it, so the file size is no measure).
// create() therefore parses each distinct tokenizer once to measure it and drops it again
// (about 20 ms for the bundled one); acquire() parses it again when it loads. Tokenizers are
// shared: members naming the same tokenizer file (after std::filesystem::canonical, so the
// demo's symlinks to one tokenizer.json count as one) get one shared_ptr<const tokenizer>.
//
// Budget: when loading member i would exceed the budget, the least-recently-used resident
// members that nobody uses are unloaded until it fits. "Used" = a caller holds the
// shared_ptr acquire() returned (the registry's own copy makes use_count 1; more pins
// it). If it cannot fit (the member alone is larger than the budget, or the others are
// pinned) acquire() fails with out_of_memory naming the budget, the bytes and what is
// pinned, and nothing is unloaded. Unloading happens before the load, so resident bytes
// never exceed the budget (the one exception: a tokenizer file rewritten after create() is
// charged by what it holds once loaded, and only by that difference can they pass it; a
// load's transient parsing memory is not counted); a load that then fails (a broken
// checkpoint) leaves those members unloaded (they load again on their next acquire).
//
// Threads: one mutex guards the table, and the load runs under it. That is deliberate:
// a load reads the weight files and parses config.json and tokenizer.json (milliseconds
// for the demo's 6-8 MB members; a mapped load copies nothing), so holding the lock is
// cheap at this scale, and it makes "never load a member
// twice at once" and "the budget holds at every instant" true by construction, with no
// in-flight bookkeeping. Acquiring a resident member takes the lock only to bump its
// recency. Sessions and generation run outside the lock on the caller's threads.
// No global state: every registry is independent.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "slm/ensemble/config.hpp"
#include "slm/ensemble/member.hpp"
#include "slm/core/status.hpp"
#include "slm/text/tokenizer.hpp"

namespace slm::ensemble {

// A resident member: what acquire() hands out. Immutable; shareable by threads.
struct loaded_member {
  member_spec spec;
  member_model model;
  std::shared_ptr<const tokenizer> tok;
  std::uint64_t bytes = 0;  // weight file bytes (the tokenizer is accounted apart, shared)

  member_ref view() const noexcept { return member_ref{&model, tok.get(), spec.name, spec.temperature}; }
};

struct registry_stats {
  std::uint64_t budget_bytes = 0;          // 0 = unlimited
  std::uint64_t resident_bytes = 0;        // weights of resident members + their distinct tokenizers
  std::vector<std::size_t> resident_lru;   // resident member indices, least recently used first
  std::uint64_t loads = 0, evictions = 0, hits = 0;
};

class registry {
 public:
  // Reads the weight file sizes and measures each distinct tokenizer (parsed, measured,
  // dropped); loads no member. budget_bytes 0 = unlimited.
  static result<registry> create(std::vector<member_spec> members, std::uint64_t budget_bytes,
                                 const checkpoint_options& opt = {});

  static result<registry> from_config(const ensemble_config& cfg, const checkpoint_options& opt = {}) {
    return create(cfg.members, cfg.memory_budget_bytes, opt);
  }

  std::size_t size() const noexcept { return s_->entries.size(); }
  const member_spec& spec(std::size_t i) const noexcept { return s_->entries[i].spec; }
  std::optional<std::size_t> find(std::string_view name) const noexcept {
    for (std::size_t i = 0; i < size(); ++i)
      if (s_->entries[i].spec.name == name) return i;
    return std::nullopt;
  }
  std::uint64_t budget_bytes() const noexcept { return s_->budget; }
  // Bytes member i costs alone: its weight files + its tokenizer's memory_bytes().
  std::uint64_t member_bytes(std::size_t i) const noexcept {
    return s_->entries[i].weight_bytes + s_->entries[i].tokenizer_bytes;
  }

  // Member i, loading it (and unloading least-recently-used unpinned members) if needed.
  result<std::shared_ptr<const loaded_member>> acquire(std::size_t i);
  result<std::shared_ptr<const loaded_member>> acquire(std::string_view name);

  // Unloads every resident member nobody holds; returns how many.
  std::size_t trim();

  registry_stats stats() const;

  // What `slm inspect` prints for an ensemble: each member's bytes (weight files, the
  // tokenizer's memory as create() measured it; no loading), the total against the budget,
  // then nam56r_ensemble_arithmetic().
  std::vector<std::string> inspect() const;

 private:
  struct entry {
    member_spec spec;
    std::uint64_t weight_bytes = 0;
    std::string tokenizer_key;  // canonical path(s): equal keys share one tokenizer
    std::uint64_t tokenizer_bytes = 0;  // the tokenizer's memory_bytes(), measured by create()
    std::shared_ptr<loaded_member> loaded;  // null while not resident
    std::uint64_t last_use = 0;
  };
  struct state {
    mutable std::mutex mu;
    std::vector<entry> entries;
    std::map<std::string, std::weak_ptr<const tokenizer>> tokenizers;  // by tokenizer_key
    std::uint64_t budget = 0, clock = 0, loads = 0, evictions = 0, hits = 0;
    checkpoint_options opt;
  };
  explicit registry(std::unique_ptr<state> s) : s_(std::move(s)) {}

  // The tokenizer file a member uses, canonical (symlinks resolved), plus its
  // tokenizer_config.json when the default (directory) tokenizer has one: load_dir reads
  // it, so two directories share a tokenizer only if both files are the same.
  static result<std::string> tokenizer_key(const member_spec& m);

  static result<tokenizer> load_tokenizer(const member_spec& m) {
    return m.tokenizer.empty() ? tokenizer::load_dir(m.dir) : tokenizer::load(m.tokenizer);
  }

  static result<std::shared_ptr<const tokenizer>> shared_tokenizer(state& s, const entry& e);

  static std::vector<std::size_t> resident_lru(const state& s);

  // Bytes of a set of members: their weights + each distinct tokenizer once.
  static std::uint64_t bytes_of(const state& s, const std::vector<std::size_t>& set);

  // The members to unload (least recently used first) so that member i fits, or the error.
  static result<std::vector<std::size_t>> plan_eviction(const state& s, std::size_t i);

  std::unique_ptr<state> s_;
};

// ---- The seed arithmetic: eight NAM56R specialists in NVFP4 ----------------------------

// NAM56R's production dimensions (spec nam56r.md §1.3, the H200 configuration) and the
// parameter count they give, split by what NVFP4 quantizes.
struct nam56r_dims {
  std::uint64_t d = 4096, vocab = 131072;
  std::uint64_t n_mla = 4, n_dsa = 9, n_moe = 22, n_mamba3 = 13, n_m2rnn = 4;  // 52 layers
  std::uint64_t heads = 32, q_lora = 64, kv_lora = 64, qk_nope = 64, qk_rope = 64, v_head = 64;
  std::uint64_t idx_heads = 32, idx_dim = 64;
  std::uint64_t experts = 16, expert_ffn = 896, shared_ffn = 1024;
  std::uint64_t m_state = 128, m_headdim = 64, m_expand = 2, m_groups = 8, m_rank = 4;
  std::uint64_t r_k = 64, r_v = 16, r_heads = 51, r_conv = 4;
  std::uint64_t ngram_tables = 16, ngram_rows = 500000, ngram_dim = 16;  // (2,3) x 8 heads, ~500k primes
  std::uint64_t struct_rows = 25, struct_dim = 64;
  std::uint64_t mtp_depths = 2, mtp_ffn = 21504;
};

struct nam56r_param_count {
  std::uint64_t linear = 0;      // NVFP4 by default: 2-D linear weights, K a multiple of 16
  std::uint64_t embedding = 0;   // word embeddings, n-gram hash tables, structure embedding
  std::uint64_t head = 0;        // output_layer (untied)
  std::uint64_t kept = 0;        // stay BF16 in any case: norms, routers, DSA indexer, 1-D/3-D parameters, conv1d
  std::uint64_t mtp_linear = 0, mtp_kept = 0;  // the MTP depths (self-speculation only)
  std::uint64_t main() const noexcept { return linear + embedding + head + kept; }
  std::uint64_t mtp() const noexcept { return mtp_linear + mtp_kept; }
};

nam56r_param_count count_nam56r_params(const nam56r_dims& x = {});

// The lines `slm inspect` prints: eight specialists of NAM56R's size, in NVFP4.
std::vector<std::string> nam56r_ensemble_arithmetic();

// What `slm inspect` prints for an ensemble.json: "ensemble  FILE: router R, strategy S",
// then its registry's inspect() (no member is loaded).
result<std::vector<std::string>> inspect_ensemble(const std::filesystem::path& config_file);


// ---- implementation (SLM_DEFINE_ENSEMBLE)
#if SLM_DEFINE_ENSEMBLE

SLM_INLINE result<registry> registry::create(std::vector<member_spec> members, std::uint64_t budget_bytes,
                               const checkpoint_options& opt) {
  auto st = std::make_unique<state>();
  st->budget = budget_bytes;
  st->opt = opt;
  for (std::size_t i = 0; i < members.size(); ++i) {
    entry e;
    e.spec = std::move(members[i]);
    for (std::size_t j = 0; j < i; ++j)
      if (st->entries[j].spec.name == e.spec.name)
        return make_error(errc::invalid_argument, "registry: two members are called '", e.spec.name, "'");
    auto wb = member_model::weight_file_bytes(e.spec.dir);
    if (!wb.ok()) return std::move(wb).take_error().with_context(cat("member '", e.spec.name, "'"));
    e.weight_bytes = *wb;
    auto key = tokenizer_key(e.spec);
    if (!key.ok()) return std::move(key).take_error().with_context(cat("member '", e.spec.name, "'"));
    e.tokenizer_key = std::move(*key);
    // The tokenizer's memory: measured on the first member that names it.
    const auto same = std::find_if(st->entries.begin(), st->entries.end(),
                                   [&](const entry& o) { return o.tokenizer_key == e.tokenizer_key; });
    if (same != st->entries.end()) {
      e.tokenizer_bytes = same->tokenizer_bytes;
    } else {
      auto tok = load_tokenizer(e.spec);
      if (!tok.ok()) return std::move(tok).take_error().with_context(cat("member '", e.spec.name, "'"));
      e.tokenizer_bytes = tok->memory_bytes();
    }
    st->entries.push_back(std::move(e));
  }
  return registry(std::move(st));
}

SLM_INLINE result<std::shared_ptr<const loaded_member>> registry::acquire(std::size_t i) {
  state& s = *s_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (i >= s.entries.size())
    return make_error(errc::out_of_range, "registry: member index ", i, " (there are ", s.entries.size(), ")");
  entry& e = s.entries[i];
  e.last_use = ++s.clock;
  if (e.loaded) {
    ++s.hits;
    return std::shared_ptr<const loaded_member>(e.loaded);
  }
  auto victims = plan_eviction(s, i);
  if (!victims.ok()) return std::move(victims).take_error();
  for (std::size_t v : *victims) {
    s.entries[v].loaded.reset();
    ++s.evictions;
  }
  auto tok = shared_tokenizer(s, e);
  if (!tok.ok()) return std::move(tok).take_error().with_context(cat("member '", e.spec.name, "'"));
  // The same file gives the same figure; a file changed since create() is charged by what
  // it holds now.
  if (const std::uint64_t held = (*tok)->memory_bytes(); held != e.tokenizer_bytes)
    for (entry& o : s.entries)
      if (o.tokenizer_key == e.tokenizer_key) o.tokenizer_bytes = held;
  auto m = member_model::load(e.spec.dir, s.opt);
  if (!m.ok()) return std::move(m).take_error().with_context(cat("member '", e.spec.name, "'"));
  e.loaded = std::make_shared<loaded_member>(loaded_member{e.spec, std::move(*m), std::move(*tok), e.weight_bytes});
  ++s.loads;
  return std::shared_ptr<const loaded_member>(e.loaded);
}

SLM_INLINE result<std::shared_ptr<const loaded_member>> registry::acquire(std::string_view name) {
  auto i = find(name);
  if (!i) return make_error(errc::not_found, "registry: no member is called '", name, "'");
  return acquire(*i);
}

SLM_INLINE std::size_t registry::trim() {
  std::lock_guard<std::mutex> lock(s_->mu);
  std::size_t n = 0;
  for (entry& e : s_->entries)
    if (e.loaded && e.loaded.use_count() == 1) {
      e.loaded.reset();
      ++s_->evictions;
      ++n;
    }
  return n;
}

SLM_INLINE registry_stats registry::stats() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  registry_stats r;
  r.budget_bytes = s_->budget;
  r.resident_lru = resident_lru(*s_);
  r.resident_bytes = bytes_of(*s_, r.resident_lru);
  r.loads = s_->loads;
  r.evictions = s_->evictions;
  r.hits = s_->hits;
  return r;
}

SLM_INLINE result<std::string> registry::tokenizer_key(const member_spec& m) {
  std::error_code ec;
  const auto file = m.tokenizer.empty() ? m.dir / "tokenizer.json" : m.tokenizer;
  const auto canon = std::filesystem::canonical(file, ec);
  if (ec) return make_error(errc::not_found, file.string(), ": ", ec.message());
  std::string key = canon.string();
  if (m.tokenizer.empty() && std::filesystem::exists(m.dir / "tokenizer_config.json", ec)) {
    const auto cfg = std::filesystem::canonical(m.dir / "tokenizer_config.json", ec);
    if (!ec) key += "\n" + cfg.string();
  }
  return key;
}

SLM_INLINE result<std::shared_ptr<const tokenizer>> registry::shared_tokenizer(state& s, const entry& e) {
  std::weak_ptr<const tokenizer>& slot = s.tokenizers[e.tokenizer_key];
  if (auto t = slot.lock()) return t;
  auto t = load_tokenizer(e.spec);
  if (!t.ok()) return std::move(t).take_error();
  auto p = std::make_shared<const tokenizer>(std::move(*t));
  slot = p;
  return std::shared_ptr<const tokenizer>(std::move(p));
}

SLM_INLINE std::vector<std::size_t> registry::resident_lru(const state& s) {
  std::vector<std::size_t> r;
  for (std::size_t i = 0; i < s.entries.size(); ++i)
    if (s.entries[i].loaded) r.push_back(i);
  std::sort(r.begin(), r.end(), [&](std::size_t a, std::size_t b) { return s.entries[a].last_use < s.entries[b].last_use; });
  return r;
}

SLM_INLINE std::uint64_t registry::bytes_of(const state& s, const std::vector<std::size_t>& set) {
  std::uint64_t total = 0;
  for (std::size_t k = 0; k < set.size(); ++k) {
    const entry& e = s.entries[set[k]];
    total += e.weight_bytes;
    bool seen = false;
    for (std::size_t j = 0; j < k && !seen; ++j) seen = s.entries[set[j]].tokenizer_key == e.tokenizer_key;
    if (!seen) total += e.tokenizer_bytes;
  }
  return total;
}

SLM_INLINE result<std::vector<std::size_t>> registry::plan_eviction(const state& s, std::size_t i) {
  std::vector<std::size_t> victims;
  if (s.budget == 0) return victims;
  const std::vector<std::size_t> lru = resident_lru(s);
  std::vector<std::size_t> keep = lru;
  keep.push_back(i);
  if (bytes_of(s, {i}) > s.budget)
    return make_error(errc::out_of_memory, "registry: member '", s.entries[i].spec.name, "' needs ",
                      bytes_of(s, {i}), " bytes (weights ", s.entries[i].weight_bytes, " + tokenizer ",
                      s.entries[i].tokenizer_bytes, "), more than the whole memory budget of ", s.budget, " bytes");
  for (std::size_t v : lru) {
    if (bytes_of(s, keep) <= s.budget) break;
    if (s.entries[v].loaded.use_count() != 1) continue;  // pinned by a caller
    victims.push_back(v);
    keep.erase(std::find(keep.begin(), keep.end(), v));
  }
  if (bytes_of(s, keep) <= s.budget) return victims;
  std::string pinned;
  for (std::size_t v : lru)
    if (s.entries[v].loaded.use_count() != 1)
      pinned += cat(pinned.empty() ? "" : ", ", "'", s.entries[v].spec.name, "' (", s.entries[v].weight_bytes, " bytes)");
  return make_error(errc::out_of_memory, "registry: member '", s.entries[i].spec.name, "' needs ", bytes_of(s, {i}),
                    " bytes; the memory budget is ", s.budget, " bytes and ", bytes_of(s, lru),
                    " are resident, of which these members are in use and cannot be unloaded: ",
                    pinned.empty() ? std::string("(none)") : pinned);
}

SLM_INLINE nam56r_param_count count_nam56r_params(const nam56r_dims& x) {
  nam56r_param_count c;
  const std::uint64_t d = x.d;
  // MLA: q_down [q_lora, d], q_up [H (nope+rope), q_lora], kv_down [kv_lora+rope, d],
  // kv_up [H (nope+v), kv_lora], proj [d, H v]; input norm [d].
  const std::uint64_t mla_linear = x.q_lora * d + x.heads * (x.qk_nope + x.qk_rope) * x.q_lora +
                                   (x.kv_lora + x.qk_rope) * d + x.heads * (x.qk_nope + x.v_head) * x.kv_lora +
                                   d * x.heads * x.v_head;
  // DSA indexer: wq_b [nI dI, q_lora], wk [dI, d], k_norm LayerNorm (2 dI), weights_proj [nI, d].
  const std::uint64_t indexer = x.idx_heads * x.idx_dim * x.q_lora + x.idx_dim * d + 2 * x.idx_dim + x.idx_heads * d;
  c.linear += (x.n_mla + x.n_dsa) * mla_linear;
  c.kept += (x.n_mla + x.n_dsa) * d + x.n_dsa * indexer;
  // MoE: router [E, d], E x (fc1 [f, d] + fc2 [d, f]), shared fc1/fc2, pre-norm [d].
  c.linear += x.n_moe * (x.experts * 2 * x.expert_ffn * d + 2 * x.shared_ffn * d);
  c.kept += x.n_moe * (x.experts * d + d);
  // Mamba-3 MIMO: in_proj [2 Di + 2 R G N + 3 H + S, d], out_proj [d, Di]; dt_bias, D [H],
  // B_bias, C_bias [H, R, N], B_norm, C_norm [N], mimo_x/z/o [H, R, P], two norms [d].
  const std::uint64_t di = x.m_expand * d, mh = di / x.m_headdim, rope_split = x.m_state / 2;
  const std::uint64_t in_proj = 2 * di + 2 * x.m_rank * x.m_groups * x.m_state + 3 * mh + rope_split / 2;
  c.linear += x.n_mamba3 * (in_proj * d + d * di);
  c.kept += x.n_mamba3 * (2 * mh + 2 * mh * x.m_rank * x.m_state + 2 * x.m_state + 3 * mh * x.m_rank * x.m_headdim + 2 * d);
  // M2RNN: input_projection [2K + HV + H + HV, d], conv1d (2K + HV) x (kernel + bias),
  // A_log, dt_bias [H], state_weight [H, V, V], D, g_norm [HV], output_projection [d, HV], norm [d].
  const std::uint64_t hv = x.r_heads * x.r_v, cd = 2 * x.r_k + hv;
  c.linear += x.n_m2rnn * ((cd + x.r_heads + hv) * d + d * hv);
  c.kept += x.n_m2rnn * (cd * (x.r_conv + 1) + 2 * x.r_heads + x.r_heads * x.r_v * x.r_v + 2 * hv + d);
  // Embeddings: words [V, d]; n-gram tables [J x rows, dim] + out_proj [d, J dim];
  // structure embedding [25, 64] + up_proj [d, 64]. Head [V, d]; final norm [d].
  c.embedding = x.vocab * d + x.ngram_tables * x.ngram_rows * x.ngram_dim + d * x.ngram_tables * x.ngram_dim +
                x.struct_rows * x.struct_dim + d * x.struct_dim;
  c.head = x.vocab * d;
  c.kept += d;
  // MTP depth: enorm, hnorm, final norm [d], eh_proj [d, 2d], one MLA layer, dense MLP
  // (fc1 [ffn, d] with its norm [d], fc2 [d, ffn]); embedding and head shared with main.
  c.mtp_linear = x.mtp_depths * (2 * d * d + mla_linear + 2 * x.mtp_ffn * d);
  c.mtp_kept = x.mtp_depths * (3 * d + d + d);
  return c;
}

SLM_INLINE std::vector<std::string> nam56r_ensemble_arithmetic() {
  const nam56r_dims x;
  const nam56r_param_count c = count_nam56r_params(x);
  auto gb = [](double bytes) {
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof buf, bytes / 1e9, std::chars_format::fixed, 2);
    return std::string(buf, r.ptr) + " GB";
  };
  auto bn = [](double params) {
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof buf, params / 1e9, std::chars_format::fixed, 3);
    return std::string(buf, r.ptr) + " B";
  };
  constexpr double nvfp4 = 4.5 / 8, bf16 = 2.0;  // bytes per weight
  const double all4 = static_cast<double>(c.main()) * nvfp4;
  const double dflt = static_cast<double>(c.linear) * nvfp4 + static_cast<double>(c.embedding + c.head + c.kept) * bf16;
  const double mixed = static_cast<double>(c.linear + c.embedding + c.head) * nvfp4 + static_cast<double>(c.kept) * bf16;
  const double mtp = static_cast<double>(c.mtp_linear) * nvfp4 + static_cast<double>(c.mtp_kept) * bf16;
  std::vector<std::string> out;
  out.push_back("seed target: eight 4-8B specialists in about 32 GB with NVFP4");
  out.push_back("NVFP4 = 4.5 bits per weight: a 4-bit E2M1 code + one FP8 E4M3 scale per 16 values (4 + 8/16),");
  out.push_back("  plus one FP32 scale per tensor (per expert), negligible");
  out.push_back("  8 x 8e9 x 4.5/8 bytes = 36.00 GB;  8 x 7e9 x 4.5/8 = 31.50 GB;  8 x 4e9 x 4.5/8 = 18.00 GB");
  out.push_back("NAM56R production dims (spec nam56r.md 1.3): d 4096, 52 layers = 13 attention (4 MLA, 9 DSA) + 22 MoE");
  out.push_back("  (16 experts x 896 + shared 1024) + 13 Mamba-3 MIMO (state 128, 128 heads) + 4 M2RNN; vocab 131072 untied");
  out.push_back(cat("  parameters: ", bn(static_cast<double>(c.main())), " (linear layers ", bn(static_cast<double>(c.linear)),
                    ", embeddings ", bn(static_cast<double>(c.embedding)), " incl. n-gram tables ~",
                    bn(static_cast<double>(x.ngram_tables * x.ngram_rows * x.ngram_dim)), ", output head ",
                    bn(static_cast<double>(c.head)), ", norms/routers/indexer/state params ",
                    bn(static_cast<double>(c.kept)), ") + MTP ", bn(static_cast<double>(c.mtp()))));
  out.push_back(cat("  one specialist, every weight 4.5 bits: ", bn(static_cast<double>(c.main())), " x 4.5/8 = ", gb(all4),
                    "; eight: ", gb(8 * all4)));
  out.push_back(cat("  linears + embeddings + head NVFP4, norms/routers/DSA indexer/state params BF16 (as the shipped"));
  out.push_back(cat("    specialists): ", gb(mixed), " each; eight: ", gb(8 * mixed)));
  out.push_back(cat("  slm quantize's default (embeddings and output head also kept BF16, as NVIDIA ships): ", gb(dflt),
                    " each; eight: ", gb(8 * dflt), " (over 32 GB: quantize the embeddings and head)"));
  out.push_back(cat("  MTP depths (only for self-speculation): +", gb(mtp), " each, +", gb(8 * mtp), " for eight"));
  return out;
}


SLM_INLINE result<std::vector<std::string>> inspect_ensemble(const std::filesystem::path& config_file) {
  auto cfg = ensemble_config::load(config_file);
  if (!cfg.ok()) return std::move(cfg).take_error();
  auto reg = registry::from_config(*cfg);
  if (!reg.ok()) return std::move(reg).take_error();
  std::vector<std::string> out = {cat("ensemble  ", config_file.string(), ": router ", to_string(cfg->router.kind),
                                      ", strategy ", to_string(cfg->strategy.kind))};
  for (std::string& line : reg->inspect()) out.push_back(std::move(line));
  return out;
}

SLM_INLINE std::vector<std::string> registry::inspect() const {
  std::vector<std::string> out;
  const state& s = *s_;
  std::uint64_t weights = 0;
  std::vector<std::size_t> all;
  for (std::size_t i = 0; i < s.entries.size(); ++i) {
    const entry& e = s.entries[i];
    std::size_t sharing = 0;
    for (const entry& o : s.entries) sharing += o.tokenizer_key == e.tokenizer_key;
    out.push_back(cat("member ", e.spec.name, " (", e.spec.domain, "): ", e.spec.dir.string(), ": weights ",
                      e.weight_bytes, " bytes, tokenizer ", e.tokenizer_bytes, " bytes in memory",
                      sharing > 1 ? cat(" (shared by ", sharing, " members)") : std::string()));
    weights += e.weight_bytes;
    all.push_back(i);
  }
  const std::uint64_t total = bytes_of(s, all);
  out.push_back(cat("total: ", total, " bytes (weights ", weights, " + tokenizers ", total - weights, ")"));
  if (s.budget == 0) {
    out.push_back("memory budget: unlimited");
  } else {
    std::uint64_t largest = 0;
    for (std::size_t i : all) largest = std::max(largest, bytes_of(s, {i}));
    out.push_back(cat("memory budget: ", s.budget, " bytes: ",
                      total <= s.budget ? std::string("all members fit at once")
                      : largest <= s.budget ? std::string("not all at once; least-recently-used members are unloaded")
                                            : std::string("the largest member does not fit")));
  }
  for (std::string& l : nam56r_ensemble_arithmetic()) out.push_back(std::move(l));
  return out;
}

#endif  // SLM_DEFINE_ENSEMBLE

}  // namespace slm::ensemble
