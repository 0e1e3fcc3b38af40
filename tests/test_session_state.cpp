// Session state: snapshot / restore, rollback by n tokens, save / load (models/hf/model.hpp) and the
// recurrent history behind them (layers/recurrent_cache.hpp), on the golden models of every
// cache kind: GQA (llama), MLA in both forms (deepseek_v3), MLA + DSA indexer keys
// (deepseek_v32), Mamba-2 (mamba2) and the hybrids (nemotron_h, granitemoehybrid), each
// with f32 and bf16 KV caches. Checked:
//  (a) snapshot after P tokens, continue, restore, continue again: the same logits, bit
//      for bit (also restored into another session);
//  (b) save, load into a fresh session, continue: bit for bit the uninterrupted session,
//      and save after load gives the same bytes;
//  (c) rollback(n) for n = 1..R, then the same tokens again: the same logits bit for bit
//      (same call shapes); other tokens after a rollback: bit for bit a fresh session fed
//      that sequence; a verify-style call of R tokens rolled back and re-fed in one call
//      (other call shapes): within float rounding, printed;
//  (d) rollback beyond the kept history fails cleanly (errc::unsupported, the session
//      unchanged); rollback of the whole last call, or to 0, always works;
//  (e) every truncation of a saved blob, truncations made self-consistent (size and
//      checksum patched), corrupted header and record fields, other models' and other KV
//      dtypes' blobs are rejected with clear errors, and the session stays as it was;
//  plus the Mamba-2 history path against the plain forward within test_mamba2's
//  tolerances, and recurrent_cache's ring on a toy state.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "slm/models/hf/model.hpp"
#include "slm/layers/recurrent_cache.hpp"
#include "slm/io/safetensors.hpp"
#include "slm/io/session_file.hpp"
#include "test_helpers.hpp"

namespace {

using bytes = std::vector<std::byte>;

std::vector<std::int32_t> golden_ids(const std::string& model) {
  std::vector<std::int32_t> out;
  auto f = slm::safetensors::file::open(slm_test::test_data("golden/hf/" + model) / "golden.safetensors");
  EXPECT_TRUE(f.ok()) << f.error().message();
  if (!f.ok()) return out;
  const auto* t = f->find("input_ids");
  EXPECT_NE(t, nullptr);
  if (!t) return out;
  std::vector<float> v(static_cast<std::size_t>(t->shape.numel()));
  EXPECT_TRUE(f->view(*t).to_f32(v).ok());
  for (float x : v) out.push_back(static_cast<std::int32_t>(x));
  return out;
}

struct state_case {
  const char* model;
  slm::kv_dtype kv;
  slm::mla_mode mla;
  std::string name() const {
    std::string n = model;
    n += kv == slm::kv_dtype::f32 ? "_f32" : "_bf16";
    if (mla == slm::mla_mode::expanded) n += "_expanded";
    if (mla == slm::mla_mode::absorbed) n += "_absorbed";
    return n;
  }
};

constexpr std::size_t kR = 4;  // rollback_tokens
constexpr std::size_t kP = 9;  // prefill

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}
using slm_test::max_abs_diff;
double max_abs(const float* a, std::size_t n) {
  double m = 0;
  for (std::size_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(std::fabs(a[i])));
  return m;
}

class SessionState : public ::testing::TestWithParam<state_case> {
 protected:
  void SetUp() override {
    auto m = slm::model::load(slm_test::test_data(std::string("golden/hf/") + GetParam().model));
    ASSERT_TRUE(m.ok()) << m.error().message();
    model_.emplace(std::move(*m));
    ids_ = golden_ids(GetParam().model);
    ASSERT_GE(ids_.size(), kP + 3 * kR + 8);
    V_ = model_->vocab();
    for (const auto& l : model_->config().layers) recurrent_ = recurrent_ || l.attention == slm::attention_kind::mamba2;
  }
  slm::session_options options(std::size_t R = kR) const {
    slm::session_options o;
    o.kv = GetParam().kv;
    o.mla = GetParam().mla;
    o.rollback_tokens = R;
    return o;
  }
  slm::model::session fresh(std::size_t R = kR) const { return model_->new_session(options(R)); }
  // Feeds ids[a, b) in one call; returns the logits of every row.
  std::vector<float> feed(slm::model::session& s, std::size_t a, std::size_t b) {
    return feed(s, std::span<const std::int32_t>(ids_.data() + a, b - a));
  }
  std::vector<float> feed(slm::model::session& s, std::span<const std::int32_t> t) {
    std::vector<float> out(t.size() * V_);
    const slm::status st = s.forward(t, t.size(), out.data(), cx_);
    EXPECT_TRUE(st.ok()) << st.message();
    return out;
  }
  // Feeds ids[a, b) one token per call.
  std::vector<float> feed_singly(slm::model::session& s, std::size_t a, std::size_t b) {
    std::vector<float> out;
    for (std::size_t t = a; t < b; ++t) {
      const auto l = feed(s, t, t + 1);
      out.insert(out.end(), l.begin(), l.end());
    }
    return out;
  }
  // What a session continues with: a few calls of different shapes.
  std::vector<float> continuation(slm::model::session& s, std::size_t from) {
    auto a = feed(s, from, from + 3);
    auto b = feed_singly(s, from + 3, from + 5);
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }
  bytes save(const slm::model::session& s) {
    auto b = s.save();
    EXPECT_TRUE(b.ok()) << b.error().message();
    return b.ok() ? std::move(*b) : bytes{};
  }

  std::optional<slm::model> model_;
  std::vector<std::int32_t> ids_;
  std::size_t V_ = 0;
  bool recurrent_ = false;
  slm::compute_context cx_{slm_test::the_pools().p2};
};

// (a)
TEST_P(SessionState, SnapshotRestoreIsBitExact) {
  auto s = fresh();
  feed(s, 0, kP);
  auto snap = s.snapshot();
  ASSERT_TRUE(snap.ok()) << snap.error().message();
  EXPECT_EQ(snap->position(), kP);
  const auto first = continuation(s, kP);
  ASSERT_TRUE(s.restore(*snap).ok());
  EXPECT_EQ(s.position(), kP);
  const auto again = continuation(s, kP);
  EXPECT_TRUE(same_bits(first, again));
  // Into another session (fresh, never run), and from a snapshot taken of a fresh one.
  auto s2 = fresh();
  ASSERT_TRUE(s2.restore(*snap).ok());
  EXPECT_TRUE(same_bits(continuation(s2, kP), first));
  auto empty = fresh().snapshot();
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->position(), 0u);
  ASSERT_TRUE(s2.restore(*empty).ok());
  EXPECT_EQ(s2.position(), 0u);
  auto s3 = fresh();
  const auto from_zero = feed(s3, 0, kP);
  EXPECT_TRUE(same_bits(feed(s2, 0, kP), from_zero));
  // A snapshot does not follow the session it was taken from.
  ASSERT_TRUE(s.restore(*snap).ok());
  EXPECT_TRUE(same_bits(continuation(s, kP), first));
}

