// slm/io/documents.hpp - the text documents a command or host scores or calibrates on:
// files, and directories standing for every regular file under them.
//
//   auto docs = slm::read_documents({"eval/a.py", "eval/corpus/"});   // result<vector<document>>
//
// A directory stands for every regular file under it (recursively), sorted by path, so
// the same tree gives the same order on every machine. Each file is read whole (refused
// over max_bytes, or when it is not a regular file: a FIFO does not block). An empty
// document, an empty directory or one that cannot be listed is an error: a score over
// nothing would read as a score.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "slm/core/status.hpp"
#include "slm/io/mapped_file.hpp"

namespace slm {

struct document {
  std::string name;  // the file's path as listed (a directory's files: under the directory as given)
  std::string text;
};

// The documents of `paths`, in order (a directory's files sorted by path); see the top of
// the file.
result<std::vector<document>> read_documents(std::span<const std::filesystem::path> paths,
                                             std::size_t max_bytes = std::size_t{1} << 30);

// ---- implementation (SLM_DEFINE_IO)
#if SLM_DEFINE_IO

SLM_INLINE result<std::vector<document>> read_documents(std::span<const std::filesystem::path> paths,
                                                        std::size_t max_bytes) {
  std::vector<document> docs;
  for (const std::filesystem::path& p : paths) {
    std::error_code ec;
    std::vector<std::filesystem::path> files;
    if (std::filesystem::is_directory(p, ec)) {
      const auto unlisted = [&] { return make_error(errc::io_error, p.string(), ": cannot list the directory: ", ec.message()); };
      std::filesystem::recursive_directory_iterator it(p, ec), end;
      if (ec) return unlisted();
      for (; it != end; it.increment(ec)) {
        if (ec) return unlisted();
        std::error_code fec;
        if (it->is_regular_file(fec)) files.push_back(it->path());
      }
      if (ec) return unlisted();
      if (files.empty()) return make_error(errc::invalid_argument, p.string(), ": no files in the directory");
      std::sort(files.begin(), files.end());
    } else {
      files.push_back(p);
    }
    for (const auto& f : files) {
      auto text = read_text_file(f, max_bytes);
      if (!text.ok()) return std::move(text).take_error();
      if (text->empty()) return make_error(errc::invalid_argument, f.string(), ": empty document");
      docs.push_back(document{f.string(), std::move(*text)});
    }
  }
  return docs;
}

#endif  // SLM_DEFINE_IO

}  // namespace slm
