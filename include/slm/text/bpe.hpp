// slm/text/bpe.hpp - byte-pair encoding: the merge loop of a BPE vocabulary.
//
// A piece of pre-tokenized text arrives as a row of initial symbols (token ids of single
// characters or bytes); BPE then merges adjacent pairs, always the pair of lowest merge
// rank and, among equal ranks, the leftmost, until no adjacent pair has a merge. That is
// the rule of HF `tokenizers` (a priority queue ordered by rank, then position) and of
// the original GPT-2 encoder; the result does not depend on how the loop is organized,
// so short pieces use a plain scan (a few pairs, no heap) and long ones a heap with lazy
// invalidation (O(n log n): a 1 MB run of one letter is a single piece).
//
// The merge table maps a pair of ids to (rank, merged id) in an open-addressing hash
// table keyed by the 64-bit pair, so a lookup is one multiply and, usually, one probe.
// A loaded table is immutable; the merge loop keeps its scratch in a `bpe_scratch` owned
// by the caller, so one table serves any number of threads.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "slm/core/heap_estimate.hpp"
#include "slm/core/status.hpp"

namespace slm {

// Reusable buffers of the merge loop (one per thread; grows to the longest piece seen).
struct bpe_scratch {
  struct node {
    std::int32_t id;
    std::int32_t prev, next;  // -1 at the ends; a merged-away node has id -1
  };
  struct candidate {
    std::uint32_t rank;
    std::int32_t pos;           // the left node
    std::int32_t left, right;   // the ids when pushed: a stale entry no longer matches
  };
  std::vector<node> nodes;
  std::vector<candidate> heap;
};

class bpe_merges {
 public:
  static constexpr std::uint32_t no_rank = 0xffffffffu;

  // Reserves for n merges (optional; add() grows the table as needed).
  void reserve(std::size_t n) { rehash(capacity_for(n)); }

  // Adds merge number `rank` (a, b) -> merged. A repeated pair takes the later rank, as in
  // HF tokenizers (its merge map is collected in file order, later entries replacing
  // earlier ones). Returns false when the pair was already present.
  bool add(std::int32_t a, std::int32_t b, std::int32_t merged, std::uint32_t rank);

  std::size_t size() const noexcept { return count_; }

  // Heap bytes the table holds (slm/core/heap_estimate.hpp's method).
  std::uint64_t memory_bytes() const noexcept { return heap_estimate::of_buffer(slots_); }

  // (rank, merged id) of the pair, or rank == no_rank.
  std::pair<std::uint32_t, std::int32_t> find(std::int32_t a, std::int32_t b) const noexcept;

  // Merges `ids` in place (the row of initial symbols of one piece) and leaves the final
  // tokens in it.
  void merge(std::vector<std::int32_t>& ids, bpe_scratch& s) const;

 private:
  struct slot {
    std::uint64_t key = 0;
    std::uint32_t rank = no_rank;
    std::int32_t merged = -1;
  };

  static std::uint64_t pack(std::int32_t a, std::int32_t b) noexcept {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }
  std::size_t slot_of(std::uint64_t key) const noexcept {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_) & mask_;
  }
  static std::size_t capacity_for(std::size_t n);
  void rehash(std::size_t cap);

  // Short pieces: find the lowest-rank leftmost pair, merge it, repeat. Quadratic in the
  // piece length, which is at most 16 here.
  void merge_scan(std::vector<std::int32_t>& ids) const;

  // Long pieces: a doubly linked row and a min-heap of candidate pairs ordered by (rank,
  // position). A popped candidate is applied only if both of its nodes still hold the
  // ids it was pushed with; each merge pushes the (at most two) new neighbouring pairs.
  void merge_heap(std::vector<std::int32_t>& ids, bpe_scratch& s) const;

  std::vector<slot> slots_;
  std::size_t count_ = 0;
  std::size_t mask_ = 0;
  unsigned shift_ = 64;
};

#if SLM_DEFINE_TEXT

SLM_INLINE bool bpe_merges::add(std::int32_t a, std::int32_t b, std::int32_t merged, std::uint32_t rank) {
  if ((count_ + 1) * 4 > slots_.size() * 3) rehash(capacity_for(count_ + 1));
  const std::uint64_t key = pack(a, b);
  std::size_t i = slot_of(key);
  while (slots_[i].rank != no_rank) {
    if (slots_[i].key == key) {
      slots_[i].rank = rank, slots_[i].merged = merged;
      return false;
    }
    i = (i + 1) & mask_;
  }
  slots_[i] = {key, rank, merged};
  ++count_;
  return true;
}