// (b)
TEST_P(SessionState, SaveLoadIsBitExact) {
  auto s = fresh();
  feed(s, 0, kP);
  feed_singly(s, kP, kP + 2);
  const bytes blob = save(s);
  auto size = s.saved_size();
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, blob.size());
  const auto uninterrupted = continuation(s, kP + 2);
  auto s2 = fresh();
  ASSERT_TRUE(s2.load(blob).ok());
  EXPECT_EQ(s2.position(), kP + 2);
  EXPECT_EQ(save(s2), blob);  // save(load(x)) == x
  EXPECT_TRUE(same_bits(continuation(s2, kP + 2), uninterrupted));
  // The writer form writes the same bytes, in pieces.
  bytes pieces;
  std::size_t calls = 0;
  auto s3 = fresh();
  ASSERT_TRUE(s3.load(blob).ok());
  ASSERT_TRUE(s3.save([&](std::span<const std::byte> b) -> slm::status {
                    pieces.insert(pieces.end(), b.begin(), b.end());
                    ++calls;
                    return {};
                  }).ok());
  EXPECT_EQ(pieces, blob);
  EXPECT_GT(calls, 1u);
  // A writer's error stops the save and comes back.
  EXPECT_TRUE(slm_test::fails_with(
      s3.save([](std::span<const std::byte>) -> slm::status { return slm::make_error(slm::errc::io_error, "disk full"); }),
      slm::errc::io_error, {"disk full"}));
  // A fresh session saves and loads too.
  const bytes empty = save(fresh());
  auto s4 = fresh();
  feed(s4, 0, 3);
  ASSERT_TRUE(s4.load(empty).ok());
  EXPECT_EQ(s4.position(), 0u);
  auto s5 = fresh();
  EXPECT_TRUE(same_bits(feed(s4, 0, kP), feed(s5, 0, kP)));
  std::printf("[ figures  ] %s: state after %zu tokens: %zu bytes saved; fresh session: %zu bytes\n",
              GetParam().name().c_str(), kP + 2, blob.size(), empty.size());
}

// (c)
TEST_P(SessionState, RollbackThenSameTokensIsBitExact) {
  auto s = fresh();
  feed(s, 0, kP);
  const auto step_logits = feed_singly(s, kP, kP + kR);  // R single-token calls
  EXPECT_EQ(s.rollback_limit(), recurrent_ ? kR : kP + kR);
  for (std::size_t n = 1; n <= kR; ++n) {
    ASSERT_TRUE(s.can_rollback(n));
    ASSERT_TRUE(s.rollback(n).ok()) << "n " << n;
    EXPECT_EQ(s.position(), kP + kR - n);
    const auto again = feed_singly(s, kP + kR - n, kP + kR);
    ASSERT_EQ(again.size(), n * V_);
    EXPECT_EQ(0, std::memcmp(again.data(), step_logits.data() + (kR - n) * V_, n * V_ * sizeof(float))) << "n " << n;
  }
  // Verify-style: R tokens in one call, rolled back by n and re-fed in one call (other
  // GEMM shapes, so equal to rounding).
  double worst = 0, scale = max_abs(step_logits.data(), step_logits.size());
  for (std::size_t n = 1; n <= kR; ++n) {
    auto v = fresh();
    feed(v, 0, kP);
    const auto all = feed(v, kP, kP + kR);
    ASSERT_TRUE(v.rollback(n).ok());
    const auto again = feed(v, kP + kR - n, kP + kR);
    worst = std::max(worst, max_abs_diff(again.data(), all.data() + (kR - n) * V_, n * V_));
  }
  std::printf("[ figures  ] %s: verify call rolled back and re-fed in one call: max |diff| %.3g (%.3g x max|logit|)\n",
              GetParam().name().c_str(), worst, worst / scale);
  EXPECT_LE(worst, 1e-4 * scale);
}

TEST_P(SessionState, RollbackThenOtherTokensMatchesFreshSession) {
  // Draft d = ids[P, P+R), rolled back by n, then e = other tokens; against a fresh
  // session fed P, d[0, R-n), e with the same call shapes.
  for (std::size_t n = 1; n <= kR; ++n) {
    std::vector<std::int32_t> e(n);
    for (std::size_t i = 0; i < n; ++i) e[i] = ids_[kP + 2 * kR + i];
    auto s = fresh();
    feed(s, 0, kP);
    feed_singly(s, kP, kP + kR);
    ASSERT_TRUE(s.rollback(n).ok());
    std::vector<float> got;
    for (std::size_t i = 0; i < n; ++i) {
      const auto l = feed(s, std::span<const std::int32_t>(&e[i], 1));
      got.insert(got.end(), l.begin(), l.end());
    }
    auto f = fresh();
    feed(f, 0, kP);
    feed_singly(f, kP, kP + kR - n);
    std::vector<float> want;
    for (std::size_t i = 0; i < n; ++i) {
      const auto l = feed(f, std::span<const std::int32_t>(&e[i], 1));
      want.insert(want.end(), l.begin(), l.end());
    }
    EXPECT_TRUE(same_bits(got, want)) << "n " << n;
    EXPECT_EQ(s.position(), f.position());
  }
  // In one call each: the draft as one verify call, e as one call; the fresh session's
  // prefix in one call: within rounding.
  double worst = 0, scale = 0;
  for (std::size_t n = 1; n <= kR; ++n) {
    std::vector<std::int32_t> e(ids_.begin() + static_cast<std::ptrdiff_t>(kP + 2 * kR),
                                ids_.begin() + static_cast<std::ptrdiff_t>(kP + 2 * kR + n));
    auto s = fresh();
    feed(s, 0, kP);
    feed(s, kP, kP + kR);
    ASSERT_TRUE(s.rollback(n).ok());
    const auto got = feed(s, e);
    auto f = fresh();
    feed(f, 0, kP);
    if (kR - n) feed(f, kP, kP + kR - n);
    const auto want = feed(f, e);
    worst = std::max(worst, max_abs_diff(got.data(), want.data(), want.size()));
    scale = std::max(scale, max_abs(want.data(), want.size()));
  }
  std::printf("[ figures  ] %s: other tokens after a rolled-back verify call vs a fresh session: max |diff| %.3g "
              "(%.3g x max|logit|)\n", GetParam().name().c_str(), worst, worst / scale);
  EXPECT_LE(worst, 1e-4 * scale);
}

