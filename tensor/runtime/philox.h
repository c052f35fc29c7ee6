// Internal: Philox-4x32-10 (Salmon et al., SC'11) and the uniform draw of chorus/tensor/random.h,
// one definition for the host (runtime/random.cc) and the devices (cuda/dropout.cu), so that a
// dropout mask drawn on a GPU is the CPU's.
//
// Layout of one draw: key = seed (2 x 32 bits); counter = (block index, 2 x 32 bits; stream,
// 2 x 32 bits). Uniforms use block i/4 and lane i%4.
#pragma once

#include <cstdint>

#include "runtime/host_device.h"

namespace chorus::tensor::philox {

constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // key schedule (golden ratio, sqrt 3)

// Ten rounds on counter c (in place) under key (k0, k1).
CHORUS_HOST_DEVICE inline void rounds(uint32_t c[4], uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{kM0} * c[0];
    const uint64_t p1 = uint64_t{kM1} * c[2];
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k0;
    const uint32_t n1 = static_cast<uint32_t>(p1);
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k1;
    const uint32_t n3 = static_cast<uint32_t>(p0);
    c[0] = n0;
    c[1] = n1;
    c[2] = n2;
    c[3] = n3;
    k0 += kW0;
    k1 += kW1;
  }
}

// [0, 1) with 24-bit resolution.
CHORUS_HOST_DEVICE inline float to_unit(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

// Element `index` of the uniform sequence of (seed, stream).
CHORUS_HOST_DEVICE inline float uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t block = index >> 2;
  uint32_t c[4] = {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                   static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)};
  rounds(c, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return to_unit(c[index & 3]);
}

}  // namespace chorus::tensor::philox
