// slm/mapped_file.hpp - a read-only file mapped into memory.
//
// Checkpoints are mapped, not read: the OS pages weights in on first touch and shares
// the pages between processes, and tensor views point straight into the mapping. On
// platforms without mmap the file is read into an aligned buffer instead (same API).
// A mapped_file is immutable after open() and may be shared across threads.
#pragma once
#include "slm/build_mode.hpp"

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <utility>

#include "slm/status.hpp"
#include "slm/tensor.hpp"

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

class mapped_file {
 public:
  mapped_file() noexcept = default;
  mapped_file(mapped_file&& o) noexcept
      : path_(std::move(o.path_)), data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)), fallback_(std::move(o.fallback_)) {}
  mapped_file& operator=(mapped_file&& o) noexcept {
    if (this != &o) {
      unmap();
      path_ = std::move(o.path_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      fallback_ = std::move(o.fallback_);
    }
    return *this;
  }
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  ~mapped_file() { unmap(); }

  static result<mapped_file> open(const std::filesystem::path& path);

  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  std::size_t size() const noexcept { return size_; }
  const std::string& path() const noexcept { return path_; }

 private:
  static status open_error(const std::filesystem::path& path, int e);
  void unmap() noexcept {
#if SLM_HAVE_MMAP
    if (data_ && !fallback_.data()) ::munmap(const_cast<std::byte*>(data_), size_);
#endif
    data_ = nullptr;
    size_ = 0;
  }

  std::string path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  aligned_buffer fallback_;  // used only where mmap is unavailable
};

// Whole-file read into a string (small text files: config.json, tokenizer.json).
result<std::string> read_text_file(const std::filesystem::path& path, std::size_t max_bytes = 256u << 20);

#if SLM_DEFINE_IO

SLM_INLINE result<mapped_file> mapped_file::open(const std::filesystem::path& path) {
  mapped_file f;
  f.path_ = path.string();
#if SLM_HAVE_MMAP
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return open_error(path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return open_error(path, e);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error(errc::io_error, path.string(), ": not a regular file");
  }
  f.size_ = static_cast<std::size_t>(st.st_size);
  if (f.size_ > 0) {  // mmap of length 0 is an error; an empty file is a valid (empty) mapping
    void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      return make_error(errc::io_error, path.string(), ": mmap of ", f.size_, " bytes failed: ", std::strerror(e));
    }
    f.data_ = static_cast<const std::byte*>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
  return f;
#else
  std::FILE* fp = std::fopen(path.string().c_str(), "rb");
  if (!fp) return open_error(path, errno);
  std::fseek(fp, 0, SEEK_END);
  const long len = std::ftell(fp);
  std::fseek(fp, 0, SEEK_SET);
  if (len < 0) {
    std::fclose(fp);
    return make_error(errc::io_error, path.string(), ": cannot determine the file size");
  }
  auto buf = aligned_buffer::allocate(static_cast<std::size_t>(len));
  if (!buf.ok()) {
    std::fclose(fp);
    return std::move(buf).take_error().with_context(path.string());
  }
  const std::size_t got = len ? std::fread(buf->data(), 1, static_cast<std::size_t>(len), fp) : 0;
  std::fclose(fp);
  if (got != static_cast<std::size_t>(len)) return make_error(errc::io_error, path.string(), ": short read");
  f.fallback_ = std::move(*buf);
  f.data_ = f.fallback_.data();
  f.size_ = f.fallback_.size();
  return f;
#endif
}

SLM_INLINE status mapped_file::open_error(const std::filesystem::path& path, int e) {
  return make_error(e == ENOENT ? errc::not_found : errc::io_error, path.string(), ": cannot open: ", std::strerror(e));
}

SLM_INLINE result<std::string> read_text_file(const std::filesystem::path& path, std::size_t max_bytes) {
  auto f = mapped_file::open(path);
  if (!f.ok()) return std::move(f).take_error();
  if (f->size() > max_bytes)
    return make_error(errc::out_of_range, path.string(), ": ", f->size(), " bytes exceeds the limit of ", max_bytes);
  return std::string(reinterpret_cast<const char*>(f->bytes().data()), f->size());
}

#endif  // SLM_DEFINE_IO

}  // namespace slm
