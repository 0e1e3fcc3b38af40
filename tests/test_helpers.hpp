// Small helpers shared by slm's tests.
#pragma once

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <list>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "slm/core/parallel.hpp"
#include "slm/io/safetensors.hpp"
#include "slm/core/status.hpp"

namespace slm_test {

// The error's message contains every one of `parts`, and the code is `code`.
template <class R>
::testing::AssertionResult fails_with(const R& r, slm::errc code, std::initializer_list<std::string_view> parts) {
  if (r.ok()) return ::testing::AssertionFailure() << "expected an error, got success";
  const slm::status& s = [&]() -> const slm::status& {
    if constexpr (std::is_same_v<R, slm::status>) return r;
    else return r.error();
  }();
  if (s.code() != code)
    return ::testing::AssertionFailure() << "expected code '" << slm::to_string(code) << "', got '"
                                         << slm::to_string(s.code()) << "': " << s.message();
  for (std::string_view p : parts)
    if (s.message().find(p) == std::string::npos)
      return ::testing::AssertionFailure() << "message lacks \"" << p << "\": " << s.message();
  return ::testing::AssertionSuccess();
}

// max |got - ref| / max |ref| over n values (max |got - ref| when ref is all zero): the
// relative error the golden tests state their tolerances in.
inline double rel_err(const float* got, const float* ref, std::size_t n) {
  double e = 0, m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    e = std::max(e, static_cast<double>(std::fabs(got[i] - ref[i])));
    m = std::max(m, static_cast<double>(std::fabs(ref[i])));
  }
  return m > 0 ? e / m : e;
}
inline double max_abs_diff(const float* a, const float* b, std::size_t n) {
  double e = 0;
  for (std::size_t i = 0; i < n; ++i) e = std::max(e, static_cast<double>(std::fabs(a[i] - b[i])));
  return e;
}

inline std::vector<std::byte> bytes_of(std::string_view s) {
  std::vector<std::byte> b(s.size());
  if (!s.empty()) std::memcpy(b.data(), s.data(), s.size());
  return b;
}

// A raw safetensors file: length prefix + header text + data bytes.
inline std::vector<std::byte> raw_safetensors(std::string_view header, std::size_t data_bytes,
                                              std::uint64_t length_override = ~0ull) {
  const std::uint64_t n = length_override == ~0ull ? header.size() : length_override;
  std::vector<std::byte> f(8 + header.size() + data_bytes, std::byte{0});
  for (int i = 0; i < 8; ++i) f[static_cast<std::size_t>(i)] = static_cast<std::byte>((n >> (8 * i)) & 0xFF);
  std::memcpy(f.data() + 8, header.data(), header.size());
  for (std::size_t i = 0; i < data_bytes; ++i) f[8 + header.size() + i] = static_cast<std::byte>(i * 7 + 1);
  return f;
}

// A scratch directory, removed when the test ends.
class temp_dir {
 public:
  explicit temp_dir(std::string_view name) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    // Parameterized tests are named "Prefix/Suite.Test/Param": one directory, not a tree
    // whose parents would outlive the test.
    std::string leaf = std::string("slm_test_") + info->test_suite_name() + "_" + info->name() + "_" + std::string(name);
    std::replace(leaf.begin(), leaf.end(), '/', '_');
    path_ = std::filesystem::temp_directory_path() / leaf;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    std::filesystem::create_directories(path_, ec);
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(std::string_view f) const { return path_ / f; }

 private:
  std::filesystem::path path_;
};

inline bool write_file(const std::filesystem::path& p, const void* data, std::size_t n) {
  std::FILE* f = std::fopen(p.string().c_str(), "wb");
  if (!f) return false;
  const bool ok = (n == 0 || std::fwrite(data, 1, n, f) == n);
  return std::fclose(f) == 0 && ok;
}
inline bool write_file(const std::filesystem::path& p, std::string_view s) { return write_file(p, s.data(), s.size()); }
inline bool write_file(const std::filesystem::path& p, const std::vector<std::byte>& b) {
  return write_file(p, b.data(), b.size());
}