// (d)
TEST_P(SessionState, RollbackBeyondHistoryFailsCleanly) {
  auto s = fresh();
  feed(s, 0, kP);
  feed_singly(s, kP, kP + kR + 2);
  const std::size_t pos = kP + kR + 2;
  const bytes before = save(s);
  EXPECT_TRUE(slm_test::fails_with(s.rollback(pos + 1), slm::errc::out_of_range, {"rollback", "holds"}));
  EXPECT_FALSE(s.can_rollback(pos + 1));
  if (recurrent_) {
    EXPECT_EQ(s.rollback_limit(), kR);
    EXPECT_FALSE(s.can_rollback(kR + 1));
    EXPECT_TRUE(slm_test::fails_with(s.rollback(kR + 1), slm::errc::unsupported,
                                     {"rollback", "mamba2", "rollback_tokens = 4", "unchanged"}));
    EXPECT_TRUE(slm_test::fails_with(s.rollback(pos - 1), slm::errc::unsupported, {"rollback"}));
  } else {
    EXPECT_EQ(s.rollback_limit(), pos);
    EXPECT_TRUE(s.can_rollback(pos - 1));
  }
  EXPECT_EQ(s.position(), pos);
  EXPECT_EQ(save(s), before);
  auto ref = fresh();
  ASSERT_TRUE(ref.load(before).ok());
  EXPECT_TRUE(same_bits(continuation(s, pos), continuation(ref, pos)));

  // The whole last call can always be undone, even past the history, and so can all.
  auto u = fresh();
  feed(u, 0, kP);
  const auto long_call = feed(u, kP, kP + kR + 3);
  ASSERT_TRUE(u.can_rollback(kR + 3));
  if (recurrent_) {
    EXPECT_FALSE(u.can_rollback(kR + 2));
  }
  ASSERT_TRUE(u.rollback(kR + 3).ok());
  EXPECT_TRUE(same_bits(feed(u, kP, kP + kR + 3), long_call));
  ASSERT_TRUE(u.rollback(u.position()).ok());
  EXPECT_EQ(u.position(), 0u);
  auto f = fresh();
  EXPECT_TRUE(same_bits(feed(u, 0, kP), feed(f, 0, kP)));

  // rollback_tokens = 0: one level of undo only (the old behaviour).
  auto z = fresh(0);
  feed(z, 0, kP);
  feed_singly(z, kP, kP + 2);
  EXPECT_TRUE(z.can_rollback(1));
  if (recurrent_) {
    EXPECT_FALSE(z.can_rollback(2));
    EXPECT_TRUE(slm_test::fails_with(z.rollback(2), slm::errc::unsupported, {"rollback_tokens = 0"}));
  }
  EXPECT_EQ(z.position(), kP + 2);
}

