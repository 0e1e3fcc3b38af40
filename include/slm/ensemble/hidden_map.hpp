// slm/ensemble/hidden_map.hpp - a learned linear map between two members' hidden spaces.
//
// y = x W^T + b carries member A's final-normed hidden state (what A's head reads) into
// member B's space, where B's head turns it into logits over B's vocabulary: A "speaks"
// through B's output layer. The map is a policy stored as safetensors:
//   "weight" F32 [d_B, d_A], "bias" F32 [d_B]; metadata format = "slm.hidden_map.v1",
//   source / target (member names), source_dim = d_A, target_dim = d_B.
// It is fitted offline by least squares on paired hidden states: rows of A and B taken
// at the same byte offsets of one text (common_boundaries, vocab_align.hpp), so members
// with different tokenizers pair up where both tokenisations cut.
//
//   auto pairs = slm::ensemble::collect_pairs(a, b, text, cx);           // result<paired_hidden>
//   auto map = slm::ensemble::hidden_map::fit(pairs->x, pairs->y, pairs->n, d_a, d_b, 1.0);
//   map->save("cpp_to_cmake.safetensors");
//   slm::ensemble::mapped_logits(*map, *b.model, hidden_a, rows, logits_b, cx);
//
// The fit: ridge-regularised least squares with an unpenalised bias. Centering X and Y by
// their means removes the bias from the system; the normal equations
//   (Xc^T Xc + ridge I) W^T = Xc^T Yc      [d_A, d_A] x [d_A, d_B] = [d_A, d_B]
// are solved by Cholesky in double, and b = mean(Y) - W mean(X). n rows of X give a
// centred matrix of rank at most n - 1, so fit() refuses n < d_A + 1; a system that is
// still not positive definite (dependent hidden coordinates and ridge 0) is an error too.
//
// Hidden states come from NAM56R members (nam56r_model::session::forward's hidden rows);
// other families return errc::unsupported here until their sessions expose them.
// A hidden_map is an immutable value once built; share it across threads freely.
#pragma once
#include "slm/core/build_mode.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "slm/ensemble/member.hpp"
#include "slm/ensemble/vocab_align.hpp"
#include "slm/layers/linear.hpp"
#include "slm/kernels/matmul.hpp"
#include "slm/io/safetensors.hpp"
#include "slm/core/status.hpp"

namespace slm::ensemble {

class hidden_map {
 public:
  static constexpr std::string_view format_name = "slm.hidden_map.v1";

  // A map from its parts: weight [d_b, d_a] row-major, bias [d_b], every value finite.
  static result<hidden_map> create(std::vector<float> weight, std::vector<float> bias, std::size_t d_a, std::size_t d_b,
                                   std::string source = {}, std::string target = {});

  static result<hidden_map> load(const std::filesystem::path& path);
  static result<hidden_map> from_memory(std::span<const std::byte> bytes, std::string name = "<memory>");

  result<std::vector<std::byte>> serialize() const;
  status save(const std::filesystem::path& path) const;

  // y [rows, d_b] = x [rows, d_a] W^T + b: [rows, d_a] x [d_a, d_b] -> [rows, d_b].
  status apply(const float* x, std::size_t rows, float* y, compute_context& cx) const;

  // Least squares with ridge (see the top): X [n, d_a], Y [n, d_b] row-major.
  static result<hidden_map> fit(std::span<const float> X, std::span<const float> Y, std::size_t n, std::size_t d_a,
                                std::size_t d_b, double ridge, std::string source = {}, std::string target = {});

  std::size_t source_dim() const noexcept { return d_a_; }
  std::size_t target_dim() const noexcept { return d_b_; }
  const std::string& source() const noexcept { return source_; }
  const std::string& target() const noexcept { return target_; }
  std::span<const float> weight() const noexcept { return w_; }  // [d_b, d_a]
  std::span<const float> bias() const noexcept { return b_; }    // [d_b]

 private:
  static status all_finite(std::span<const float> v, const char* what, std::size_t row);

  static result<std::size_t> dim_of(const safetensors::header& h, std::string_view key);

  static result<hidden_map> from_file(const safetensors::file& f);

  void fill(safetensors::writer& w) const;

