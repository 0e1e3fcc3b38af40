// slm/ensemble/router_classifier.hpp - a learned router: softmax regression over hashed
// byte n-grams.
//
// Features: the byte n-grams (n = min_n..max_n) of the first max_bytes of the text, each
// hashed (FNV-1a over the n bytes) into 2^bucket_bits buckets; a bucket's value is
// log(1 + count), and the vector is L2-normalised, so long and short prompts look alike.
// Model: p = softmax(W x + b), W [labels, buckets]. Featurising is one pass over at most
// max_bytes bytes and scoring touches one weight column per distinct bucket: routing a
// prompt costs microseconds.
//
// Training (train()): full-batch Adam on the mean cross-entropy plus l2/2 |W|^2, a fixed
// number of steps, sums in a fixed order: the same examples give the same bytes.
//
// File (save()/load()): safetensors with "weight" F32 [labels, buckets] and "bias" F32
// [labels]; __metadata__ holds format "slm-router-classifier", version "1", the labels as
// a JSON array, bucket_bits, min_n, max_n, max_bytes and features "fnv1a-log1p-l2". load()
// checks all of it: shapes against the metadata, finite weights, the version.
#pragma once
#include "slm/core/build_mode.hpp"

#include <filesystem>

// router.hpp's shared types only, not the perplexity router (and so not the models).
#ifndef SLM_ENSEMBLE_ROUTER_TYPES_ONLY
#define SLM_ENSEMBLE_ROUTER_TYPES_ONLY
#include "slm/ensemble/router.hpp"
#undef SLM_ENSEMBLE_ROUTER_TYPES_ONLY
#else
#include "slm/ensemble/router.hpp"
#endif
#include "slm/io/json.hpp"
#include "slm/io/mapped_file.hpp"
#include "slm/io/safetensors.hpp"

namespace slm::ensemble {

struct ngram_features {
  std::uint32_t bucket_bits = 14;
  std::uint32_t min_n = 1;
  std::uint32_t max_n = 4;
  std::size_t max_bytes = 4096;  // only this prefix of a text is featurised

  std::size_t buckets() const noexcept { return std::size_t{1} << bucket_bits; }
  status check() const;

  // The sparse feature vector of `text`: (bucket, value) sorted by bucket.
  std::vector<std::pair<std::uint32_t, float>> extract(std::string_view text) const;
};

struct labeled_text {
  std::string_view text;
  std::size_t label = 0;  // index into the labels
};

struct classifier_train_options {
  ngram_features features;
  std::size_t steps = 300;
  double learning_rate = 0.05;  // Adam
  double l2 = 1e-5;             // on W, not b
};

class classifier_router {
 public:
  static constexpr std::string_view format_name = "slm-router-classifier";
  static constexpr std::string_view features_name = "fnv1a-log1p-l2";

  // weight [labels, buckets] row-major, bias [labels].
  static result<classifier_router> create(std::vector<std::string> labels, ngram_features f, std::vector<float> weight,
                                          std::vector<float> bias);

  std::span<const std::string> labels() const noexcept { return labels_; }
  const ngram_features& features() const noexcept { return features_; }
  std::span<const float> weight() const noexcept { return weight_; }
  std::span<const float> bias() const noexcept { return bias_; }

  // Softmax probabilities, aligned with labels().
  std::vector<double> probabilities(std::string_view text) const { return softmax(logits(features_.extract(text))); }

  result<route_decision> route(const route_request& q) const;

  static result<classifier_router> train(std::span<const labeled_text> examples, std::vector<std::string> labels,
                                         const classifier_train_options& opt = {});

  status save(const std::filesystem::path& path) const;
  result<std::vector<std::byte>> serialize() const;

  static result<classifier_router> load(const std::filesystem::path& path);
  static result<classifier_router> from_memory(std::span<const std::byte> bytes);

  static result<classifier_router> from_file(const safetensors::file& f);

 private:
  classifier_router() = default;

  std::vector<double> logits(const std::vector<std::pair<std::uint32_t, float>>& x) const;
  static std::vector<double> softmax(std::vector<double> z);

  status fill(safetensors::writer& w) const;

