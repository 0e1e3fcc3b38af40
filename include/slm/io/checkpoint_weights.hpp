// slm/io/checkpoint_weights.hpp - a checkpoint's weights as a whole: what they amount
// to, what a decode step reads of them, and reading them ahead.
//
//   weight_totals              tensors, elements and bytes, in all and per dtype (what
//                              `slm inspect` prints for a checkpoint or one file)
//   decode_weight_bytes(ck)    the bytes of weights one decode step reads, estimated from
//                              the tensors (what `slm bench --model` sets against the
//                              read bandwidth)
//   prefetch_weights(ck, cb)   a mapped checkpoint's pages read once, so the first forward
//                              does not wait on the disk (`slm run --mmap`)
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include "slm/io/checkpoint.hpp"
#include "slm/io/safetensors.hpp"

namespace slm {

struct tensor_totals {
  std::size_t tensors = 0;
  std::uint64_t elements = 0, bytes = 0;  // bytes as stored
};

struct weight_totals {
  tensor_totals all;
  std::map<std::string_view, tensor_totals> by_dtype;  // by safetensors dtype name ("BF16", "U8", ...)

  void add(const safetensors::tensor_info& t);
  static weight_totals of(std::span<const safetensors::tensor_info> tensors);
  static weight_totals of(const checkpoint& ck);
};

// The weight bytes a decode step reads, estimated from the checkpoint: every tensor but
// the input embedding table (one row of it is read), routed experts scaled by top-k /
// experts (config.json's num_experts, n_routed_experts, num_local_experts or
// num_moe_experts, and num_experts_per_tok or moe_router_topk). Norms and biases count;
// KV-cache reads do not (short contexts).
std::uint64_t decode_weight_bytes(const checkpoint& ck);

// With load_mode::map the weights are not read at open(): reads one byte of every 4 KiB
// page of every shard, reporting (bytes done, bytes of all shards) every 16 MiB of a shard
// and once at the end. Returns the bytes covered: 0, with no report, for weights read into
// memory (already there).
std::uint64_t prefetch_weights(const checkpoint& ck,
                               const std::function<void(std::uint64_t done, std::uint64_t total)>& progress = {});

// ---- implementation (SLM_DEFINE_IO)
#if SLM_DEFINE_IO

SLM_INLINE void weight_totals::add(const safetensors::tensor_info& t) {
  for (tensor_totals* x : {&by_dtype[safetensors_name(t.type)], &all}) {
    x->tensors += 1;
    x->elements += static_cast<std::uint64_t>(t.shape.numel());
    x->bytes += t.end - t.begin;
  }
}

SLM_INLINE weight_totals weight_totals::of(std::span<const safetensors::tensor_info> tensors) {
  weight_totals w;
  for (const auto& t : tensors) w.add(t);
  return w;
}

SLM_INLINE weight_totals weight_totals::of(const checkpoint& ck) {
  weight_totals w;
  for (const auto& e : ck.tensors()) w.add(ck.info(e));
  return w;
}

SLM_INLINE std::uint64_t decode_weight_bytes(const checkpoint& ck) {
  const json::value& c = ck.config();
  double experts = 0, top_k = 0;
  for (const char* k : {"num_experts", "n_routed_experts", "num_local_experts", "num_moe_experts"})
    if (c.find(k) && c[k].as_int64()) experts = static_cast<double>(*c[k].as_int64());
  for (const char* k : {"num_experts_per_tok", "moe_router_topk"})
    if (c.find(k) && c[k].as_int64()) top_k = static_cast<double>(*c[k].as_int64());
  double total = 0;
  for (const auto& e : ck.tensors()) {
    const auto& t = ck.info(e);
    const double bytes = static_cast<double>(t.end - t.begin);
    const std::string& n = t.name;
    if (n.find("embed_tokens") != std::string::npos || n.find("word_embeddings") != std::string::npos ||
        n.find("wte.") != std::string::npos || n.find("tok_embeddings") != std::string::npos ||
        n.find("embeddings.weight") != std::string::npos)
      continue;
    const bool routed = n.find(".experts.") != std::string::npos && n.find("shared") == std::string::npos;
    total += routed && experts > 0 && top_k > 0 ? bytes * top_k / experts : bytes;
  }
  return static_cast<std::uint64_t>(total);
}

SLM_INLINE std::uint64_t prefetch_weights(const checkpoint& ck,
                                          const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  if (ck.weights_mode() != load_mode::map) return 0;
  std::uint64_t total = 0, done = 0;
  for (const auto& f : ck.shards()) total += f.bytes().size();
  volatile unsigned char sink = 0;  // the reads must happen
  for (const auto& f : ck.shards()) {
    const auto bytes = f.bytes();
    for (std::size_t off = 0; off < bytes.size(); off += 4096) {
      sink = sink ^ static_cast<unsigned char>(bytes[off]);
      done += std::min<std::size_t>(4096, bytes.size() - off);
      if (progress && (off & ((std::size_t{16} << 20) - 1)) == 0) progress(done, total);
    }
  }
  if (progress) progress(total, total);
  return total;
}

#endif  // SLM_DEFINE_IO

}  // namespace slm