  std::vector<float> w_, b_;
  std::size_t d_a_ = 0, d_b_ = 0;
  std::string source_, target_;
};

// ---- Members' hidden states (NAM56R members) ----

result<std::size_t> hidden_size(const member_model& m);

// Runs ids on the session and writes the final-normed hidden of every one of them to
// hidden ([ids.size(), hidden_size]); no logits are computed.
status forward_hidden(member_session& s, std::span<const std::int32_t> ids, float* hidden, compute_context& cx);

// The member's head on hidden rows of its own space: [rows, d] -> [rows, vocab].
status head_logits(const member_model& m, const float* hidden, std::size_t rows, float* logits,
                          compute_context& cx);

// Logits in B's vocabulary from A's hidden rows: B's head on map(hidden_a).
// [rows, d_A] -> [rows, d_B] -> [rows, vocab_B].
status mapped_logits(const hidden_map& map, const member_model& b, const float* hidden_a, std::size_t rows,
                            float* logits_b, compute_context& cx);

// Hidden states of two members paired at the common token boundaries of one text:
// row r of x (A's hidden, [n, d_a]) and of y (B's, [n, d_b]) belong to the tokens that
// end at byte at[r].offset in each tokenisation.
struct paired_hidden {
  std::size_t n = 0, d_a = 0, d_b = 0;
  std::vector<float> x, y;
  std::vector<shared_boundary> at;
};

// Encodes text with each member's tokenizer (no BOS, specials as text), runs both over it
// and keeps the rows at the common boundaries. The text is cut at common boundaries into
// windows that fit both members' sessions (at most `window` tokens each, 0 = the sessions'
// max_tokens); each window starts fresh sessions, so its first rows see little context.
result<paired_hidden> collect_pairs(const member_ref& a, const member_ref& b, std::string_view text,
                                           compute_context& cx, std::size_t window = 0);

// ---- implementation (SLM_DEFINE_ENSEMBLE)
#if SLM_DEFINE_ENSEMBLE

SLM_INLINE result<hidden_map> hidden_map::create(std::vector<float> weight, std::vector<float> bias, std::size_t d_a, std::size_t d_b,
                                 std::string source, std::string target) {
  if (d_a == 0 || d_b == 0) return make_error(errc::invalid_argument, "hidden_map: dimensions ", d_a, " -> ", d_b);
  if (weight.size() != d_a * d_b || bias.size() != d_b)
    return make_error(errc::invalid_argument, "hidden_map: weight of ", weight.size(), " values and bias of ",
                      bias.size(), " for [", d_b, ", ", d_a, "] and [", d_b, "]");
  SLM_TRY(all_finite(weight, "weight", d_a));
  SLM_TRY(all_finite(bias, "bias", 1));
  hidden_map m;
  m.w_ = std::move(weight);
  m.b_ = std::move(bias);
  m.d_a_ = d_a;
  m.d_b_ = d_b;
  m.source_ = std::move(source);
  m.target_ = std::move(target);
  return m;
}

SLM_INLINE result<hidden_map> hidden_map::load(const std::filesystem::path& path) {
  auto f = safetensors::file::open(path);
  if (!f.ok()) return std::move(f).take_error();
  auto m = from_file(*f);
  if (!m.ok()) return std::move(m).take_error().with_context(path.string());
  return m;
}

SLM_INLINE result<hidden_map> hidden_map::from_memory(std::span<const std::byte> bytes, std::string name) {
  auto f = safetensors::file::from_memory(bytes, name);
  if (!f.ok()) return std::move(f).take_error();
  auto m = from_file(*f);
  if (!m.ok()) return std::move(m).take_error().with_context(name);
  return m;
}

SLM_INLINE result<std::vector<std::byte>> hidden_map::serialize() const {
  safetensors::writer w;
  fill(w);
  return w.serialize();
}

SLM_INLINE status hidden_map::save(const std::filesystem::path& path) const {
  safetensors::writer w;
  fill(w);
  return w.write(path);
}

SLM_INLINE status hidden_map::apply(const float* x, std::size_t rows, float* y, compute_context& cx) const {
  if (rows == 0) return {};
  if (!x || !y) return make_error(errc::invalid_argument, "hidden_map::apply: a null buffer");
  weight_matrix w;
  w.format = weight_format::f32;
  w.rows = d_b_;
  w.cols = d_a_;
  w.data = reinterpret_cast<const std::byte*>(w_.data());
  w.row_stride = d_a_ * sizeof(float);
  SLM_TRY(matmul(w, x, rows, d_a_, y, d_b_, cx.ex, isa::best, activation_precision::f32));
  for (std::size_t t = 0; t < rows; ++t)
    for (std::size_t o = 0; o < d_b_; ++o) y[t * d_b_ + o] += b_[o];
  return {};
}

SLM_INLINE result<hidden_map> hidden_map::fit(std::span<const float> X, std::span<const float> Y, std::size_t n, std::size_t d_a,
                              std::size_t d_b, double ridge, std::string source, std::string target) {
  if (d_a == 0 || d_b == 0) return make_error(errc::invalid_argument, "hidden_map::fit: dimensions ", d_a, " -> ", d_b);
  if (X.size() != n * d_a || Y.size() != n * d_b)
    return make_error(errc::invalid_argument, "hidden_map::fit: X holds ", X.size(), " values and Y ", Y.size(),
                      ", expected [", n, ", ", d_a, "] and [", n, ", ", d_b, "]");
  if (!(ridge >= 0) || !std::isfinite(ridge))
    return make_error(errc::invalid_argument, "hidden_map::fit: ridge ", ridge, " (must be finite and >= 0)");
  if (n < d_a + 1)
    return make_error(errc::invalid_argument, "hidden_map::fit: ", n, " rows cannot determine a map from ", d_a,
                      " dimensions (need at least ", d_a + 1, ")");
  SLM_TRY(all_finite(X, "X", d_a));
  SLM_TRY(all_finite(Y, "Y", d_b));
  std::vector<double> mx(d_a, 0.0), my(d_b, 0.0);
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < d_a; ++i) mx[i] += X[r * d_a + i];
    for (std::size_t j = 0; j < d_b; ++j) my[j] += Y[r * d_b + j];
  }
  for (double& v : mx) v /= static_cast<double>(n);
  for (double& v : my) v /= static_cast<double>(n);
  // G = Xc^T Xc + ridge I ([d_a, n] x [n, d_a] -> [d_a, d_a], lower triangle),
  // C = Xc^T Yc ([d_a, n] x [n, d_b] -> [d_a, d_b]).
  std::vector<double> G(d_a * d_a, 0.0), C(d_a * d_b, 0.0), xc(d_a), yc(d_b);
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < d_a; ++i) xc[i] = X[r * d_a + i] - mx[i];
    for (std::size_t j = 0; j < d_b; ++j) yc[j] = Y[r * d_b + j] - my[j];
    for (std::size_t i = 0; i < d_a; ++i) {
      const double xi = xc[i];
      double* g = G.data() + i * d_a;
      for (std::size_t k = 0; k <= i; ++k) g[k] += xi * xc[k];
      double* c = C.data() + i * d_b;
      for (std::size_t j = 0; j < d_b; ++j) c[j] += xi * yc[j];
    }
  }
  double max_diag = 0;
  for (std::size_t i = 0; i < d_a; ++i) {
    G[i * d_a + i] += ridge;
    max_diag = std::max(max_diag, G[i * d_a + i]);
  }
  // Cholesky G = L L^T in place (lower triangle). A pivot at or below 1e-12 of the
  // largest diagonal entry means the system is singular to double precision.
  for (std::size_t j = 0; j < d_a; ++j) {
    double s = G[j * d_a + j];
    for (std::size_t k = 0; k < j; ++k) s -= G[j * d_a + k] * G[j * d_a + k];
    if (!(s > 1e-12 * max_diag))
      return make_error(errc::invalid_argument, "hidden_map::fit: the normal equations are not positive definite "
                        "(pivot ", j, " is ", s, "): the source hidden coordinates are linearly dependent over these ",
                        n, " rows; raise ridge (now ", ridge, ") or give more varied rows");
    const double l = std::sqrt(s);
    G[j * d_a + j] = l;
    for (std::size_t i = j + 1; i < d_a; ++i) {
      double t = G[i * d_a + j];
      for (std::size_t k = 0; k < j; ++k) t -= G[i * d_a + k] * G[j * d_a + k];
      G[i * d_a + j] = t / l;
    }
  }
  // Solve L Z = C, then L^T W^T = Z, all d_b right-hand sides at once ([d_a, d_b]).
  for (std::size_t i = 0; i < d_a; ++i) {
    double* c = C.data() + i * d_b;
    for (std::size_t k = 0; k < i; ++k) {
      const double l = G[i * d_a + k];
      const double* z = C.data() + k * d_b;
      for (std::size_t j = 0; j < d_b; ++j) c[j] -= l * z[j];
    }
    for (std::size_t j = 0; j < d_b; ++j) c[j] /= G[i * d_a + i];
  }
  for (std::size_t i = d_a; i-- > 0;) {
    double* c = C.data() + i * d_b;
    for (std::size_t k = i + 1; k < d_a; ++k) {
      const double l = G[k * d_a + i];
      const double* z = C.data() + k * d_b;
      for (std::size_t j = 0; j < d_b; ++j) c[j] -= l * z[j];
    }
    for (std::size_t j = 0; j < d_b; ++j) c[j] /= G[i * d_a + i];
  }
  std::vector<float> w(d_b * d_a), b(d_b);
  for (std::size_t j = 0; j < d_b; ++j) {
    double bj = my[j];
    for (std::size_t i = 0; i < d_a; ++i) {
      w[j * d_a + i] = static_cast<float>(C[i * d_b + j]);
      bj -= C[i * d_b + j] * mx[i];
    }
    b[j] = static_cast<float>(bj);
  }
  return create(std::move(w), std::move(b), d_a, d_b, std::move(source), std::move(target));
}

