// chorus::tensor — counter-based random numbers (Philox-4x32-10, Salmon et al., SC'11).
//
// Every random value is a pure function of (seed, stream, element index): no hidden state
// advances. A parameter initialised with stream = hash of its name gets the same values whether
// it is built whole or as a shard (a shard asks for the global indices it owns), and dropout
// recomputed in a checkpointed backward draws the same mask as the forward did.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "chorus/tensor/tensor.h"

namespace chorus::tensor {

// One Philox-4x32-10 block: 4 x 32 random bits for (counter, key).
std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// Stable 64-bit stream id for a name (FNV-1a), e.g. a parameter's hierarchical name.
uint64_t stream_id(std::string_view name);

struct RngKey {
  uint64_t seed = 0;
  uint64_t stream = 0;
};

// Element i of the uniform [0, 1) sequence of `key` (24-bit resolution, never exactly 1).
float uniform_at(RngKey key, uint64_t index);
// Element i of the standard normal sequence of `key` (Box-Muller on two independent draws).
float normal_at(RngKey key, uint64_t index);

// Fill t (any float dtype, any strides) so that its k-th element in row-major order gets value
// at index first_index + k. first_index lets a contiguous shard draw its slice of a whole.
void fill_uniform_(Tensor& t, RngKey key, double low, double high, uint64_t first_index = 0);
void fill_normal_(Tensor& t, RngKey key, double mean, double std, uint64_t first_index = 0);

}  // namespace chorus::tensor
