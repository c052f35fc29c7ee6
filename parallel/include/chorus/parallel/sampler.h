// chorus::parallel — DistributedSampler: each data-parallel rank's share of a dataset, per epoch.
//
// Each epoch, the dataset's indices 0..N-1 are shuffled by a permutation that depends only on
// (seed, epoch) (Philox, the same on every rank), then cut so that every rank gets the same
// number of samples:
//   * drop_last = false (default): the list is padded to a multiple of the ranks by repeating its
//     first indices, so some samples are seen twice in that epoch;
//   * drop_last = true: the tail that does not fill every rank is dropped.
// Rank r takes positions r, r + R, r + 2R, ... of the list (R ranks). So when every rank takes
// batches of b consecutive indices of its share, step s of all ranks together covers positions
// [s*b*R, (s+1)*b*R) of the list: the same samples a single process with batch b*R sees in step
// s (a global batch of b*R, whatever R is).
//
// Call set_epoch(e) at the start of every epoch, on every rank, before reading indices().
#pragma once

#include <cstdint>
#include <vector>

#include "chorus/communicator.h"

namespace chorus::parallel {

struct SamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
};

class DistributedSampler {
 public:
  // `replicas` ranks, this one `rank`. InvalidArgument for size < 0, replicas < 1 or a rank
  // outside [0, replicas).
  DistributedSampler(int64_t dataset_size, int replicas, int rank, SamplerOptions options = {});
  // The ranks of `dp` (usually mesh.dp()).
  DistributedSampler(int64_t dataset_size, const Communicator& dp, SamplerOptions options = {});

  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }
  // This rank's indices for the current epoch, in the order to visit them.
  std::vector<int64_t> indices() const;
  // Samples per rank per epoch (the same on every rank), and all ranks together.
  int64_t size() const { return total_ / replicas_; }
  int64_t total_size() const { return total_; }

 private:
  int64_t n_;
  int replicas_, rank_;
  SamplerOptions options_;
  int64_t total_;
  int64_t epoch_ = 0;
};

}  // namespace chorus::parallel
