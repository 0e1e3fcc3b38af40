// slm/session_file.hpp - a session's saved state in a file.
//
// Any session with save(write) / saved_size() / load(bytes) (the decoder's, model.hpp;
// NAM56R's, nam56r.hpp; nanochat's, nanochat.hpp) is a saveable_session, and
//   save_state_file(session, path)   streams session.save() into path + ".tmp", then
//                                    renames it over path: a reader never sees a partial
//                                    file, and a failed save leaves any previous file;
//   load_state_file(session, path)   reads the file and calls session.load() on its bytes,
//                                    so every check of load() applies and on any error
//                                    the session is unchanged.
// Errors name the path (io_error for the file system, load()'s codes for the contents).
// The rename makes the replacement atomic, not durable: the standard library has no
// fsync, so after a power loss the file may be the old one or (on some file systems)
// empty; load refuses an empty or partial file.
#pragma once
#include "slm/build_mode.hpp"

#include <cerrno>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <system_error>

#include "slm/mapped_file.hpp"
#include "slm/status.hpp"

namespace slm {

namespace detail {
struct state_sink {  // the writer a saveable_session's save() must accept
  status operator()(std::span<const std::byte>) const { return {}; }
};
}  // namespace detail

template <class S>
concept saveable_session = requires(const S& cs, S& s, detail::state_sink sink, std::span<const std::byte> b) {
  { cs.save(sink) } -> std::same_as<status>;
  { cs.saved_size() } -> std::same_as<result<std::uint64_t>>;
  { s.load(b) } -> std::same_as<status>;
};

template <saveable_session Session>
status save_state_file(const Session& session, const std::filesystem::path& path) {
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  std::FILE* fp = std::fopen(tmp.string().c_str(), "wb");
  if (!fp) return make_error(errc::io_error, tmp.string(), ": cannot create: ", std::strerror(errno));
  status st = session.save([&](std::span<const std::byte> b) -> status {
    if (std::fwrite(b.data(), 1, b.size(), fp) == b.size()) return {};
    return make_error(errc::io_error, tmp.string(), ": write failed: ", std::strerror(errno));
  });
  const bool closed = std::fclose(fp) == 0;
  if (st.ok() && !closed) st = make_error(errc::io_error, tmp.string(), ": close failed: ", std::strerror(errno));
  std::error_code ec;
  if (!st.ok()) {
    std::filesystem::remove(tmp, ec);
    return std::move(st).with_context(cat("saving the session state to ", path.string()));
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    std::filesystem::remove(tmp, ec);
    return make_error(errc::io_error, path.string(), ": cannot rename the temporary file into place: ", why);
  }
  return {};
}

template <saveable_session Session>
status load_state_file(Session& session, const std::filesystem::path& path) {
  auto f = mapped_file::open(path);
  if (!f.ok()) return std::move(f).take_error();
  if (status st = session.load(f->bytes()); !st.ok()) return std::move(st).with_context(path.string());
  return {};
}

}  // namespace slm
