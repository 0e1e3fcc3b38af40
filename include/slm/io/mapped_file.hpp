// slm/io/mapped_file.hpp - a read-only file's bytes in memory: read or mapped.
//
// Two ways in (load_mode):
// - read (the default): the file is read() into private, aligned memory. It costs RAM equal
//   to the file and one pass over it at open, and nothing done to the file afterwards can
//   reach the process: a truncated, overwritten or deleted file leaves the bytes as read.
// - map: the file is mapped. The OS pages it in on first touch and shares the pages
//   between processes, and nothing is copied. But the mapping *is* the file: if another
//   process truncates it, a later touch of a page past the new end kills this process
//   with SIGBUS, and rewriting it in place changes the bytes under every reader. Replacing
//   the file by rename (a new inode) is safe: the mapping keeps the old file. A host that
//   maps checks check_unchanged() where it can refuse cleanly (model sessions do).
// Either way open() first checks that the path is a regular file, opening it
// non-blocking, so a FIFO or a device is refused instead of blocking in open() forever.
// On platforms without mmap both modes read. A mapped_file is immutable after open() and
// may be shared across threads.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "slm/core/status.hpp"
#include "slm/core/tensor.hpp"

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#define SLM_HAVE_MMAP 1
#else
#define SLM_HAVE_MMAP 0
#endif

namespace slm {

// How a file's bytes come into memory (see the top of this file).
enum class load_mode : std::uint8_t { read, map };

constexpr std::string_view to_string(load_mode m) noexcept { return m == load_mode::map ? "map" : "read"; }

// Called as a file is read (load_mode::read) with the bytes just read; chunks of at most
// mapped_file::read_chunk bytes.
using read_progress = std::function<void(std::size_t bytes)>;

// What identifies a file's contents without reading them: which file (device, inode) and
// its size and modification time, as stat() reports them.
struct file_identity {
  std::uint64_t device = 0, inode = 0, size = 0;
  std::int64_t mtime_sec = 0, mtime_nsec = 0;
  friend bool operator==(const file_identity&, const file_identity&) = default;
};

class mapped_file {
 public:
  static constexpr std::size_t read_chunk = std::size_t{8} << 20;

  mapped_file() noexcept = default;
  mapped_file(mapped_file&& o) noexcept
      : path_(std::move(o.path_)), data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)), buffer_(std::move(o.buffer_)), mode_(o.mode_), id_(o.id_) {}
  mapped_file& operator=(mapped_file&& o) noexcept {
    if (this != &o) {
      unmap();
      path_ = std::move(o.path_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      buffer_ = std::move(o.buffer_);
      mode_ = o.mode_;
      id_ = o.id_;
    }
    return *this;
  }
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  ~mapped_file() { unmap(); }

  // A regular file only (a FIFO, a device or a directory is an io_error, without blocking).
  static result<mapped_file> open(const std::filesystem::path& path, load_mode how = load_mode::read,
                                  const read_progress& progress = {});

  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  std::size_t size() const noexcept { return size_; }
  const std::string& path() const noexcept { return path_; }
  // How the bytes came in: map only where the file is really mapped.
  load_mode mode() const noexcept { return mode_; }
  // The file as it was at open().
  const file_identity& identity() const noexcept { return id_; }

  // For a mapped file: an error (io_error) when the path no longer names the file as it
  // was mapped - another inode, another size or another modification time: rewritten or
  // truncated in place (the mapped bytes changed or will fault) or replaced. Always ok for
  // a read file, whose bytes are private.
  status check_unchanged() const;

 private:
  void unmap() noexcept {
#if SLM_HAVE_MMAP
    if (data_ && mode_ == load_mode::map) ::munmap(const_cast<std::byte*>(data_), size_);
#endif
    data_ = nullptr;
    size_ = 0;
  }

  std::string path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  aligned_buffer buffer_;  // the bytes of a read file
  load_mode mode_ = load_mode::read;
  file_identity id_;
};

// Whole-file read into a string (small text files: config.json, tokenizer.json), refused
// before reading when it is over max_bytes or not a regular file.
result<std::string> read_text_file(const std::filesystem::path& path, std::size_t max_bytes = 256u << 20);
// The first max_bytes bytes of a regular file (all of a shorter one).
result<std::string> read_file_prefix(const std::filesystem::path& path, std::size_t max_bytes);