// A session state blob saved by an earlier build of slm, tests/data/session/<name>.bin: the
// session code of today must load it and save the same bytes again (the format is a
// contract with the files hosts keep). `current` is what today's code saves in the same
// situation; with SLM_WRITE_SESSION_FIXTURES=1 in the environment it is written as the
// fixture first (only for a deliberate format change, which also bumps
// state_format::version). Returns the fixture's bytes, empty when it cannot be read.
inline std::vector<std::byte> session_fixture(const std::string& name, const std::vector<std::byte>& current) {
  const std::filesystem::path p = std::filesystem::path(SLM_TEST_DATA_DIR) / "session" / (name + ".bin");
  if (const char* w = std::getenv("SLM_WRITE_SESSION_FIXTURES"); w && std::string_view(w) == "1") {
    std::filesystem::create_directories(p.parent_path());
    EXPECT_TRUE(write_file(p, current)) << p;
  }
  std::vector<std::byte> out;
  std::FILE* f = std::fopen(p.string().c_str(), "rb");
  EXPECT_NE(f, nullptr) << "missing fixture " << p;
  if (!f) return out;
  std::byte buf[1 << 14];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.insert(out.end(), buf, buf + n);
  std::fclose(f);
  return out;
}

// The check of a pinned session file: `s`, a session that has run, saves; the fixture
// `name` (session_fixture) has the same size, loads into `f` (a fresh session of the same
// model and options), and `f` saves it back to the same bytes.
template <class Session>
::testing::AssertionResult loads_session_fixture(const std::string& name, const Session& s, Session& f) {
  auto saved = s.save();
  if (!saved.ok()) return ::testing::AssertionFailure() << "save: " << saved.error().message();
  const std::vector<std::byte> fixture = session_fixture(name, *saved);
  if (fixture.size() != saved->size())
    return ::testing::AssertionFailure() << name << ": the fixture is " << fixture.size() << " bytes, today's save "
                                         << saved->size();
  if (const slm::status st = f.load(fixture); !st.ok())
    return ::testing::AssertionFailure() << name << ": load: " << st.message();
  auto again = f.save();
  if (!again.ok() || *again != fixture)
    return ::testing::AssertionFailure() << name << ": saving the loaded fixture gives other bytes";
  return ::testing::AssertionSuccess();
}

// max |a - b| <= rel * max(1, max |a|): two continuations agree within `rel` of the logits' range.
inline ::testing::AssertionResult within_range(const std::vector<float>& a, const std::vector<float>& b, double rel) {
  double range = 1.0;
  for (float v : a) range = std::max(range, static_cast<double>(std::fabs(v)));
  const double diff = max_abs_diff(a.data(), b.data(), a.size());
  if (a.size() == b.size() && diff <= rel * range) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "max |a - b| = " << diff << " exceeds " << rel << " x " << range;
}

// The names in `dir` that hold ".tmp" (what an interrupted or failed atomic write of slm
// would leave behind: PATH.tmp.<pid>.<n> files, OUT.tmp.<pid>.<n> directories), sorted.
inline std::vector<std::string> temporaries_in(const std::filesystem::path& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp") != std::string::npos) found.push_back(name);
  }
  std::sort(found.begin(), found.end());
  return found;
}

// Rewrites the safetensors file `path` in place: without the tensors named in `drop`,
// with the tensor `as_i32` (if any) stored as I32 (its values rounded), and with one F32
// tensor [4] of zeros added for each name in `add`. False on any error.
inline bool rewrite_safetensors(const std::filesystem::path& path, const std::set<std::string>& drop,
                                const std::string& as_i32 = {}, const std::vector<std::string>& add = {}) {
  std::vector<std::byte> out;
  {
    auto f = slm::safetensors::file::open(path);
    if (!f.ok()) return false;
    slm::safetensors::writer w;
    std::list<std::vector<std::byte>> keep;  // the writer holds views until serialize()
    bool ok = true;
    for (const auto& t : f->tensors()) {
      if (drop.count(t.name)) continue;
      const slm::tensor_view v = f->view(t);
      if (t.name != as_i32) {
        ok = ok && w.add(t.name, v).ok();
        continue;
      }
      std::vector<float> x(static_cast<std::size_t>(v.numel()));
      ok = ok && v.to_f32(x).ok();
      auto& b = keep.emplace_back(x.size() * 4);
      for (std::size_t i = 0; i < x.size(); ++i) {
        const auto n = static_cast<std::int32_t>(std::lround(x[i]));
        std::memcpy(b.data() + 4 * i, &n, 4);
      }
      ok = ok && w.add(t.name, slm::dtype::i32, t.shape, b).ok();
    }
    const std::vector<std::byte>& zeros = keep.emplace_back(16);
    for (const auto& name : add) ok = ok && w.add(name, slm::dtype::f32, slm::shape{4}, zeros).ok();
    auto bytes = w.serialize();
    if (!ok || !bytes.ok()) return false;
    out = std::move(*bytes);
  }
  return write_file(path, out);
}