// (e)
TEST_P(SessionState, DamagedBlobsAreRejectedAndChangeNothing) {
  auto src = fresh();
  feed(src, 0, 5);
  feed_singly(src, 5, 7);
  const bytes blob = save(src);
  ASSERT_GE(blob.size(), slm::state_format::header_bytes + slm::state_format::checksum_bytes);

  // The victim holds a state of its own.
  auto s = fresh();
  feed(s, 0, kP);
  feed_singly(s, kP, kP + 1);
  const bytes mine = save(s);
  const std::size_t pos = s.position();
  auto unchanged = [&](const char* what) {
    EXPECT_EQ(s.position(), pos) << what;
    EXPECT_EQ(save(s), mine) << what;
  };

  // Every truncation.
  for (std::size_t len = 0; len < blob.size(); ++len) {
    const slm::status st = s.load(std::span<const std::byte>(blob.data(), len));
    ASSERT_FALSE(st.ok()) << "length " << len;
    ASSERT_EQ(st.code(), slm::errc::format_error) << len << ": " << st.message();
    ASSERT_NE(st.message().find("truncated"), std::string::npos) << len << ": " << st.message();
    ASSERT_EQ(s.position(), pos);
  }
  unchanged("after the truncations");

  // Truncations made consistent (total size and checksum patched), so that the record
  // parsers see them: every length near the start, a stride through the rest.
  auto patch = [](bytes b) {
    const std::size_t n = b.size() + slm::state_format::checksum_bytes;
    for (int i = 0; i < 8; ++i) b[16 + static_cast<std::size_t>(i)] = static_cast<std::byte>((n >> (8 * i)) & 0xFF);
    const std::uint64_t sum = slm::state_format::checksum_of(b);
    for (int i = 0; i < 8; ++i) b.push_back(static_cast<std::byte>((sum >> (8 * i)) & 0xFF));
    return b;
  };
  const std::size_t body = blob.size() - slm::state_format::checksum_bytes;
  std::size_t tried = 0;
  for (std::size_t len = slm::state_format::header_bytes; len < body;
       len += len < slm::state_format::header_bytes + 400 ? 1 : 1 + body / 500) {
    const bytes cut = patch(bytes(blob.begin(), blob.begin() + static_cast<std::ptrdiff_t>(len)));
    const slm::status st = s.load(cut);
    ASSERT_FALSE(st.ok()) << "consistent truncation to " << len;
    ASSERT_EQ(st.code(), slm::errc::format_error) << len << ": " << st.message();
    ASSERT_EQ(s.position(), pos);
    ++tried;
  }
  unchanged("after the consistent truncations");
  EXPECT_GT(tried, 0u);
  // ... and padded.
  {
    bytes padded(blob.begin(), blob.end() - 8);
    padded.push_back(std::byte{0});
    EXPECT_TRUE(slm_test::fails_with(s.load(patch(padded)), slm::errc::format_error, {"after the last record"}));
  }

  // Corrupted fields.
  struct corruption {
    const char* what;
    std::size_t offset;
    std::uint8_t value;
    bool fix_checksum;
    slm::errc code;
    const char* says;
  };
  const bool bf16 = GetParam().kv == slm::kv_dtype::bf16;
  const corruption cases[] = {
      {"magic", 0, 'X', false, slm::errc::format_error, "magic"},
      {"version", 8, 2, false, slm::errc::unsupported, "version 2"},
      {"KV dtype out of range", 12, 9, false, slm::errc::format_error, "KV dtype 9"},
      {"the other KV dtype", 12, static_cast<std::uint8_t>(bf16 ? 0 : 1), false, slm::errc::invalid_argument,
       "KV caches"},
      {"session kind out of range", 13, 7, false, slm::errc::format_error, "session kind 7"},
      {"another session kind", 13, 1, false, slm::errc::invalid_argument, "saved by a NAM56R session"},
      {"reserved header byte", 14, 1, false, slm::errc::format_error, "reserved"},
      {"total size", 16, static_cast<std::uint8_t>(std::to_integer<unsigned>(blob[16]) ^ 1u), false,
       slm::errc::format_error, "the header says"},
      {"fingerprint", 24, static_cast<std::uint8_t>(std::to_integer<unsigned>(blob[24]) ^ 1u), false,
       slm::errc::invalid_argument, "another structure"},
      {"layer count", 32, static_cast<std::uint8_t>(std::to_integer<unsigned>(blob[32]) + 1u), false,
       slm::errc::invalid_argument, "layers"},
      {"position", 40, static_cast<std::uint8_t>(std::to_integer<unsigned>(blob[40]) + 1u), true,
       slm::errc::format_error, "the header says"},
      {"position beyond the limit", 47, 0x40, true, slm::errc::out_of_range, "limit"},
      {"a data byte", blob.size() - 9, static_cast<std::uint8_t>(std::to_integer<unsigned>(blob[blob.size() - 9]) ^ 4u),
       false, slm::errc::format_error, "checksum"},
      {"the checksum", blob.size() - 1, static_cast<std::uint8_t>(std::to_integer<unsigned>(blob.back()) ^ 1u), false,
       slm::errc::format_error, "checksum"},
      {"layer 0's kind tag", 48, 'q', true, slm::errc::format_error, "layer 0 holds a 'q"},
      {"layer 0's kind tag padding", 55, 'z', true, slm::errc::format_error, "kind tag"},
  };
  for (const corruption& c : cases) {
    bytes b = blob;
    b[c.offset] = static_cast<std::byte>(c.value);
    if (c.fix_checksum) b = patch(bytes(b.begin(), b.end() - 8));
    EXPECT_TRUE(slm_test::fails_with(s.load(b), c.code, {"session state", c.says})) << c.what;
  }
  // Layer 0's first count (cached positions or the number of recurrent states) and, for
  // a KV record, the first rows block's dtype and width.
  {
    bytes b = blob;
    b[56 + 7] = std::byte{0x7F};  // a huge count
    EXPECT_TRUE(slm_test::fails_with(s.load(patch(bytes(b.begin(), b.end() - 8))), slm::errc::format_error,
                                     {"session state", "layer 0"}));
    b = blob;
    b[56] = static_cast<std::byte>(std::to_integer<unsigned>(b[56]) + 1u);
    EXPECT_TRUE(slm_test::fails_with(s.load(patch(bytes(b.begin(), b.end() - 8))), slm::errc::format_error,
                                     {"session state", "layer 0"}));
  }
  const std::string kind0(reinterpret_cast<const char*>(blob.data() + 48));
  if (kind0 == "gqa") {
    bytes b = blob;
    b[64] = static_cast<std::byte>(bf16 ? 0 : 1);  // keys' dtype
    EXPECT_TRUE(slm_test::fails_with(s.load(patch(bytes(b.begin(), b.end() - 8))), slm::errc::format_error,
                                     {"layer 0 (gqa)", "keys are"}));
    b = blob;
    b[72] = static_cast<std::byte>(std::to_integer<unsigned>(b[72]) + 1u);  // keys' width
    EXPECT_TRUE(slm_test::fails_with(s.load(patch(bytes(b.begin(), b.end() - 8))), slm::errc::format_error,
                                     {"layer 0 (gqa)", "wide"}));
  }
  unchanged("after the corruptions");

  // Another model's blob, and a blob of the other KV dtype.
  {
    auto other = slm::model::load(slm_test::test_data(std::string("golden/hf/") +
                                                      (std::string(GetParam().model) == "llama" ? "qwen3" : "llama")));
    ASSERT_TRUE(other.ok());
    auto os = other->new_session(options());
    const std::int32_t t[3] = {1, 2, 3};
    std::vector<float> l(3 * other->vocab());
    ASSERT_TRUE(os.forward(t, 3, l.data(), cx_).ok());
    auto ob = os.save();
    ASSERT_TRUE(ob.ok());
    EXPECT_TRUE(slm_test::fails_with(s.load(*ob), slm::errc::invalid_argument, {"session state"}));
    slm::session_options o = options();
    o.kv = bf16 ? slm::kv_dtype::f32 : slm::kv_dtype::bf16;
    auto ks = model_->new_session(o);
    feed(ks, 0, 3);
    auto kb = ks.save();
    ASSERT_TRUE(kb.ok());
    EXPECT_TRUE(slm_test::fails_with(s.load(*kb), slm::errc::invalid_argument, {"KV caches", "session_options::kv"}));
    auto ksnap = ks.snapshot();
    ASSERT_TRUE(ksnap.ok());
    EXPECT_TRUE(slm_test::fails_with(s.restore(*ksnap), slm::errc::invalid_argument, {"restore", "KV caches"}));
    auto osnap = os.snapshot();
    ASSERT_TRUE(osnap.ok());
    // other is another model type: a snapshot of it is a snapshot of another decoder
    // type only when the compositions differ; slm::model is one type, so it compiles.
    EXPECT_TRUE(slm_test::fails_with(s.restore(*osnap), slm::errc::invalid_argument, {"restore", "another structure"}));
  }
  unchanged("after the foreign blobs");
  // And it still works.
  auto ref = fresh();
  ASSERT_TRUE(ref.load(mine).ok());
  EXPECT_TRUE(same_bits(continuation(s, pos), continuation(ref, pos)));
  // The good blob loads.
  ASSERT_TRUE(s.load(blob).ok());
  EXPECT_EQ(s.position(), 7u);
}