namespace detail {

// An open file for reading, closed on destruction.
struct input_file {
#if SLM_HAVE_MMAP
  int fd = -1;
  input_file() = default;
  input_file(input_file&& o) noexcept : fd(std::exchange(o.fd, -1)), id(o.id) {}
  input_file& operator=(input_file&&) = delete;
  ~input_file() {
    if (fd >= 0) ::close(fd);
  }
#else
  std::FILE* fp = nullptr;
  input_file() = default;
  input_file(input_file&& o) noexcept : fp(std::exchange(o.fp, nullptr)), id(o.id) {}
  input_file& operator=(input_file&&) = delete;
  ~input_file() {
    if (fp) std::fclose(fp);
  }
#endif
  file_identity id;
};

// The one way slm opens a file to read: non-blocking (a FIFO's open() would wait for a
// writer forever), then its type checked on the open file itself, so nothing can swap the
// path between the check and the read.
result<input_file> open_input(const std::filesystem::path& path);

// Reads exactly out.size() bytes from the start of f (EINTR retried); a file that ends
// early or changed while being read is an error.
status read_all(const std::filesystem::path& path, input_file& f, std::span<std::byte> out,
                const read_progress& progress);

}  // namespace detail

#if SLM_DEFINE_IO

namespace detail {

SLM_INLINE status open_error(const std::filesystem::path& path, int e) {
  return make_error(e == ENOENT ? errc::not_found : errc::io_error, path.string(), ": cannot open: ", std::strerror(e));
}

#if SLM_HAVE_MMAP
SLM_INLINE std::string_view file_type_name(mode_t m) noexcept {
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a plain file";
}

SLM_INLINE file_identity identity_of(const struct stat& st) noexcept {
  file_identity id;
  id.device = static_cast<std::uint64_t>(st.st_dev);
  id.inode = static_cast<std::uint64_t>(st.st_ino);
  id.size = static_cast<std::uint64_t>(st.st_size);
#if defined(__APPLE__)
  id.mtime_sec = static_cast<std::int64_t>(st.st_mtimespec.tv_sec);
  id.mtime_nsec = static_cast<std::int64_t>(st.st_mtimespec.tv_nsec);
#else
  id.mtime_sec = static_cast<std::int64_t>(st.st_mtim.tv_sec);
  id.mtime_nsec = static_cast<std::int64_t>(st.st_mtim.tv_nsec);
#endif
  return id;
}
#endif

SLM_INLINE result<input_file> open_input(const std::filesystem::path& path) {
  input_file f;
#if SLM_HAVE_MMAP
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (f.fd < 0) return open_error(path, errno);
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) return open_error(path, errno);
  if (!S_ISREG(st.st_mode))
    return make_error(errc::io_error, path.string(), ": is not a regular file (", file_type_name(st.st_mode), ")");
  f.id = identity_of(st);
#else
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec) return open_error(path, ec.value());
  if (!std::filesystem::is_regular_file(st)) return make_error(errc::io_error, path.string(), ": is not a regular file");
  f.fp = std::fopen(path.string().c_str(), "rb");
  if (!f.fp) return open_error(path, errno);
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return make_error(errc::io_error, path.string(), ": cannot determine the file size");
  f.id.size = static_cast<std::uint64_t>(size);
#endif
  return f;
}

SLM_INLINE status read_all(const std::filesystem::path& path, input_file& f, std::span<std::byte> out,
                           const read_progress& progress) {
  std::size_t done = 0;
  while (done < out.size()) {
    const std::size_t want = std::min(mapped_file::read_chunk, out.size() - done);
#if SLM_HAVE_MMAP
    const ::ssize_t got = ::read(f.fd, out.data() + done, want);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return make_error(errc::io_error, path.string(), ": read failed: ", std::strerror(errno));
#else
    const std::size_t got = std::fread(out.data() + done, 1, want, f.fp);
#endif
    if (got == 0)
      return make_error(errc::io_error, path.string(), ": ended after ", done, " of ", out.size(),
                        " bytes (truncated while being read?)");
    done += static_cast<std::size_t>(got);
    if (progress) progress(static_cast<std::size_t>(got));
  }
#if SLM_HAVE_MMAP
  // A file rewritten while it was read may mix old and new bytes: refuse it.
  struct stat st {};
  if (::fstat(f.fd, &st) == 0 && identity_of(st) != f.id)
    return make_error(errc::io_error, path.string(), ": changed while being read");
#endif
  return {};
}

}  // namespace detail

