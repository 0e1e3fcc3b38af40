// examples/complete.cpp - a host that embeds slm the way an editor plugin would: load the
// bundled NAM56R C++ specialist and its tokenizer, continue a prompt with the model's
// sampling settings and a stop string, then fill in the middle of a function.
//
//   example_complete MODEL_DIR [--temp 0] [-n N]
//
// With MODEL_DIR = models/nam56r-cpp-14m and no options it prints what the README's main
// job prints (`slm run ... -n 100 --seed 3`), token for token: the same checkpoint, the
// same sampler settings (generation_config.json's), the same f32 activations.
//
// It is also the yardstick of what slm costs a host to compile (bench/README.md, "Build
// and test time"): it is built header-only (example_complete) and against the compiled
// library (example_complete_compiled), and ctest runs both.
#include <slm/generate/generator.hpp>
#include <slm/models/nam56r/model.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

int fail(const slm::status& s) {
  std::fprintf(stderr, "example_complete: %s\n", s.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: example_complete MODEL_DIR [--temp T] [-n N]\n");
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  float temperature = 0.7f;
  std::size_t n = 100;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    if (flag == "--temp") temperature = std::strtof(argv[i + 1], nullptr);
    else if (flag == "-n") n = std::strtoul(argv[i + 1], nullptr, 10);
  }

  // Load once; the model and tokenizer are immutable and could serve many threads.
  auto tok = slm::tokenizer::load_dir(dir);
  if (!tok.ok()) return fail(tok.error());
  auto model = slm::nam56r_model::load(dir);
  if (!model.ok()) return fail(model.error());
  auto pool = slm::thread_pool::create(2);
  if (!pool.ok()) return fail(pool.error());
  slm::compute_context cx{*pool};
  cx.quantized_activations = slm::activation_precision::f32;  // as `slm run` (its --act default)

  // 1. Continue a prompt: the README's main job. generation_config.json of the bundled
  //    model says temperature 0.7, top-k 40, top-p 0.95.
  const std::string prompt =
      "#include <vector>\n\n// Returns the sum of the elements of v.\ntemplate <typename T>\nT sum(const std::vector<T>& v) {";  // as $(printf ...) passes it: no final newline
  auto ids = tok->encode(prompt);
  if (!ids.ok()) return fail(ids.error());
  slm::sampler_config sc;
  sc.temperature = temperature;
  sc.top_k = 40;
  sc.top_p = 0.95f;
  sc.seed = 3;
  sc.vocab_size = std::min(model->vocab(), tok->vocab_size());
  slm::generator gen(model->new_session(), &*tok, model->vocab(), sc);
  if (auto s = gen.validate(); !s.ok()) return fail(s);
  if (auto s = gen.prefill(*ids, cx); !s.ok()) return fail(s);
  slm::generation_options go;
  go.max_new_tokens = n;
  if (tok->specials().eos >= 0) go.stop_tokens = {tok->specials().eos};
  auto r = gen.generate(go, cx, [](std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    return true;
  });
  if (!r.ok()) return fail(r.error());
  std::printf("\n");
  std::fprintf(stderr, "example_complete: %zu prompt tokens, %zu generated in %.3f s, stop: %.*s\n", ids->size(),
               r->tokens.size(), r->seconds, static_cast<int>(slm::to_string(r->reason).size()),
               slm::to_string(r->reason).data());

  // 2. Fill in the middle, greedily, in the order the model was fine-tuned for (SPM), up
  //    to the end of the statement.
  auto fim = slm::fim_prompt(*tok, "int add(int a, int b) {\n  return ", ";\n}\n", slm::fim_order::spm);
  if (!fim.ok()) return fail(fim.error());
  slm::sampler_config greedy;
  greedy.temperature = 0.0f;
  slm::generator fill(model->new_session(), &*tok, model->vocab(), greedy);
  if (auto s = fill.prefill(*fim, cx); !s.ok()) return fail(s);
  slm::generation_options fo;
  fo.max_new_tokens = 16;
  fo.stop_strings = {";", "\n"};
  auto m = fill.generate(fo, cx);
  if (!m.ok()) return fail(m.error());
  std::printf("fim: [%s]\n", m->text.c_str());
  return 0;
}