// save_state_file / load_state_file (io/session_file.hpp): the file holds exactly save()'s
// bytes, written through a unique temporary (never a symlink planted at path + ".tmp",
// issue 18) and renamed, readable by its owner only; a load continues bit for bit; errors
// name the path and leave the session unchanged.
TEST_P(SessionState, StateFileRoundTrip) {
  static_assert(slm::saveable_session<slm::model::session>);
  const std::filesystem::path dir = std::filesystem::current_path() / ("session_file_" + GetParam().name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::filesystem::path path = dir / "state.bin";
  auto s = fresh();
  feed(s, 0, kP);
  feed_singly(s, kP, kP + 2);
  const std::size_t pos = s.position();
  ASSERT_TRUE(slm_test::write_file(dir / "victim", "precious"));
  std::filesystem::create_symlink(dir / "victim", dir / "state.bin.tmp");
  ASSERT_TRUE(slm::save_state_file(s, path.string()).ok());
  EXPECT_EQ(std::filesystem::file_size(dir / "victim"), 8u);  // not written through the link
  EXPECT_EQ(slm_test::temporaries_in(dir), std::vector<std::string>{"state.bin.tmp"});
  std::filesystem::remove(dir / "state.bin.tmp");
  EXPECT_TRUE(std::filesystem::is_regular_file(std::filesystem::symlink_status(path)));
  EXPECT_EQ(std::filesystem::status(path).permissions() & (std::filesystem::perms::group_all | std::filesystem::perms::others_all),
            std::filesystem::perms::none);
  {
    auto f = slm::mapped_file::open(path);
    ASSERT_TRUE(f.ok());
    const auto b = save(s);
    EXPECT_TRUE(f->size() == b.size() && std::memcmp(f->bytes().data(), b.data(), b.size()) == 0);
  }
  auto r = fresh();
  ASSERT_TRUE(slm::load_state_file(r, path.string()).ok());
  EXPECT_EQ(r.position(), pos);
  EXPECT_TRUE(same_bits(continuation(r, pos), continuation(s, pos)));
  // Overwrite: the newer state replaces the file.
  ASSERT_TRUE(slm::save_state_file(s, path).ok());
  EXPECT_TRUE(slm_test::temporaries_in(dir).empty());
  auto r2 = fresh();
  ASSERT_TRUE(slm::load_state_file(r2, path).ok());
  EXPECT_EQ(r2.position(), pos + 5);
  // Errors name the path; the session is unchanged.
  const bytes mine = save(r);
  EXPECT_TRUE(slm_test::fails_with(slm::load_state_file(r, dir / "missing.bin"), slm::errc::not_found, {"missing.bin"}));
  {
    const bytes b = save(s);
    std::FILE* fp = std::fopen((dir / "cut.bin").string().c_str(), "wb");
    ASSERT_NE(fp, nullptr);
    ASSERT_EQ(std::fwrite(b.data(), 1, b.size() / 2, fp), b.size() / 2);
    std::fclose(fp);
  }
  EXPECT_TRUE(slm_test::fails_with(slm::load_state_file(r, dir / "cut.bin"), slm::errc::format_error,
                                   {"cut.bin", "session state", "truncated"}));
  EXPECT_TRUE(slm_test::fails_with(slm::load_state_file(r, dir), slm::errc::io_error, {"not a regular file"}));
  ASSERT_TRUE(slm_test::make_fifo(dir / "fifo.bin"));  // refused at once, not waited on (a thread with a limit)
  slm::status fifo;
  EXPECT_TRUE(slm_test::returns_within(std::chrono::seconds(10), {dir / "fifo.bin"},
                                       [&] { fifo = slm::load_state_file(r, dir / "fifo.bin"); }))
      << "blocked on a FIFO";
  EXPECT_TRUE(slm_test::fails_with(fifo, slm::errc::io_error, {"fifo.bin", "is not a regular file (a FIFO)"}));
  EXPECT_EQ(save(r), mine);
  EXPECT_TRUE(slm_test::fails_with(slm::save_state_file(s, dir / "no_such_dir" / "state.bin"), slm::errc::io_error,
                                   {"no_such_dir", "state.bin.tmp", "cannot create"}));
  EXPECT_FALSE(std::filesystem::exists(dir / "no_such_dir"));
  std::filesystem::remove_all(dir);
}

// rollback_tokens and the MLA mode belong to the receiving session.
TEST_P(SessionState, HistoryFitsTheReceivingSession) {
  auto s = fresh(kR);
  feed(s, 0, kP);
  feed_singly(s, kP, kP + kR);
  const bytes blob = save(s);
  auto small = fresh(1);
  ASSERT_TRUE(small.load(blob).ok());
  EXPECT_EQ(small.rollback_limit(), recurrent_ ? 2u : kP + kR);  // 3 slots: the newest 3 states
  auto big = fresh(2 * kR);
  auto snap = s.snapshot();
  ASSERT_TRUE(snap.ok());
  ASSERT_TRUE(big.restore(*snap).ok());
  EXPECT_EQ(big.rollback_limit(), recurrent_ ? kR : kP + kR);
  ASSERT_TRUE(big.rollback(kR).ok());
  ASSERT_TRUE(s.rollback(kR).ok());
  EXPECT_TRUE(same_bits(continuation(big, kP), continuation(s, kP)));
}

const state_case kCases[] = {
    {"llama", slm::kv_dtype::f32, slm::mla_mode::automatic},
    {"llama", slm::kv_dtype::bf16, slm::mla_mode::automatic},
    {"deepseek_v3", slm::kv_dtype::f32, slm::mla_mode::expanded},
    {"deepseek_v3", slm::kv_dtype::f32, slm::mla_mode::absorbed},
    {"deepseek_v3", slm::kv_dtype::bf16, slm::mla_mode::automatic},
    {"deepseek_v32", slm::kv_dtype::f32, slm::mla_mode::automatic},
    {"deepseek_v32", slm::kv_dtype::bf16, slm::mla_mode::automatic},
    {"mamba2", slm::kv_dtype::f32, slm::mla_mode::automatic},
    {"mamba2", slm::kv_dtype::bf16, slm::mla_mode::automatic},
    {"nemotron_h", slm::kv_dtype::f32, slm::mla_mode::automatic},
    {"nemotron_h", slm::kv_dtype::bf16, slm::mla_mode::automatic},
    {"granitemoehybrid", slm::kv_dtype::f32, slm::mla_mode::automatic},
    {"granitemoehybrid", slm::kv_dtype::bf16, slm::mla_mode::automatic},
};
INSTANTIATE_TEST_SUITE_P(session_state, SessionState, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<state_case>& i) { return i.param.name(); });