  std::vector<std::string> labels_;
  ngram_features features_;
  std::vector<float> weight_;  // [labels, buckets]
  std::vector<float> bias_;    // [labels]
};

static_assert(router<classifier_router>);

#if SLM_DEFINE_ENSEMBLE
SLM_INLINE result<classifier_router> classifier_router::train(std::span<const labeled_text> examples, std::vector<std::string> labels,
                                                          const classifier_train_options& opt) {
  SLM_TRY(check_labels(labels));
  SLM_TRY(opt.features.check());
  if (examples.empty()) return make_error(errc::invalid_argument, "train: no examples");
  if (!(opt.learning_rate > 0) || !(opt.l2 >= 0)) return make_error(errc::invalid_argument, "train: learning_rate must be > 0 and l2 >= 0");
  const std::size_t L = labels.size(), B = opt.features.buckets(), N = examples.size();
  std::vector<std::vector<std::pair<std::uint32_t, float>>> xs(N);
  for (std::size_t i = 0; i < N; ++i) {
    if (examples[i].label >= L)
      return make_error(errc::invalid_argument, "train: example ", i, " has label ", examples[i].label, " of ", L);
    xs[i] = opt.features.extract(examples[i].text);
  }
  std::vector<double> W(L * B, 0.0), b(L, 0.0), gW(L * B), gb(L), mW(L * B, 0.0), vW(L * B, 0.0), mb(L, 0.0), vb(L, 0.0);
  const double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  std::vector<double> z(L);
  for (std::size_t step = 1; step <= opt.steps; ++step) {
    std::fill(gb.begin(), gb.end(), 0.0);
    for (std::size_t k = 0; k < L * B; ++k) gW[k] = opt.l2 * W[k];
    for (std::size_t i = 0; i < N; ++i) {  // d(mean CE)/dz = (softmax(z) - onehot) / N
      for (std::size_t l = 0; l < L; ++l) {
        double s = b[l];
        for (const auto& [bk, v] : xs[i]) s += W[l * B + bk] * v;
        z[l] = s;
      }
      const double mx = *std::max_element(z.begin(), z.end());
      double sum = 0;
      for (double& v : z) sum += (v = std::exp(v - mx));
      for (std::size_t l = 0; l < L; ++l) {
        const double g = (z[l] / sum - (l == examples[i].label ? 1.0 : 0.0)) / static_cast<double>(N);
        gb[l] += g;
        for (const auto& [bk, v] : xs[i]) gW[l * B + bk] += g * v;
      }
    }
    const double c1 = 1 - std::pow(beta1, static_cast<double>(step)), c2 = 1 - std::pow(beta2, static_cast<double>(step));
    auto adam = [&](std::vector<double>& p, const std::vector<double>& g, std::vector<double>& m, std::vector<double>& v) {
      for (std::size_t k = 0; k < p.size(); ++k) {
        m[k] = beta1 * m[k] + (1 - beta1) * g[k];
        v[k] = beta2 * v[k] + (1 - beta2) * g[k] * g[k];
        p[k] -= opt.learning_rate * (m[k] / c1) / (std::sqrt(v[k] / c2) + eps);
      }
    };
    adam(W, gW, mW, vW);
    adam(b, gb, mb, vb);
  }
  std::vector<float> wf(W.begin(), W.end()), bf(b.begin(), b.end());
  return create(std::move(labels), opt.features, std::move(wf), std::move(bf));
}
#endif  // SLM_DEFINE_ENSEMBLE

// Trains on a directory tree <root>/<label>/<files>: the labels are the subdirectories, in
// sorted order; each label's files are taken in sorted order, at most max_files_per_label
// of them (0: all), and only their first features.max_bytes bytes are read. What
// `slm ensemble train-router` runs.
result<classifier_router> train_classifier_from_directory(const std::filesystem::path& root, std::size_t max_files_per_label,
                                                                 const classifier_train_options& opt = {});

// ---- implementation (SLM_DEFINE_ENSEMBLE)
#if SLM_DEFINE_ENSEMBLE

SLM_INLINE status ngram_features::check() const {
  if (bucket_bits < 4 || bucket_bits > 24) return make_error(errc::invalid_argument, "bucket_bits ", bucket_bits, " outside [4, 24]");
  if (min_n < 1 || max_n < min_n || max_n > 8) return make_error(errc::invalid_argument, "n-gram orders [", min_n, ", ", max_n, "] not within [1, 8]");
  if (max_bytes == 0) return make_error(errc::invalid_argument, "max_bytes is 0");
  return {};
}

SLM_INLINE std::vector<std::pair<std::uint32_t, float>> ngram_features::extract(std::string_view text) const {
  text = text.substr(0, std::min(text.size(), max_bytes));
  const std::uint32_t mask = static_cast<std::uint32_t>(buckets() - 1);
  std::vector<std::uint32_t> hits;
  hits.reserve(text.size() * (max_n - min_n + 1));
  for (std::size_t i = 0; i < text.size(); ++i) {
    std::uint32_t h = 2166136261u;  // FNV-1a over text[i, i + n)
    for (std::uint32_t n = 1; n <= max_n && i + n <= text.size(); ++n) {
      h = (h ^ static_cast<std::uint8_t>(text[i + n - 1])) * 16777619u;
      if (n >= min_n) hits.push_back((h ^ (h >> 15)) & mask);  // fold the high bits in
    }
  }
  std::sort(hits.begin(), hits.end());
  std::vector<std::pair<std::uint32_t, float>> x;
  double norm2 = 0;
  for (std::size_t i = 0; i < hits.size();) {
    std::size_t j = i;
    while (j < hits.size() && hits[j] == hits[i]) ++j;
    const double v = std::log1p(static_cast<double>(j - i));
    x.emplace_back(hits[i], static_cast<float>(v));
    norm2 += v * v;
    i = j;
  }
  const double inv = norm2 > 0 ? 1.0 / std::sqrt(norm2) : 0.0;
  for (auto& [b, v] : x) v = static_cast<float>(v * inv);
  return x;
}

SLM_INLINE result<classifier_router> classifier_router::create(std::vector<std::string> labels, ngram_features f, std::vector<float> weight,
                                        std::vector<float> bias) {
  SLM_TRY(check_labels(labels));
  SLM_TRY(f.check());
  if (weight.size() != labels.size() * f.buckets())
    return make_error(errc::invalid_argument, "classifier_router: weight holds ", weight.size(), " values, expected [",
                      labels.size(), ", ", f.buckets(), "]");
  if (bias.size() != labels.size())
    return make_error(errc::invalid_argument, "classifier_router: bias holds ", bias.size(), " values, expected [", labels.size(), "]");
  for (std::size_t i = 0; i < weight.size(); ++i)
    if (!std::isfinite(weight[i])) return make_error(errc::invalid_argument, "classifier_router: weight[", i, "] is ", weight[i]);
  for (std::size_t i = 0; i < bias.size(); ++i)
    if (!std::isfinite(bias[i])) return make_error(errc::invalid_argument, "classifier_router: bias[", i, "] is ", bias[i]);
  classifier_router r;
  r.labels_ = std::move(labels);
  r.features_ = f;
  r.weight_ = std::move(weight);
  r.bias_ = std::move(bias);
  return r;
}

SLM_INLINE result<route_decision> classifier_router::route(const route_request& q) const {
  route_decision d;
  d.scores = probabilities(q.text);
  d.ranking = rank_by_score(d.scores);
  d.reason = "classifier:";
  for (std::size_t l = 0; l < labels_.size(); ++l) {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, d.scores[l], std::chars_format::fixed, 3);
    d.reason += cat(" ", labels_[l], " ", std::string_view(buf, static_cast<std::size_t>(r.ptr - buf)));
  }
  return d;
}

