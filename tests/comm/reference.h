// Inputs and exact expected results for collective tests.
//
// Every input element is a small integer chosen from (op, rank, index, salt) so that every
// partial and final result of every dtype x op is exactly representable (sums stay within
// [-40, 40], products are +-powers of two up to 2^8, min/max within [-48, 48]); integer
// products that leave the type's range wrap, in the reference as in the kernels. The expected
// value is computed in int64 and converted exactly as the kernels would.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "chorus/types.h"

namespace chorus::testing {

// `count` floats, small integers (so sums of a few stay exact) that differ with `salt`: a
// message whose every element shows where it came from.
inline std::vector<float> values(size_t count, int salt) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>((i * 7 + salt * 13) % 1000);
  return v;
}

// The logical input of `rank` at element `index`.
int64_t input_value(DataType dtype, ReduceOp op, int rank, size_t index, int salt);

// Stores a logical value (or any double, for float types) into element i of buf.
void store(DataType dtype, void* buf, size_t i, int64_t value);
void store_double(DataType dtype, void* buf, size_t i, double value);
// Reads element i as a double (exact for every value the tests use).
double load(DataType dtype, const void* buf, size_t i);

// Fills count elements with input_value(dtype, op, rank, offset + i, salt).
void fill_inputs(DataType dtype, ReduceOp op, int rank, void* buf, size_t count, size_t offset,
                 int salt);

// The exact result at element `index` of reducing the inputs of ranks 0..n-1.
double expected_reduction(DataType dtype, ReduceOp op, int n, size_t index, int salt);

// Counts elements of buf[0..count) that differ from expect(i); describes the first one.
struct Mismatch {
  size_t count = 0;
  size_t first = 0;
  double got = 0, want = 0;
};
template <class F>
Mismatch compare(DataType dtype, const void* buf, size_t count, F&& expect) {
  Mismatch m;
  for (size_t i = 0; i < count; ++i) {
    const double got = load(dtype, buf, i), want = expect(i);
    if (!(got == want)) {
      if (m.count == 0) {
        m.first = i;
        m.got = got;
        m.want = want;
      }
      ++m.count;
    }
  }
  return m;
}

// A byte buffer with a guard zone after the data, to catch writes past the end.
class GuardedBuffer {
 public:
  GuardedBuffer(size_t bytes);
  std::byte* data() { return storage_.data() + kGuard; }
  bool guards_intact() const;

 private:
  static constexpr size_t kGuard = 64;
  std::vector<std::byte> storage_;
  size_t bytes_;
};

}  // namespace chorus::testing