// A session saved in one MLA mode loads into the other (the mode is not state); the two
// forms agree to rounding.
TEST(session_state, MlaModeIsTheReceivingSessions) {
  auto m = slm::model::load(slm_test::test_data("golden/hf/deepseek_v3"));
  ASSERT_TRUE(m.ok());
  const auto ids = golden_ids("deepseek_v3");
  slm::compute_context cx{slm_test::the_pools().p2};
  slm::session_options e, a;
  e.mla = slm::mla_mode::expanded;
  a.mla = slm::mla_mode::absorbed;
  auto se = m->new_session(e);
  std::vector<float> l(kP * m->vocab()), le(m->vocab()), la(m->vocab());
  ASSERT_TRUE(se.forward(std::span(ids.data(), kP), kP, l.data(), cx).ok());
  auto blob = se.save();
  ASSERT_TRUE(blob.ok());
  auto sa = m->new_session(a);
  ASSERT_TRUE(sa.load(*blob).ok());
  ASSERT_TRUE(se.forward(std::span(ids.data() + kP, 1), 1, le.data(), cx).ok());
  ASSERT_TRUE(sa.forward(std::span(ids.data() + kP, 1), 1, la.data(), cx).ok());
  const double d = max_abs_diff(le.data(), la.data(), le.size()), mx = max_abs(le.data(), le.size());
  std::printf("[ figures  ] deepseek_v3 saved expanded, continued absorbed: max |diff| %.3g (%.3g x max|logit|)\n", d,
              d / mx);
  EXPECT_LE(d, 1e-4 * mx);
}

// The Mamba-2 history path (chunked up to the first recorded state, the recurrence after
// it) against the plain forward, on the mamba2 golden model.
TEST(session_state, Mamba2HistoryPathMatchesPlainForward) {
  auto m = slm::model::load(slm_test::test_data("golden/hf/mamba2"));
  ASSERT_TRUE(m.ok());
  const auto ids = golden_ids("mamba2");
  const std::size_t T = ids.size(), V = m->vocab();
  slm::compute_context cx{slm_test::the_pools().p2};
  std::vector<float> plain(T * V);
  auto s0 = m->new_session();
  ASSERT_TRUE(s0.forward(ids, T, plain.data(), cx).ok());
  const double scale = max_abs(plain.data(), plain.size());
  for (std::size_t R : {1u, 4u, 16u, 47u, 200u}) {
    slm::session_options o;
    o.rollback_tokens = R;
    auto s = m->new_session(o);
    std::vector<float> got(T * V);
    ASSERT_TRUE(s.forward(ids, T, got.data(), cx).ok());
    const double d = max_abs_diff(got.data(), plain.data(), got.size());
    std::printf("[ figures  ] mamba2 full forward with rollback_tokens %zu vs 0: max |diff| %.3g (%.3g x max|logit|)\n",
                R, d, d / scale);
    EXPECT_LE(d, 1e-4 * scale) << "R " << R;
    EXPECT_EQ(s.rollback_limit(), R + 1 >= T ? T : R);
  }

  // Layer level: the recorded states against the recurrence from zero (test_mamba2's
  // chunked-vs-sequential bound, 1e-5 relative), and a call of T <= R tokens, which is
  // the recurrence throughout, bit for bit.
  const auto& mixer = std::get<slm::mamba2_mixer>(m->layers()[0].mixer.impl);
  const std::size_t d = m->config().hidden, L = 40, R = 6;
  std::vector<float> x(L * d);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 0.5f;
  slm::workspace ws;
  slm::session_options o;
  o.rollback_tokens = R;
  slm::mamba2_mixer::cache c;
  ASSERT_TRUE(mixer.init_cache(c, o).ok());
  std::vector<float> y(L * d), yp(L * d);
  ASSERT_TRUE(mixer.forward(x.data(), L, y.data(), c, ws, cx).ok());
  slm::mamba2_state plain_state;
  ASSERT_TRUE(mixer.init_state(plain_state).ok());
  ASSERT_TRUE(mixer.forward(x.data(), L, yp.data(), plain_state, ws, cx).ok());
  auto rel = [](const float* a, const float* b, std::size_t n) {
    const double mb = max_abs(b, n);
    return mb > 0 ? max_abs_diff(a, b, n) / mb : max_abs_diff(a, b, n);
  };
  EXPECT_LE(rel(y.data(), yp.data(), L * d), 1e-5);
  EXPECT_EQ(c.rollback_limit(), R);
  for (std::size_t n = R; n >= 1; --n) {
    slm::mamba2_state ref;
    ASSERT_TRUE(mixer.init_state(ref).ok());
    std::vector<float> yr(L * d);
    ASSERT_TRUE(mixer.forward_reference(x.data(), L - n, yr.data(), ref, ws, cx).ok());
    slm::mamba2_mixer::cache h;
    ASSERT_TRUE(mixer.init_cache(h, o).ok());
    ASSERT_TRUE(h.copy_from(c).ok());
    ASSERT_TRUE(h.can_truncate(L - n));
    h.truncate(L - n);
    ASSERT_EQ(h.size(), L - n);
    EXPECT_LE(rel(h.state().ssm.data(), ref.ssm.data(), ref.ssm.size()), 1e-5) << "n " << n;
    EXPECT_EQ(0, std::memcmp(h.state().conv.data(), ref.conv.data(), ref.conv.size() * sizeof(float))) << "n " << n;
  }
  // T <= R: the recurrence (as forward_reference), bit for bit.
  slm::mamba2_mixer::cache c2;
  ASSERT_TRUE(mixer.init_cache(c2, o).ok());
  std::vector<float> y2(R * d), yr2(R * d);
  ASSERT_TRUE(mixer.forward(x.data(), R, y2.data(), c2, ws, cx).ok());
  slm::mamba2_state r2;
  ASSERT_TRUE(mixer.init_state(r2).ok());
  ASSERT_TRUE(mixer.forward_reference(x.data(), R, yr2.data(), r2, ws, cx).ok());
  EXPECT_TRUE(same_bits(y2, yr2));
  EXPECT_EQ(0, std::memcmp(c2.state().ssm.data(), r2.ssm.data(), r2.ssm.size() * sizeof(float)));
  // A forward after truncating past the history fails, naming the position.
  c2.truncate(0);
  ASSERT_TRUE(mixer.forward(x.data(), L, y.data(), c2, ws, cx).ok());
  EXPECT_FALSE(c2.can_truncate(L - R - 1));
  c2.truncate(L - R - 1);
  EXPECT_TRUE(c2.broken());
  EXPECT_TRUE(slm_test::fails_with(mixer.forward(x.data(), 1, y.data(), c2, ws, cx), slm::errc::unsupported,
                                   {"mamba2", "truncated to position", "rollback_tokens = 6"}));
}

