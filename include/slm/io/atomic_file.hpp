// slm/io/atomic_file.hpp - replacing a file whole: a unique temporary beside it, renamed over it.
//
// atomic_file::create(path) creates a new temporary file in path's directory, named
// PATH.tmp.<pid>.<n> (n from a process-wide counter and the clock), exclusively
// (O_CREAT | O_EXCL | O_NOFOLLOW): a file or a symlink already at that name is never opened,
// let alone followed, and no two writers ever share a temporary. commit() flushes it,
// fsyncs it and renames it over path; a failure anywhere, or destruction without commit(),
// removes the temporary. So a reader sees the old file or the whole new one; concurrent
// writers of one path each replace it whole (the last rename wins); nothing is left behind.
// The rename is not made durable (the directory is not fsynced): after a power loss the
// path may still name the old file, never a partial new one.
//
// unique_sibling(path) is the naming scheme alone, for a temporary directory (mkdir is
// exclusive by itself).
#pragma once
#include "slm/core/build_mode.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "slm/core/status.hpp"

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#define SLM_HAVE_POSIX_FILES 1
#else
#define SLM_HAVE_POSIX_FILES 0
#endif

namespace slm {

// path + ".tmp.<pid>.<n>": a name no other call of this process returns, and unlikely to be
// another process's (the caller still creates it exclusively).
std::filesystem::path unique_sibling(const std::filesystem::path& path);

class atomic_file {
 public:
  // mode: the new file's permission bits (before the umask), e.g. 0600 for private state.
  static result<atomic_file> create(const std::filesystem::path& path, unsigned mode = 0644);

  atomic_file() noexcept = default;
  atomic_file(atomic_file&& o) noexcept
      : fp_(std::exchange(o.fp_, nullptr)), path_(std::move(o.path_)), tmp_(std::move(o.tmp_)) {}
  atomic_file& operator=(atomic_file&& o) noexcept {
    if (this != &o) {
      abandon();
      fp_ = std::exchange(o.fp_, nullptr);
      path_ = std::move(o.path_);
      tmp_ = std::move(o.tmp_);
    }
    return *this;
  }
  atomic_file(const atomic_file&) = delete;
  atomic_file& operator=(const atomic_file&) = delete;
  ~atomic_file() { abandon(); }

  // On failure the temporary is removed and later calls fail.
  status write(std::span<const std::byte> bytes);
  status write(std::string_view text) { return write(std::as_bytes(std::span(text.data(), text.size()))); }
  // Flush, fsync, rename over path(). The temporary is gone afterwards, either way.
  status commit();
  // Closes and removes the temporary (nothing if already committed or abandoned).
  void abandon() noexcept;

  bool is_open() const noexcept { return fp_ != nullptr; }
  const std::filesystem::path& path() const noexcept { return path_; }
  const std::filesystem::path& temp_path() const noexcept { return tmp_; }

 private:
  std::FILE* fp_ = nullptr;
  std::filesystem::path path_, tmp_;
};

// `bytes` as the whole file `path`, through an atomic_file.
status write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> bytes, unsigned mode = 0644);

#if SLM_DEFINE_IO

SLM_INLINE std::filesystem::path unique_sibling(const std::filesystem::path& path) {
  static std::atomic<std::uint64_t> counter{0};
  const std::uint64_t n = counter.fetch_add(1, std::memory_order_relaxed);
  // The clock separates processes that share a pid (containers, NFS clients).
  const auto t = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#if SLM_HAVE_POSIX_FILES
  const long pid = static_cast<long>(::getpid());
#else
  const long pid = 0;
#endif
  std::filesystem::path p = path;
  p += cat(".tmp.", pid, ".", n, ".", t % 1000000007u);
  return p;
}

SLM_INLINE result<atomic_file> atomic_file::create(const std::filesystem::path& path, unsigned mode) {
  atomic_file f;
  f.path_ = path;
  int err = EEXIST;
  // A name taken (by a stale temporary, a planted symlink, another writer) is never reused:
  // try the next one, a bounded number of times.
  for (int attempt = 0; attempt < 16 && err == EEXIST; ++attempt) {
    f.tmp_ = unique_sibling(path);
#if SLM_HAVE_POSIX_FILES
    const int fd = ::open(f.tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, static_cast<mode_t>(mode));
    if (fd < 0) {
      err = errno;
      continue;
    }
    f.fp_ = ::fdopen(fd, "wb");
    if (!f.fp_) {
      err = errno;
      ::close(fd);
      std::error_code ec;
      std::filesystem::remove(f.tmp_, ec);
      break;
    }
#else
    (void)mode;
    f.fp_ = std::fopen(f.tmp_.string().c_str(), "wbx");  // C11 exclusive mode
    if (!f.fp_) {
      err = errno;
      continue;
    }
#endif
    return f;
  }
  return make_error(errc::io_error, f.tmp_.string(), ": cannot create: ", std::strerror(err));
}

SLM_INLINE status atomic_file::write(std::span<const std::byte> bytes) {
  if (!fp_) return make_error(errc::io_error, path_.string(), ": the temporary file is closed");
  if (bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(), fp_) == bytes.size()) return {};
  const int err = errno;
  abandon();
  return make_error(errc::io_error, tmp_.string(), ": write failed: ", std::strerror(err));
}

SLM_INLINE status atomic_file::commit() {
  if (!fp_) return make_error(errc::io_error, path_.string(), ": the temporary file is closed");
  bool good = std::fflush(fp_) == 0;
#if SLM_HAVE_POSIX_FILES
  good = good && ::fsync(::fileno(fp_)) == 0;  // the bytes on disk before the name points at them
#endif
  int err = good ? 0 : errno;
  if (std::fclose(std::exchange(fp_, nullptr)) != 0 && good) good = false, err = errno;
  std::error_code ec;
  if (!good) {
    std::filesystem::remove(tmp_, ec);
    return make_error(errc::io_error, tmp_.string(), ": write failed: ", std::strerror(err));
  }
  std::filesystem::rename(tmp_, path_, ec);
  if (ec) {
    const std::string why = ec.message();
    std::filesystem::remove(tmp_, ec);
    return make_error(errc::io_error, path_.string(), ": cannot rename the temporary file into place: ", why);
  }
  return {};
}

SLM_INLINE void atomic_file::abandon() noexcept {
  if (!fp_) return;
  std::fclose(std::exchange(fp_, nullptr));
  std::error_code ec;
  std::filesystem::remove(tmp_, ec);
}

SLM_INLINE status write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> bytes, unsigned mode) {
  auto f = atomic_file::create(path, mode);
  if (!f.ok()) return std::move(f).take_error();
  SLM_TRY(f->write(bytes));
  return f->commit();
}

#endif  // SLM_DEFINE_IO

}  // namespace slm
