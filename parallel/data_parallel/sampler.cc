// DistributedSampler: a (seed, epoch) permutation, padded or trimmed, dealt round-robin.
#include "chorus/parallel/sampler.h"

#include <array>
#include <numeric>

#include "chorus/error.h"
#include "chorus/tensor/random.h"

namespace chorus::parallel {

DistributedSampler::DistributedSampler(int64_t dataset_size, int replicas, int rank,
                                       SamplerOptions options)
    : n_(dataset_size), replicas_(replicas), rank_(rank), options_(options) {
  CHORUS_ARG_CHECK(dataset_size >= 0, "DistributedSampler: dataset size ", dataset_size);
  CHORUS_ARG_CHECK(replicas >= 1, "DistributedSampler: ", replicas, " replicas");
  CHORUS_ARG_CHECK(rank >= 0 && rank < replicas, "DistributedSampler: rank ", rank, " outside [0, ",
                   replicas, ")");
  const int64_t r = replicas;
  total_ = options.drop_last ? n_ / r * r : (n_ + r - 1) / r * r;
}

DistributedSampler::DistributedSampler(int64_t dataset_size, const Communicator& dp,
                                       SamplerOptions options)
    : DistributedSampler(dataset_size, dp.size(), dp.rank(), options) {}

void DistributedSampler::set_epoch(int64_t epoch) { epoch_ = epoch; }

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order(static_cast<size_t>(n_));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (options_.shuffle) {
    // Fisher-Yates with counter-based 64-bit draws: the permutation depends on (seed, epoch)
    // only. (The modulo's bias is below 2^-40 for any dataset that fits in memory.)
    const std::array<uint32_t, 2> key{static_cast<uint32_t>(options_.seed),
                                      static_cast<uint32_t>(options_.seed >> 32)};
    for (int64_t i = n_ - 1; i > 0; --i) {
      const auto e = static_cast<uint64_t>(epoch_), k = static_cast<uint64_t>(i);
      const std::array<uint32_t, 4> r = tensor::philox4x32(
          {static_cast<uint32_t>(k), static_cast<uint32_t>(k >> 32), static_cast<uint32_t>(e),
           static_cast<uint32_t>(e >> 32) ^ 0x5a3d1e0fu},
          key);
      const uint64_t draw = (uint64_t{r[0]} << 32) | r[1];
      const auto j = static_cast<int64_t>(draw % static_cast<uint64_t>(i + 1));
      std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
    }
  }
  // Pad by repeating from the start (cyclically: the padding can exceed n when n < replicas).
  for (int64_t k = n_; k < total_; ++k) order.push_back(order[static_cast<size_t>((k - n_) % n_)]);
  order.resize(static_cast<size_t>(total_));
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(size()));
  for (int64_t k = rank_; k < total_; k += replicas_) mine.push_back(order[static_cast<size_t>(k)]);
  return mine;
}

}  // namespace chorus::parallel
