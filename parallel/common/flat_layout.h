// Internal: parameters laid out in flat buckets, the unit every data-parallel scheme moves.
//
// A bucket is one contiguous buffer of a single dtype holding several parameters (or their
// gradients) back to back. Each parameter starts at a multiple of 64 bytes (a cache line: the
// kernels that read a parameter in place see it aligned), and a bucket's length is padded to a
// multiple of `pad_to` elements, so that it divides into equal shards (ZeRO) — the padding is
// zeros that every rank reduces alike and no parameter owns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "chorus/tensor/tensor.h"
#include "chorus/types.h"

namespace chorus::parallel {

struct FlatSlot {
  size_t param = 0;    // index into the parameter list the layout was planned for
  int64_t offset = 0;  // first element inside the bucket
  int64_t numel = 0;
};

struct FlatBucket {
  DataType dtype = DataType::kF32;
  int64_t numel = 0;  // padded length
  std::vector<FlatSlot> slots;
};

struct FlatLayout {
  std::vector<FlatBucket> buckets;
  // Per parameter: (bucket, slot) where it lies; (SIZE_MAX, 0) for a parameter not laid out.
  std::vector<std::pair<size_t, size_t>> where;
};

struct ParamShape {
  DataType dtype = DataType::kF32;
  int64_t numel = 0;
};

// Lays out params[order[0]], params[order[1]], ... in that order: a bucket closes when the next
// parameter would take it past `bucket_bytes` (`first_bucket_bytes` for the first bucket) or has
// another dtype. A parameter larger than the limit gets a bucket of its own. pad_to >= 1.
FlatLayout plan_buckets(const std::vector<ParamShape>& params, const std::vector<size_t>& order,
                        size_t first_bucket_bytes, size_t bucket_bytes, int64_t pad_to);

// Rank r's shard of a bucket of `numel` elements (a multiple of n): [begin, end).
inline std::pair<int64_t, int64_t> shard_range(int64_t numel, int n, int r) {
  const int64_t per = numel / n;
  return {per * r, per * (r + 1)};
}

// A gradient that is not (or no longer) the view into its bucket (someone set_grad() another
// tensor) goes back into it: copied there (zeros when undefined), the view bound as the
// parameter's gradient. Nothing happens when `grad` already is the view.
void rebind_into_bucket(tensor::Tensor& param, const tensor::Tensor& grad, tensor::Tensor view);

}  // namespace chorus::parallel