// A FIFO at p (true on success).
inline bool make_fifo(const std::filesystem::path& p) { return ::mkfifo(p.c_str(), 0600) == 0; }

// Runs fn() on a thread and says whether it returned within `limit`. A call that blocks
// opening one of `fifos` for reading (the defect this guards against) is released after
// the limit by opening them for writing and closing them again, so the thread is always
// joined and a failing test still ends.
template <class Fn>
bool returns_within(std::chrono::milliseconds limit, const std::vector<std::filesystem::path>& fifos, Fn&& fn) {
  std::atomic<bool> done{false};
  std::thread t([&] {
    fn();
    done = true;
  });
  const auto t0 = std::chrono::steady_clock::now();
  while (!done && std::chrono::steady_clock::now() - t0 < limit) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const bool in_time = done;
  while (!done) {  // release a reader blocked in open(): a writer appears and leaves
    for (const auto& f : fifos) {
      const int fd = ::open(f.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  t.join();
  return in_time;
}

// Pools of 2 and 3 threads shared by a test binary (3 on a 2-core machine checks that
// results do not depend on the thread count, oversubscribed or not).
struct pools {
  slm::thread_pool p2, p3;
  pools() {
    auto a = slm::thread_pool::create(2);
    auto b = slm::thread_pool::create(3);
    if (a.ok()) p2 = std::move(*a);
    if (b.ok()) p3 = std::move(*b);
  }
};
inline pools& the_pools() {
  static pools p;
  return p;
}

inline std::filesystem::path test_data(std::string_view rel) { return std::filesystem::path(SLM_TEST_DATA_DIR) / rel; }

// A byte-level tokenizer.json for the 320-row heads of the golden models: ids 0..255 are
// the bytes, 256 "<eos>" (special), 257..264 a few merges ("in", "th", ...), 297..299
// the FIM tokens; ids 265..296 are gaps and 300..319 padding rows.
inline std::string byte_tokenizer_json() {
  std::string vocab, merges;
  char32_t next = 256;
  for (unsigned b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    std::string s;
    const char32_t c = printable ? static_cast<char32_t>(b) : next++;
    if (c < 0x80) s.push_back(static_cast<char>(c));
    else s += {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
    std::string esc;
    for (char ch : s) {
      if (ch == '"' || ch == '\\') esc.push_back('\\');
      esc.push_back(ch);
    }
    vocab += slm::cat(b ? "," : "", "\"", esc, "\":", b);
  }
  const char* pairs[][2] = {{"i", "n"}, {"t", "h"}, {"e", "r"}, {"o", "n"}, {"a", "n"}, {"r", "e"}, {"s", "t"}, {"e", "n"}};
  int id = 257;
  for (const auto& p : pairs) {
    vocab += slm::cat(",\"", p[0], p[1], "\":", id++);
    merges += slm::cat(merges.empty() ? "" : ",", "\"", p[0], " ", p[1], "\"");
  }
  return slm::cat(R"({"model": {"type": "BPE", "vocab": {)", vocab, "}, \"merges\": [", merges,
                  R"(]}, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
      "decoder": {"type": "ByteLevel"},
      "added_tokens": [{"id": 256, "content": "<eos>", "special": true},
        {"id": 297, "content": "<|fim_prefix|>", "special": true}, {"id": 298, "content": "<|fim_middle|>", "special": true},
        {"id": 299, "content": "<|fim_suffix|>", "special": true}]})");
}

// An executor that runs tasks serially and fires a cancellation at its n-th run() call:
// a cancel arriving from another thread in the middle of a forward, made reproducible.
struct cancelling_executor {
  slm::cancellation* cancel;
  std::size_t fire_at;
  mutable std::size_t calls = 0;
  std::size_t concurrency() const noexcept { return 2; }
  void run(std::size_t n, slm::task_ref fn) const noexcept {
    if (++calls == fire_at) cancel->cancel();
    for (std::size_t i = 0; i < n; ++i) fn(i);
  }
};

// The golden Llama copied to a scratch directory, whose weight file a test may change.
struct llama_copy {
  temp_dir dir{"llama"};
  llama_copy() {
    for (const char* f : {"config.json", "model.safetensors"})
      std::filesystem::copy_file(test_data("golden/hf/llama") / f, dir / f);
  }
  std::filesystem::path weights() const { return dir / "model.safetensors"; }
};

}  // namespace slm_test
