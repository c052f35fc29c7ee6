// Direct all-gather: send our block to every peer and receive every peer's block in place.
// One step of latency, (n-1) x block bytes sent per rank.
//
// Where every rank may write every other's memory (Exchange::puts) and the result is large, each
// rank *pushes* its block instead: the ranks swap the addresses of their results, and each copies
// a chunk of its block into place and then writes the same chunk, still in cache, into every
// peer's result; a last small message tells each peer that this rank is done with its memory. A
// pull (each receiver reading the sender's block) reads every block from memory once more.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "algo/algorithm.h"

namespace chorus::algo {
namespace {

constexpr size_t kPushFromBytes = 128 << 10;  // the whole result; below it the pull is as fast
constexpr size_t kPushChunkBytes = 256 << 10;

void all_gather_push(Context& c, const CollArgs& a) {
  const int n = c.size, r = c.rank;
  const size_t bytes = a.bytes();
  c.ex.step("swap result addresses");
  const uint64_t mine = reinterpret_cast<uint64_t>(a.recv);
  std::vector<uint64_t> theirs(static_cast<size_t>(n));
  c.ex.exchange_small(Exchange::kAllPeers, reinterpret_cast<const std::byte*>(&mine), 0,
                      Exchange::kAllPeers, reinterpret_cast<std::byte*>(theirs.data()),
                      sizeof(uint64_t), sizeof(uint64_t));
  c.ex.step("push blocks");
  std::byte* own = a.recv + static_cast<size_t>(r) * bytes;
  // Large results: the own copy with streaming stores, which still leave the chunk's source in
  // cache for the writes that follow.
  const bool stream = stream_results(c, a, bytes * static_cast<size_t>(n));
  for (size_t off = 0; off < bytes; off += kPushChunkBytes) {
    const size_t len = std::min(kPushChunkBytes, bytes - off);
    copy_if_distinct(a, own + off, a.send + off, len, stream);
    // Peers in turn from rank + 1, so that no two ranks write into the same one at once.
    for (int k = 1; k < n; ++k) {
      const int p = (r + k) % n;
      c.ex.put(p, a.send + off, theirs[static_cast<size_t>(p)] + r * bytes + off, len);
    }
  }
  c.ex.step("blocks written");
  const std::byte done{1};
  std::vector<std::byte> sink(static_cast<size_t>(n));
  c.ex.exchange_small(Exchange::kAllPeers, &done, 0, Exchange::kAllPeers, sink.data(), 1, 1);
}

}  // namespace

void all_gather_direct(Context& c, const CollArgs& a) {
  const int n = c.size, r = c.rank;
  const size_t bytes = a.bytes();
  if (a.mem == nullptr && bytes * static_cast<size_t>(n) >= kPushFromBytes && c.ex.puts())
    return all_gather_push(c, a);
  c.ex.step("exchange blocks");
  if (bytes <= Exchange::kEagerPostBytes) {  // latency-bound: no overlap to gain
    copy_if_distinct(a, a.recv + r * bytes, a.send, bytes);
    c.ex.exchange_small(Exchange::kAllPeers, a.send, 0, Exchange::kAllPeers, a.recv, bytes, bytes);
    return;
  }
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    c.ex.post_send(p, a.send, bytes);
    c.ex.post_recv(p, a.recv + p * bytes, bytes);
  }
  c.ex.poke();  // peers read our block while we copy it into place
  copy_if_distinct(a, a.recv + r * bytes, a.send, bytes);
  c.ex.wait_all();
}

}  // namespace chorus::algo