// recurrent_cache on a toy state whose value is a hash of the tokens it consumed, so that
// any kept state can be checked against the position it claims.
struct toy_state {
  slm::floats v;
  std::size_t n = 0;
  void reset() noexcept {
    std::fill(v.data(), v.data() + v.size(), 0.0f);
    n = 0;
  }
  slm::status copy_from(const toy_state& o) {
    SLM_TRY(v.resize(o.v.size()));
    if (o.v.size()) std::memcpy(v.data(), o.v.data(), o.v.size() * sizeof(float));
    n = o.n;
    return {};
  }
  static constexpr std::string_view kind = "toy";
  template <class Self, class Fn>
  static void for_each_buffer(Self& s, Fn&& fn) {
    fn(s.v);
  }
};
static_assert(slm::serializable_state<toy_state>);
static_assert(slm::serializable_state<slm::mamba2_state>);

float toy_value(std::size_t n) {  // the state after tokens 1..n (token t has value t)
  float h = 0;
  for (std::size_t t = 1; t <= n; ++t) h = h * 0.5f + static_cast<float>(t);
  return h;
}
slm::status toy_forward(slm::recurrent_cache<toy_state>& c, std::size_t T, std::size_t* calls = nullptr) {
  const std::size_t p0 = c.size();
  return c.forward(T, [&](const toy_state& in, toy_state& out, std::size_t first, std::size_t count) -> slm::status {
    if (calls) ++*calls;
    EXPECT_EQ(in.n, p0 + first);
    float h = in.n == 0 ? 0.0f : in.v[0];
    for (std::size_t t = 0; t < count; ++t) h = h * 0.5f + static_cast<float>(p0 + first + t + 1);
    SLM_TRY(out.v.resize(1));
    out.v[0] = h;
    out.n = in.n + count;
    return {};
  });
}
slm::status toy_init(toy_state& s) { return s.v.resize(1); }

TEST(session_state, RecurrentCacheRingKeepsTheLastRStatesAndTheLastCallsStart) {
  for (std::size_t R : {0u, 1u, 3u, 8u}) {
    slm::recurrent_cache<toy_state> c;
    ASSERT_TRUE(c.init(R, toy_init).ok());
    EXPECT_EQ(c.size(), 0u);
    // Calls of varied lengths; after each, exactly positions [p - R, p] and the call's
    // start are restorable (and 0).
    std::size_t p = 0;
    for (std::size_t T : {5u, 1u, 1u, 2u, 7u, 1u, 3u, 1u, 1u, 1u, 12u, 2u}) {
      std::size_t calls = 0;
      ASSERT_TRUE(toy_forward(c, T, &calls).ok());
      const std::size_t p0 = p;
      p += T;
      EXPECT_EQ(calls, std::min(T, R + 1)) << "R " << R << " T " << T;
      ASSERT_EQ(c.size(), p);
      EXPECT_EQ(c.state().v[0], toy_value(p));
      auto expect = [&](std::size_t len) { return len == 0 || len + R >= p || len == p0; };
      for (std::size_t len = 0; len <= p; ++len)
        EXPECT_EQ(c.can_truncate(len), expect(len)) << "R " << R << " p " << p << " len " << len;
      std::size_t limit = 0;
      while (limit < p && expect(p - limit - 1)) ++limit;
      EXPECT_EQ(c.rollback_limit(), limit) << "R " << R << " T " << T;
    }
    // Truncate to each kept position (newest first) and check the state there.
    for (std::size_t len = p; len-- > (p > R ? p - R : 0);) {
      ASSERT_TRUE(c.can_truncate(len));
      c.truncate(len);
      ASSERT_EQ(c.size(), len);
      EXPECT_EQ(len == 0 ? 0.0f : c.state().v[0], toy_value(len));
      if (len == 0) break;
    }
    // Continuing after a truncation computes the right states again.
    ASSERT_TRUE(toy_forward(c, 4).ok());
    EXPECT_EQ(c.state().v[0], toy_value(c.size()));
  }
}

TEST(session_state, RecurrentCacheFailedCallChangesNothingAndBrokenCacheRefuses) {
  slm::recurrent_cache<toy_state> c;
  ASSERT_TRUE(c.init(3, toy_init).ok());
  ASSERT_TRUE(toy_forward(c, 6).ok());
  ASSERT_TRUE(toy_forward(c, 1).ok());
  const std::size_t limit = c.rollback_limit();
  EXPECT_EQ(limit, 3u);
  auto failing = [](std::size_t fail_at) {
    return [fail_at, seen = std::size_t{0}](const toy_state& in, toy_state& out, std::size_t, std::size_t count) mutable {
      if (++seen == fail_at) return slm::make_error(slm::errc::cancelled, "stop");
      out.n = in.n + count;
      return slm::status{};
    };
  };
  // A failing single-token call: it used the free slot, the history is intact.
  EXPECT_EQ(c.forward(1, failing(1)).code(), slm::errc::cancelled);
  EXPECT_EQ(c.size(), 7u);
  EXPECT_EQ(c.state().v[0], toy_value(7));
  EXPECT_EQ(c.rollback_limit(), limit);
  // A longer one failing in its second segment: the state is intact, the oldest history
  // states whose slots it took are gone (so rollback may refuse, never be wrong).
  EXPECT_EQ(c.forward(3, failing(2)).code(), slm::errc::cancelled);
  EXPECT_EQ(c.size(), 7u);
  EXPECT_EQ(c.state().v[0], toy_value(7));
  EXPECT_TRUE(c.can_truncate(6));
  for (std::size_t len = 1; len < 7; ++len)
    if (c.can_truncate(len)) {
      slm::recurrent_cache<toy_state> d;
      ASSERT_TRUE(d.init(3, toy_init).ok());
      ASSERT_TRUE(d.copy_from(c).ok());
      d.truncate(len);
      EXPECT_EQ(d.state().v[0], toy_value(len)) << len;
    }
  ASSERT_TRUE(toy_forward(c, 1).ok());
  EXPECT_EQ(c.state().v[0], toy_value(8));
  c.truncate(7);
  const std::size_t limit7 = c.rollback_limit();
  // begin without commit (a layer that failed in its own code), then the undo by the model.
  ASSERT_TRUE(c.begin(1).ok());
  c.truncate(7);
  EXPECT_EQ(c.size(), 7u);
  EXPECT_EQ(c.rollback_limit(), limit7);
  // Broken: past the history.
  EXPECT_FALSE(c.can_truncate(2));
  c.truncate(2);
  EXPECT_TRUE(c.broken());
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(c.rollback_limit(), 0u);
  EXPECT_TRUE(slm_test::fails_with(toy_forward(c, 1), slm::errc::unsupported, {"truncated to position 2"}));
  c.truncate(0);
  EXPECT_FALSE(c.broken());
  ASSERT_TRUE(toy_forward(c, 2).ok());
  EXPECT_EQ(c.state().v[0], toy_value(2));
  // Too much history asked for.
  slm::recurrent_cache<toy_state> big;
  EXPECT_TRUE(slm_test::fails_with(big.init(slm::recurrent_cache<toy_state>::max_rollback_tokens + 1, toy_init),
                                   slm::errc::out_of_range, {"rollback_tokens"}));
}

