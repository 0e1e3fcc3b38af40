// Runs a fuzz target's entry point once on every file named (directories recursively),
// for builds without libFuzzer. Any crash or sanitizer report fails the run.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {
int replay(const std::filesystem::path& p) {
  std::FILE* f = std::fopen(p.string().c_str(), "rb");
  if (!f) {
    std::fprintf(stderr, "cannot open %s\n", p.string().c_str());
    return 0;
  }
  std::vector<std::uint8_t> buf;
  std::uint8_t chunk[65536];
  for (std::size_t n; (n = std::fread(chunk, 1, sizeof chunk, f)) > 0;) buf.insert(buf.end(), chunk, chunk + n);
  std::fclose(f);
  buf.shrink_to_fit();  // exact size, so a sanitizer sees any read past the end
  LLVMFuzzerTestOneInput(buf.data(), buf.size());
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  int count = 0;
  for (int i = 1; i < argc; ++i) {
    std::error_code ec;
    if (std::filesystem::is_directory(argv[i], ec)) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(argv[i], ec))
        if (e.is_regular_file()) count += replay(e.path());
    } else {
      count += replay(argv[i]);
    }
  }
  std::printf("replayed %d inputs\n", count);
  return count > 0 ? 0 : 1;
}