SLM_INLINE status classifier_router::save(const std::filesystem::path& path) const {
  safetensors::writer w;
  SLM_TRY(fill(w));
  return w.write(path);
}

SLM_INLINE result<std::vector<std::byte>> classifier_router::serialize() const {
  safetensors::writer w;
  SLM_TRY(fill(w));
  return w.serialize();
}

SLM_INLINE result<classifier_router> classifier_router::load(const std::filesystem::path& path) {
  auto f = safetensors::file::open(path);
  if (!f.ok()) return std::move(f).take_error();
  return from_file(*f).with_context(path.string());
}

SLM_INLINE result<classifier_router> classifier_router::from_memory(std::span<const std::byte> bytes) {
  auto f = safetensors::file::from_memory(bytes, "<memory>");
  if (!f.ok()) return std::move(f).take_error();
  return from_file(*f).with_context("<memory>");
}

SLM_INLINE result<classifier_router> classifier_router::from_file(const safetensors::file& f) {
  const auto& h = f.header();
  auto meta = [&](std::string_view key) -> result<std::string_view> {
    const std::string* v = h.metadata_value(key);
    if (!v) return make_error(errc::format_error, "router classifier: __metadata__ lacks \"", key, "\"");
    return std::string_view(*v);
  };
  auto format = meta("format");
  if (!format.ok()) return std::move(format).take_error();
  if (*format != format_name)
    return make_error(errc::format_error, "router classifier: format \"", *format, "\", expected \"", format_name, "\"");
  auto version = meta("version");
  if (!version.ok()) return std::move(version).take_error();
  if (*version != "1") return make_error(errc::unsupported, "router classifier: version \"", *version, "\" (this build reads version 1)");
  auto feats = meta("features");
  if (!feats.ok()) return std::move(feats).take_error();
  if (*feats != features_name)
    return make_error(errc::unsupported, "router classifier: features \"", *feats, "\" (this build computes \"", features_name, "\")");
  ngram_features nf;
  auto number = [&](std::string_view key, auto& out) -> status {
    auto v = meta(key);
    if (!v.ok()) return std::move(v).take_error();
    std::uint64_t n = 0;
    const auto r = std::from_chars(v->data(), v->data() + v->size(), n);
    if (r.ec != std::errc() || r.ptr != v->data() + v->size() || n > 1'000'000'000)
      return make_error(errc::format_error, "router classifier: \"", key, "\" is \"", *v, "\", not a count");
    out = static_cast<std::remove_reference_t<decltype(out)>>(n);
    return {};
  };
  SLM_TRY(number("bucket_bits", nf.bucket_bits));
  SLM_TRY(number("min_n", nf.min_n));
  SLM_TRY(number("max_n", nf.max_n));
  SLM_TRY(number("max_bytes", nf.max_bytes));
  if (status s = nf.check(); !s.ok()) return make_error(errc::format_error, "router classifier: ", s.message());
  auto labels_text = meta("labels");
  if (!labels_text.ok()) return std::move(labels_text).take_error();
  auto lj = json::parse(*labels_text);
  if (!lj.ok() || !lj->is_array()) return make_error(errc::format_error, "router classifier: \"labels\" is not a JSON array");
  std::vector<std::string> labels;
  for (const json::value& v : lj->items()) {
    if (!v.is_string()) return make_error(errc::format_error, "router classifier: a label is not a string");
    labels.emplace_back(v.as_string());
  }
  if (status s = check_labels(labels); !s.ok()) return make_error(errc::format_error, "router classifier: ", s.message());
  auto read = [&](const char* name, std::initializer_list<std::int64_t> want, std::vector<float>& out) -> status {
    auto t = f.tensor(name);
    if (!t.ok()) return make_error(errc::format_error, "router classifier: missing tensor '", name, "'");
    const std::vector<std::int64_t> w(want);
    const auto dims = t->shape().dims();
    if (t->type() != dtype::f32 || !std::equal(dims.begin(), dims.end(), w.begin(), w.end())) {
      std::string ws = "[";
      for (std::size_t i = 0; i < w.size(); ++i) ws += cat(i ? ", " : "", w[i]);
      return make_error(errc::format_error, "router classifier: tensor '", name, "' is ", safetensors_name(t->type()), " ",
                        t->shape().to_string(), ", expected F32 ", ws, "]");
    }
    out.assign(static_cast<std::size_t>(t->numel()), 0.0f);
    SLM_TRY(t->to_f32(out));
    for (std::size_t i = 0; i < out.size(); ++i)
      if (!std::isfinite(out[i]))
        return make_error(errc::format_error, "router classifier: tensor '", name, "' element ", i, " is ", out[i]);
    return {};
  };
  const auto L = static_cast<std::int64_t>(labels.size());
  std::vector<float> weight, bias;
  SLM_TRY(read("weight", {L, static_cast<std::int64_t>(nf.buckets())}, weight));
  SLM_TRY(read("bias", {L}, bias));
  return create(std::move(labels), nf, std::move(weight), std::move(bias));
}

SLM_INLINE std::vector<double> classifier_router::logits(const std::vector<std::pair<std::uint32_t, float>>& x) const {
  const std::size_t B = features_.buckets();
  std::vector<double> z(labels_.size());
  for (std::size_t l = 0; l < labels_.size(); ++l) {  // [L, B] x [B] (sparse) -> [L]
    double s = bias_[l];
    for (const auto& [b, v] : x) s += static_cast<double>(weight_[l * B + b]) * v;
    z[l] = s;
  }
  return z;
}

SLM_INLINE std::vector<double> classifier_router::softmax(std::vector<double> z) {
  const double mx = *std::max_element(z.begin(), z.end());
  double sum = 0;
  for (double& v : z) sum += (v = std::exp(v - mx));
  for (double& v : z) v /= sum;
  return z;
}

SLM_INLINE status classifier_router::fill(safetensors::writer& w) const {
  json::value lj = json::value::make_array();
  for (const auto& l : labels_) lj.push_back(json::value(l));
  w.set_metadata("format", std::string(format_name));
  w.set_metadata("version", "1");
  w.set_metadata("features", std::string(features_name));
  w.set_metadata("labels", json::dump(lj));
  w.set_metadata("bucket_bits", cat(features_.bucket_bits));
  w.set_metadata("min_n", cat(features_.min_n));
  w.set_metadata("max_n", cat(features_.max_n));
  w.set_metadata("max_bytes", cat(features_.max_bytes));
  const auto as_bytes = [](const std::vector<float>& v) { return std::as_bytes(std::span<const float>(v)); };
  auto ws = shape::from(std::vector<std::int64_t>{static_cast<std::int64_t>(labels_.size()), static_cast<std::int64_t>(features_.buckets())});
  auto bs = shape::from(std::vector<std::int64_t>{static_cast<std::int64_t>(labels_.size())});
  if (!ws.ok()) return std::move(ws).take_error();
  if (!bs.ok()) return std::move(bs).take_error();
  SLM_TRY(w.add("weight", dtype::f32, *ws, as_bytes(weight_)));
  SLM_TRY(w.add("bias", dtype::f32, *bs, as_bytes(bias_)));
  return {};
}

SLM_INLINE result<classifier_router> train_classifier_from_directory(const std::filesystem::path& root, std::size_t max_files_per_label,
                                                                 const classifier_train_options& opt) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> dirs;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory(ec)) dirs.push_back(it->path());
  if (ec) return make_error(errc::io_error, root.string(), ": ", ec.message());
  std::sort(dirs.begin(), dirs.end());
  if (dirs.empty()) return make_error(errc::not_found, root.string(), ": no label subdirectories");
  std::vector<std::string> labels, texts;
  std::vector<std::size_t> label_of;
  for (std::size_t l = 0; l < dirs.size(); ++l) {
    labels.push_back(dirs[l].filename().string());
    std::vector<fs::path> files;
    for (fs::directory_iterator it(dirs[l], ec), end; !ec && it != end; it.increment(ec))
      if (it->is_regular_file(ec)) files.push_back(it->path());
    if (ec) return make_error(errc::io_error, dirs[l].string(), ": ", ec.message());
    std::sort(files.begin(), files.end());
    if (files.empty()) return make_error(errc::not_found, dirs[l].string(), ": no files for label \"", labels.back(), "\"");
    if (max_files_per_label && files.size() > max_files_per_label) files.resize(max_files_per_label);
    for (const auto& p : files) {
      auto text = read_file_prefix(p, opt.features.max_bytes);  // refuses a FIFO without blocking
      if (!text.ok()) return std::move(text).take_error();
      texts.push_back(std::move(*text));
      label_of.push_back(l);
    }
  }
  std::vector<labeled_text> examples;
  for (std::size_t i = 0; i < texts.size(); ++i) examples.push_back({texts[i], label_of[i]});
  return classifier_router::train(examples, std::move(labels), opt);
}

#endif  // SLM_DEFINE_ENSEMBLE

}  // namespace slm::ensemble