SLM_INLINE status hidden_map::all_finite(std::span<const float> v, const char* what, std::size_t row) {
  for (std::size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]))
      return make_error(errc::format_error, "hidden_map: ", what, " holds ", v[i], " at [", i / row, ", ", i % row, "]");
  return {};
}

SLM_INLINE result<std::size_t> hidden_map::dim_of(const safetensors::header& h, std::string_view key) {
  const std::string* v = h.metadata_value(key);
  if (!v) return make_error(errc::format_error, "hidden_map: metadata lacks \"", key, "\"");
  std::size_t n = 0;
  if (v->empty() || v->size() > 9) return make_error(errc::format_error, "hidden_map: metadata ", key, " = \"", *v, "\"");
  for (char c : *v) {
    if (c < '0' || c > '9') return make_error(errc::format_error, "hidden_map: metadata ", key, " = \"", *v, "\"");
    n = n * 10 + static_cast<std::size_t>(c - '0');
  }
  return n;
}

SLM_INLINE result<hidden_map> hidden_map::from_file(const safetensors::file& f) {
  const safetensors::header& h = f.header();
  const std::string* fmt = h.metadata_value("format");
  if (!fmt || *fmt != format_name)
    return make_error(errc::format_error, "hidden_map: metadata format is \"", fmt ? *fmt : std::string("(none)"),
                      "\", expected \"", format_name, "\"");
  auto d_a = dim_of(h, "source_dim");
  if (!d_a.ok()) return std::move(d_a).take_error();
  auto d_b = dim_of(h, "target_dim");
  if (!d_b.ok()) return std::move(d_b).take_error();
  auto part = [&](std::string_view name, const slm::shape& want) -> result<std::vector<float>> {
    auto v = f.tensor(name);
    if (!v.ok()) return std::move(v).take_error();
    if (v->type() != dtype::f32 || v->shape() != want)
      return make_error(errc::format_error, "hidden_map: tensor '", name, "' is ", safetensors_name(v->type()), " ",
                        v->shape().to_string(), ", expected F32 ", want.to_string());
    std::vector<float> out(static_cast<std::size_t>(v->numel()));
    SLM_TRY(v->to_f32(out));
    return out;
  };
  const auto da = static_cast<std::int64_t>(*d_a), db = static_cast<std::int64_t>(*d_b);
  auto w = part("weight", slm::shape{db, da});
  if (!w.ok()) return std::move(w).take_error();
  auto b = part("bias", slm::shape{db});
  if (!b.ok()) return std::move(b).take_error();
  const std::string* src = h.metadata_value("source");
  const std::string* dst = h.metadata_value("target");
  return create(std::move(*w), std::move(*b), *d_a, *d_b, src ? *src : std::string(), dst ? *dst : std::string());
}

