// Philox-4x32-10 and the index-keyed draws built on it.
//
// Layout of one draw (runtime/philox.h): key = seed (2 x 32 bits); counter = (block index, 2 x 32
// bits; stream, 2 x 32 bits). Uniforms use block i/4 and lane i%4; normals use block i/2, lanes
// 2(i%2) and 2(i%2)+1, in a separate domain (top bit of the stream word set; stream ids keep it
// clear).
#include "chorus/tensor/random.h"

#include <cmath>
#include <numbers>

#include "cpu/dispatch.h"
#include "cpu/simd.h"
#include "runtime/philox.h"
#include "runtime/transfer.h"

namespace chorus::tensor {
namespace {

constexpr uint64_t kNormalDomain = uint64_t{1} << 63;

inline std::array<uint32_t, 4> counter_for(uint64_t block, uint64_t stream) {
  return {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
          static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)};
}
inline std::array<uint32_t, 2> key_for(uint64_t seed) {
  return {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
}

}  // namespace

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  philox::rounds(c.data(), k[0], k[1]);
  return c;
}

uint64_t stream_id(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64
  for (char ch : name) {
    h ^= static_cast<unsigned char>(ch);
    h *= 0x100000001b3ull;
  }
  return h & ~kNormalDomain;
}

float uniform_at(RngKey key, uint64_t index) {
  return philox::uniform(key.seed, key.stream, index);
}

float normal_at(RngKey key, uint64_t index) {
  const auto r = philox4x32(counter_for(index >> 1, key.stream | kNormalDomain), key_for(key.seed));
  const int lane = static_cast<int>(index & 1) * 2;
  const double u1 = (static_cast<double>(r[lane] >> 8) + 1.0) * (1.0 / 16777216.0);  // (0, 1]
  const double u2 = static_cast<double>(r[lane + 1] >> 8) * (1.0 / 16777216.0);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
}

namespace {

template <class Draw>
void fill_with(Tensor& t, Draw draw, uint64_t first_index) {
  CHORUS_ARG_CHECK(t.defined() && is_floating(t.dtype()), "random fill needs a float tensor");
  const int64_t n = t.numel();
  Tensor values = Tensor::empty(t.shape(), DataType::kF64);
  double* v = values.data<double>();
  parallel_for(n, 64, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) v[i] = draw(first_index + static_cast<uint64_t>(i));
  });
  copy_tensor(t, values);
}

}  // namespace

void fill_uniform_(Tensor& t, RngKey key, double low, double high, uint64_t first_index) {
  fill_with(
      t, [&](uint64_t i) { return low + (high - low) * double(uniform_at(key, i)); }, first_index);
}

void fill_normal_(Tensor& t, RngKey key, double mean, double std, uint64_t first_index) {
  fill_with(
      t, [&](uint64_t i) { return mean + std * double(normal_at(key, i)); }, first_index);
}

}  // namespace chorus::tensor
