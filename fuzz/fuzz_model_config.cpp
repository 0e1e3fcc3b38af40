// Fuzz target: model_config::from_json over hostile config.json text, and the RoPE table
// of every config it accepts. It must never crash, hang or allocate without bound: what
// it accepts has sizes inside the limits model_config enforces (layers <= 4096, head
// dims <= 4096, ...), so everything built from it here is bounded by them. Violations
// trap (no abort()).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "slm/io/json.hpp"
#include "slm/models/hf/config.hpp"
#include "slm/layers/rope.hpp"

namespace {
void check(bool ok) {
  if (!ok) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  slm::json::parse_options opt;
  opt.max_depth = 64;
  opt.max_bytes = 1 << 20;
  auto cfg = slm::json::parse(text, opt);
  if (!cfg.ok()) return 0;
  auto c = slm::model_config::from_json(*cfg);
  if (!c.ok()) {
    check(!c.error().message().empty());  // an error always says why
    return 0;
  }
  // What the loader relies on once a config is accepted.
  check(c->n_layers > 0 && c->n_layers <= 4096 && c->layers.size() == c->n_layers);
  check(c->hidden > 0 && c->vocab > 0);
  check(c->norm_eps > 0);
  std::size_t rope_dim = 0;  // the RoPE tables the attention layers would build
  for (std::size_t i = 0; i < c->n_layers; ++i) {
    const slm::layer_spec& l = c->layers[i];
    if (l.ffn == slm::ffn_kind::moe)
      check(c->n_experts > 0 && c->experts_per_token >= 1 && c->experts_per_token <= c->n_experts &&
            c->expert_intermediate > 0);
    else if (l.ffn == slm::ffn_kind::dense)
      check(c->intermediate > 0);
    if (l.attention == slm::attention_kind::gqa) {
      check(c->n_heads > 0 && c->head_dim > 0 && c->head_dim <= 4096);
      check(c->n_kv_heads > 0 && c->n_heads % c->n_kv_heads == 0);
      rope_dim = c->head_dim;
    } else if (l.attention == slm::attention_kind::mla) {
      check(c->kv_lora_rank > 0 && c->qk_rope_dim % 2 == 0 && c->qk_rope_dim <= 4096);
      rope_dim = c->qk_rope_dim;
    }
    (void)c->describe_layer(i);
  }
  if (c->router == slm::router_kind::sigmoid_grouped)
    check(c->n_group >= 1 && c->n_experts % c->n_group == 0 && c->topk_group >= 1 && c->topk_group <= c->n_group);
  const slm::rope_table t = slm::rope_table::make(c->rope, rope_dim);
  check(t.rotary_dim <= rope_dim && t.inv_freq.size() == t.rotary_dim / 2);
  float cs[2048], sn[2048];
  if (t.inv_freq.size() <= 2048) t.angles(12345, cs, sn);
  return 0;
}