SLM_INLINE void hidden_map::fill(safetensors::writer& w) const {
  w.set_metadata("format", std::string(format_name));
  w.set_metadata("source", source_);
  w.set_metadata("target", target_);
  w.set_metadata("source_dim", cat(d_a_));
  w.set_metadata("target_dim", cat(d_b_));
  const auto da = static_cast<std::int64_t>(d_a_), db = static_cast<std::int64_t>(d_b_);
  // Shapes and sizes agree by construction (create()), so add() cannot fail.
  (void)w.add("weight", dtype::f32, slm::shape{db, da}, std::as_bytes(std::span(w_)));
  (void)w.add("bias", dtype::f32, slm::shape{db}, std::as_bytes(std::span(b_)));
}

SLM_INLINE result<std::size_t> hidden_size(const member_model& m) {
  if (const auto* n = std::get_if<nam56r_model>(&m.get())) return n->config().hidden_size;
  return make_error(errc::unsupported, "hidden states: only NAM56R members expose them");
}

SLM_INLINE status forward_hidden(member_session& s, std::span<const std::int32_t> ids, float* hidden, compute_context& cx) {
  if (auto* n = std::get_if<nam56r_model::session>(&s.get()))
    return n->forward(ids, 0, nullptr, cx, structure_inputs{}, ids.size(), hidden);
  return make_error(errc::unsupported, "hidden states: only NAM56R members expose them");
}