SLM_INLINE result<mapped_file> mapped_file::open(const std::filesystem::path& path, load_mode how,
                                                 const read_progress& progress) {
  auto in = detail::open_input(path);
  if (!in.ok()) return std::move(in).take_error();
  mapped_file f;
  f.path_ = path.string();
  f.id_ = in->id;
  if (in->id.size > static_cast<std::uint64_t>(SIZE_MAX))
    return make_error(errc::out_of_range, path.string(), ": ", in->id.size, " bytes do not fit in memory");
  const std::size_t n = static_cast<std::size_t>(in->id.size);
  static_cast<void>(how);  // without mmap, both modes read
#if SLM_HAVE_MMAP
  if (how == load_mode::map) {
    f.mode_ = load_mode::map;
    if (n > 0) {  // mmap of length 0 is an error; an empty file is a valid (empty) mapping
      void* p = ::mmap(nullptr, n, PROT_READ, MAP_PRIVATE, in->fd, 0);
      if (p == MAP_FAILED)
        return make_error(errc::io_error, path.string(), ": mmap of ", n, " bytes failed: ", std::strerror(errno));
      f.data_ = static_cast<const std::byte*>(p);
      f.size_ = n;
    }
    return f;  // the mapping keeps the file alive; the descriptor closes here
  }
#endif
  auto buf = aligned_buffer::allocate(n);
  if (!buf.ok()) return std::move(buf).take_error().with_context(path.string());
  SLM_TRY(detail::read_all(path, *in, buf->bytes(), progress));
  f.buffer_ = std::move(*buf);
  f.data_ = f.buffer_.data();
  f.size_ = f.buffer_.size();
  return f;
}

SLM_INLINE status mapped_file::check_unchanged() const {
#if SLM_HAVE_MMAP
  if (mode_ != load_mode::map) return {};
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0)
    return make_error(errc::io_error, path_, ": removed since it was mapped (", std::strerror(errno), "); reload the model");
  const file_identity now = detail::identity_of(st);
  if (now == id_) return {};
  if (now.device != id_.device || now.inode != id_.inode)
    return make_error(errc::io_error, path_, ": replaced by another file since it was mapped; reload the model");
  return make_error(errc::io_error, path_, ": changed in place since it was mapped (size ", id_.size, " -> ", now.size,
                    now.mtime_sec != id_.mtime_sec || now.mtime_nsec != id_.mtime_nsec ? ", modified" : "",
                    "): the mapped weights are no longer the ones loaded; reload the model");
#else
  return {};
#endif
}

SLM_INLINE result<std::string> read_text_file(const std::filesystem::path& path, std::size_t max_bytes) {
  auto in = detail::open_input(path);
  if (!in.ok()) return std::move(in).take_error();
  if (in->id.size > max_bytes)
    return make_error(errc::out_of_range, path.string(), ": ", in->id.size, " bytes exceeds the limit of ", max_bytes);
  std::string text(static_cast<std::size_t>(in->id.size), '\0');
  SLM_TRY(detail::read_all(path, *in, std::as_writable_bytes(std::span<char>(text.data(), text.size())), {}));
  return text;
}

SLM_INLINE result<std::string> read_file_prefix(const std::filesystem::path& path, std::size_t max_bytes) {
  auto in = detail::open_input(path);
  if (!in.ok()) return std::move(in).take_error();
  std::string text(static_cast<std::size_t>(std::min<std::uint64_t>(in->id.size, max_bytes)), '\0');
  SLM_TRY(detail::read_all(path, *in, std::as_writable_bytes(std::span<char>(text.data(), text.size())), {}));
  return text;
}

#endif  // SLM_DEFINE_IO

}  // namespace slm
