// slm/io/session_file.hpp - a session's saved state in a file.
//
// Any session with save(write) / saved_size() / load(bytes) (the decoder's, models/hf/model.hpp;
// NAM56R's, models/nam56r/model.hpp; nanochat's, models/nanochat/model.hpp) is a saveable_session, and
//   save_state_file(session, path)   streams session.save() into a new, private (0600)
//                                    temporary beside path (io/atomic_file.hpp), then
//                                    renames it over path: a reader never sees a partial
//                                    file, and a failed save leaves any previous file;
//   load_state_file(session, path)   reads the file and calls session.load() on its bytes,
//                                    so every check of load() applies and on any error
//                                    the session is unchanged.
// Errors name the path (io_error for the file system, load()'s codes for the contents).
// The temporary is fsynced before the rename; the rename itself is not made durable, so
// after a power loss the file may be the old one. load refuses an empty or partial file.
#pragma once
#include "slm/core/build_mode.hpp"

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <utility>

#include "slm/io/atomic_file.hpp"
#include "slm/io/mapped_file.hpp"
#include "slm/core/status.hpp"

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
  auto file = atomic_file::create(path, 0600);  // a session's history is the user's text
  if (!file.ok()) return std::move(file).take_error().with_context(cat("saving the session state to ", path.string()));
  status st = session.save([&](std::span<const std::byte> b) { return file->write(b); });
  if (st.ok()) st = file->commit();
  if (!st.ok()) return std::move(st).with_context(cat("saving the session state to ", path.string()));
  return {};  // on any error the temporary is gone: atomic_file removes it
}

template <saveable_session Session>
status load_state_file(Session& session, const std::filesystem::path& path) {
  auto f = mapped_file::open(path);
  if (!f.ok()) return std::move(f).take_error();
  if (status st = session.load(f->bytes()); !st.ok()) return std::move(st).with_context(path.string());
  return {};
}

}  // namespace slm