SLM_INLINE status head_logits(const member_model& m, const float* hidden, std::size_t rows, float* logits,
                          compute_context& cx) {
  if (const auto* n = std::get_if<nam56r_model>(&m.get())) return n->head_logits(hidden, rows, logits, cx);
  return make_error(errc::unsupported, "head_logits: only NAM56R members expose their head");
}

SLM_INLINE status mapped_logits(const hidden_map& map, const member_model& b, const float* hidden_a, std::size_t rows,
                            float* logits_b, compute_context& cx) {
  auto d_b = hidden_size(b);
  if (!d_b.ok()) return std::move(d_b).take_error();
  if (*d_b != map.target_dim())
    return make_error(errc::invalid_argument, "mapped_logits: the map's target dimension ", map.target_dim(),
                      " is not the member's hidden size ", *d_b);
  std::vector<float> y(rows * map.target_dim());
  SLM_TRY(map.apply(hidden_a, rows, y.data(), cx));
  return head_logits(b, y.data(), rows, logits_b, cx);
}

SLM_INLINE result<paired_hidden> collect_pairs(const member_ref& a, const member_ref& b, std::string_view text,
                                           compute_context& cx, std::size_t window) {
  if (!a.model || !a.tok || !b.model || !b.tok)
    return make_error(errc::invalid_argument, "collect_pairs: a member without its model or tokenizer");
  const encode_options plain{.add_special_tokens = false, .parse_special = false};
  auto ids_a = a.tok->encode(text, plain);
  if (!ids_a.ok()) return std::move(ids_a).take_error();
  auto ids_b = b.tok->encode(text, plain);
  if (!ids_b.ok()) return std::move(ids_b).take_error();
  auto cuts = common_boundaries(*a.tok, *ids_a, *b.tok, *ids_b);
  if (!cuts.ok()) return std::move(cuts).take_error().with_context("collect_pairs");
  auto d_a = hidden_size(*a.model);
  if (!d_a.ok()) return std::move(d_a).take_error();
  auto d_b = hidden_size(*b.model);
  if (!d_b.ok()) return std::move(d_b).take_error();
  member_session sa = a.model->new_session(), sb = b.model->new_session();
  std::size_t w = window ? window : std::min(sa.max_tokens(), sb.max_tokens());
  w = std::min({w, sa.max_tokens(), sb.max_tokens()});
  paired_hidden out;
  out.d_a = *d_a;
  out.d_b = *d_b;
  std::vector<float> ha, hb;
  std::size_t first = 0;  // first boundary of the current window
  std::size_t ta = 0, tb = 0;  // first token of the window in each tokenisation
  while (first < cuts->size()) {
    // The last boundary whose tokens fit the window on both sides.
    std::size_t last = first;
    while (last + 1 < cuts->size() && (*cuts)[last + 1].a_token + 1 - ta <= w && (*cuts)[last + 1].b_token + 1 - tb <= w)
      ++last;
    const std::size_t na = (*cuts)[last].a_token + 1 - ta, nb = (*cuts)[last].b_token + 1 - tb;
    if (na > w || nb > w)
      return make_error(errc::out_of_range, "collect_pairs: ", na, " and ", nb, " tokens between common boundaries ",
                        "exceed the window of ", w, " tokens");
    ha.resize(na * out.d_a);
    hb.resize(nb * out.d_b);
    sa.reset();
    sb.reset();
    SLM_TRY(forward_hidden(sa, std::span<const std::int32_t>(*ids_a).subspan(ta, na), ha.data(), cx));
    SLM_TRY(forward_hidden(sb, std::span<const std::int32_t>(*ids_b).subspan(tb, nb), hb.data(), cx));
    for (std::size_t k = first; k <= last; ++k) {
      const shared_boundary& c = (*cuts)[k];
      const float* xa = ha.data() + (c.a_token - ta) * out.d_a;
      const float* yb = hb.data() + (c.b_token - tb) * out.d_b;
      out.x.insert(out.x.end(), xa, xa + out.d_a);
      out.y.insert(out.y.end(), yb, yb + out.d_b);
      out.at.push_back(c);
    }
    ta = (*cuts)[last].a_token + 1;
    tb = (*cuts)[last].b_token + 1;
    first = last + 1;
  }
  out.n = out.at.size();
  return out;
}

#endif  // SLM_DEFINE_ENSEMBLE

}  // namespace slm::ensemble