SLM_INLINE std::pair<std::uint32_t, std::int32_t> bpe_merges::find(std::int32_t a, std::int32_t b) const noexcept {
  if (count_ == 0) return {no_rank, -1};
  const std::uint64_t key = pack(a, b);
  std::size_t i = slot_of(key);
  while (slots_[i].rank != no_rank) {
    if (slots_[i].key == key) return {slots_[i].rank, slots_[i].merged};
    i = (i + 1) & mask_;
  }
  return {no_rank, -1};
}

SLM_INLINE void bpe_merges::merge(std::vector<std::int32_t>& ids, bpe_scratch& s) const {
  if (ids.size() < 2 || count_ == 0) return;
  if (ids.size() <= 16)
    merge_scan(ids);
  else
    merge_heap(ids, s);
}

SLM_INLINE std::size_t bpe_merges::capacity_for(std::size_t n) {
  std::size_t c = 16;
  while (c * 3 < n * 4 + 4) c *= 2;
  return c;
}

SLM_INLINE void bpe_merges::rehash(std::size_t cap) {
  if (cap <= slots_.size()) return;
  std::vector<slot> old = std::move(slots_);
  slots_.assign(cap, slot{});
  mask_ = cap - 1;
  shift_ = 64;
  for (std::size_t c = cap; c > 1; c >>= 1) --shift_;
  for (const slot& e : old) {
    if (e.rank == no_rank) continue;
    std::size_t i = slot_of(e.key);
    while (slots_[i].rank != no_rank) i = (i + 1) & mask_;
    slots_[i] = e;
  }
}

SLM_INLINE void bpe_merges::merge_scan(std::vector<std::int32_t>& ids) const {
  std::size_t n = ids.size();
  while (n > 1) {
    std::uint32_t best = no_rank;
    std::int32_t merged = -1;
    std::size_t at = 0;
    for (std::size_t i = 0; i + 1 < n; ++i) {
      const auto [r, m] = find(ids[i], ids[i + 1]);
      if (r < best) best = r, merged = m, at = i;
    }
    if (best == no_rank) break;
    ids[at] = merged;
    std::copy(ids.begin() + static_cast<std::ptrdiff_t>(at) + 2, ids.begin() + static_cast<std::ptrdiff_t>(n),
              ids.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    --n;
  }
  ids.resize(n);
}

SLM_INLINE void bpe_merges::merge_heap(std::vector<std::int32_t>& ids, bpe_scratch& s) const {
  const auto n = static_cast<std::int32_t>(ids.size());
  s.nodes.resize(ids.size());
  s.heap.clear();
  auto at = [&s](std::int32_t i) -> auto& { return s.nodes[static_cast<std::size_t>(i)]; };  // i >= 0
  for (std::int32_t i = 0; i < n; ++i) at(i) = {ids[static_cast<std::size_t>(i)], i - 1, i + 1 < n ? i + 1 : -1};
  auto later = [](const bpe_scratch::candidate& x, const bpe_scratch::candidate& y) {
    return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
  };
  auto push = [&](std::int32_t pos) {
    const std::int32_t nx = at(pos).next;
    if (nx < 0) return;
    const auto [r, m] = find(at(pos).id, at(nx).id);
    (void)m;
    if (r == no_rank) return;
    s.heap.push_back({r, pos, at(pos).id, at(nx).id});
    std::push_heap(s.heap.begin(), s.heap.end(), later);
  };
  for (std::int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), later);
    const bpe_scratch::candidate c = s.heap.back();
    s.heap.pop_back();
    auto& left = at(c.pos);
    if (left.id != c.left || left.next < 0) continue;
    auto& right = at(left.next);
    if (right.id != c.right) continue;
    left.id = find(c.left, c.right).second;
    right.id = -1;
    left.next = right.next;
    if (right.next >= 0) at(right.next).prev = c.pos;
    if (left.prev >= 0) push(left.prev);
    push(c.pos);
  }
  std::size_t out = 0;
  for (std::int32_t i = 0; i >= 0; i = at(i).next) ids[out++] = at(i).id;
  ids.resize(out);
}

#endif  // SLM_DEFINE_TEXT

}  // namespace slm