TEST(session_state, RecurrentCacheCopySaveLoadKeepTheHistory) {
  slm::recurrent_cache<toy_state> c;
  ASSERT_TRUE(c.init(4, toy_init).ok());
  for (std::size_t T : {3u, 1u, 1u, 1u, 1u, 1u}) ASSERT_TRUE(toy_forward(c, T).ok());
  ASSERT_EQ(c.size(), 8u);
  // Save, load into caches of other capacities.
  bytes blob;
  slm::state_writer w(
      [](void* ctx, std::span<const std::byte> b) -> slm::status {
        auto* v = static_cast<bytes*>(ctx);
        v->insert(v->end(), b.begin(), b.end());
        return {};
      },
      &blob, true);
  ASSERT_TRUE(c.save(w).ok());
  EXPECT_EQ(blob.size(), 8u + 5u * (8u + 8u + 8u + 4u));  // count, then 5 states (positions 4..8)
  for (std::size_t R : {0u, 2u, 4u, 9u}) {
    slm::recurrent_cache<toy_state> d;
    ASSERT_TRUE(d.init(R, toy_init).ok());
    slm::state_reader r(blob);
    ASSERT_TRUE(d.load(r).ok()) << "R " << R;
    EXPECT_EQ(r.remaining(), 0u);
    EXPECT_EQ(d.size(), 8u);
    EXPECT_EQ(d.rollback_limit(), std::min<std::size_t>(R + 1, 4));  // R + 2 slots hold positions 8 .. 8-R-1
    slm::recurrent_cache<toy_state> e;
    ASSERT_TRUE(e.init(R, toy_init).ok());
    ASSERT_TRUE(e.copy_from(c).ok());
    EXPECT_EQ(e.rollback_limit(), d.rollback_limit());
    for (std::size_t len = 8; len-- > 8 - d.rollback_limit();) {
      d.truncate(len);
      e.truncate(len);
      EXPECT_EQ(d.state().v[0], toy_value(len));
      EXPECT_EQ(e.state().v[0], toy_value(len));
    }
  }
  // Damaged records.
  auto reject = [](bytes b, const char* says) {
    slm::recurrent_cache<toy_state> d;
    EXPECT_TRUE(d.init(4, toy_init).ok());
    slm::state_reader r(b);
    EXPECT_TRUE(slm_test::fails_with(d.load(r), slm::errc::format_error, {says})) << says;
  };
  bytes b = blob;
  b[0] = std::byte{0};
  reject(b, "no state");
  b = blob;
  b[8 + 28] = std::byte{9};  // the second state's position above the first's
  reject(b, "newest first");
  b = blob;
  b[16] = std::byte{2};  // two buffers
  reject(b, "buffers");
  b = blob;
  b[24] = std::byte{2};  // buffer length 2
  reject(b, "holds 2 values");
  for (std::size_t len = 0; len < blob.size(); ++len) reject(bytes(blob.begin(), blob.begin() + static_cast<std::ptrdiff_t>(len)), "truncated");
}

}  // namespace

// Files saved by earlier code: a blob written by an earlier build (tests/data/session/)
// loads into today's session, saves again to the same bytes, and the session continues
// as the one that saved it. The continuation is compared within 1e-4 of the logits'
// range, not bit for bit: the fixture's caches were computed on the machine that wrote
// it, whose kernels (another ISA) may round differently; on the same machine the two
// agree exactly. The blob's size does not depend on the machine and must match.
TEST(session_state, FilesSavedByEarlierCodeStillLoad) {
  for (const char* name : {"deepseek_v32"}) {  // MLA latents, RoPE keys, DSA indexer keys
    SCOPED_TRACE(name);
    auto m = slm::model::load(slm_test::test_data(std::string("golden/hf/") + name));
    ASSERT_TRUE(m.ok()) << m.error().message();
    const auto ids = golden_ids(name);
    ASSERT_GE(ids.size(), 8u);
    const std::size_t V = m->vocab();
    slm::session_options o;
    o.rollback_tokens = 1;
    slm::compute_context cx{slm_test::the_pools().p2};
    auto s = m->new_session(o);
    std::vector<float> logits(3 * V), a(2 * V), b(2 * V);
    ASSERT_TRUE(s.forward(std::span(ids.data(), 3), 3, logits.data(), cx).ok());
    ASSERT_TRUE(s.forward(std::span(ids.data() + 3, 1), 1, logits.data(), cx).ok());
    auto f = m->new_session(o);
    ASSERT_TRUE(slm_test::loads_session_fixture(std::string("decoder_") + name, s, f));
    EXPECT_EQ(f.position(), 4u);
    ASSERT_TRUE(f.rollback(1).ok());  // the kept recurrent history came with the file
    ASSERT_TRUE(s.rollback(1).ok());
    ASSERT_TRUE(s.forward(std::span(ids.data() + 3, 2), 2, a.data(), cx).ok());
    ASSERT_TRUE(f.forward(std::span(ids.data() + 3, 2), 2, b.data(), cx).ok());
    EXPECT_TRUE(slm_test::within_range(a, b, 1e-4));
  }
}
