// reduce_n() on every instruction set: left fold in source order, f16/bf16 rounded once, for
// n = 1..9, counts around the staging block size, and dst aliasing each kind of source.
#include "test_data.h"

namespace chorus::kernels::testing {
namespace {

constexpr int kMaxInputs = 9;
constexpr size_t kCountsN[] = {0, 1, 17, 1023, 1024, 1025, 4099, 10007};
constexpr size_t kMaxCountN = 10007;

Buffer reference(DataType dtype, ReduceOp op, const std::vector<const void*>& srcs, size_t count) {
  Buffer out(dtype, count);
  visit_type(dtype, [&]<class T>(TypeTag<T>) {
    for (size_t i = 0; i < count; ++i) {
      Compute<T> acc = to_compute(load<T>(srcs[0], i));
      for (size_t k = 1; k < srcs.size(); ++k)
        acc = ref_combine<Compute<T>>(op, acc, to_compute(load<T>(srcs[k], i)));
      store(out.at(0), i, from_compute<T>(acc));
    }
  });
  return out;
}

class ReduceN : public PerIsa {};

TEST_P(ReduceN, FoldsLeftInSourceOrder) {
  for (DataType dtype : kAllDataTypes) {
    std::vector<Buffer> inputs;
    for (int k = 0; k < kMaxInputs; ++k)
      inputs.push_back(random_buffer(dtype, kMaxCountN, 77 * static_cast<int>(dtype) + k));
    const size_t size = dtype_size(dtype);
    for (ReduceOp op : kAllReduceOps) {
      for (int n = 1; n <= kMaxInputs; ++n) {
        // Odd inputs start one element in, so sources are misaligned relative to each other; the
        // last source repeats the first when n > 2 (the same buffer may appear twice).
        std::vector<const void*> srcs;
        for (int k = 0; k < n; ++k) srcs.push_back(inputs[k].at(k % 2));
        if (n > 2) srcs[n - 1] = srcs[0];
        const Buffer expected = reference(dtype, op, srcs, kMaxCountN);
        for (size_t count : kCountsN) {
          SCOPED_TRACE(::testing::Message() << to_string(dtype) << " " << to_string(op) << " n "
                                            << n << " count " << count);
          Buffer dst(dtype, count);
          kernels().reduce_n(dtype, op, dst.at(1), srcs.data(), n, count);
          ASSERT_TRUE(same_elements(dtype, expected.at(0), dst.at(1), count)) << "separate dst";
          // dst is one of the sources: the first, the last, and one in the middle.
          for (int alias : {0, n - 1, n / 2}) {
            Buffer scratch(dtype, count);
            std::memcpy(scratch.at(0), srcs[alias], count * size);
            std::vector<const void*> aliased = srcs;
            for (auto& p : aliased)
              if (p == srcs[alias]) p = scratch.at(0);
            kernels().reduce_n(dtype, op, scratch.at(0), aliased.data(), n, count);
            ASSERT_TRUE(same_elements(dtype, expected.at(0), scratch.at(0), count))
                << "dst == srcs[" << alias << "]";
          }
        }
      }
    }
  }
}

TEST_P(ReduceN, TwoInputsMatchReduce) {
  const Buffer a = random_buffer(DataType::kBF16, 5000, 1);
  const Buffer b = random_buffer(DataType::kBF16, 5000, 2);
  Buffer x(DataType::kBF16, 5000), y(DataType::kBF16, 5000);
  const void* srcs[] = {a.at(0), b.at(0)};
  kernels().reduce_n(DataType::kBF16, ReduceOp::kSum, x.at(0), srcs, 2, 5000);
  kernels().reduce(DataType::kBF16, ReduceOp::kSum, y.at(0), a.at(0), b.at(0), 5000);
  EXPECT_TRUE(same_elements(DataType::kBF16, y.at(0), x.at(0), 5000));
}

TEST_P(ReduceN, HalfAccumulatesInFloatAndRoundsOnce) {
  // 2048 + 1 + 1 is 2050 when accumulated in f32; rounding after each step would give 2048.
  const Half big = Half::from_bits(float_to_half(2048.0f));
  const Half one = Half::from_bits(float_to_half(1.0f));
  const void* srcs[] = {&big, &one, &one};
  Half out;
  kernels().reduce_n(DataType::kF16, ReduceOp::kSum, &out, srcs, 3, 1);
  EXPECT_EQ(half_to_float(out.bits), 2050.0f);
}

CHORUS_INSTANTIATE_PER_ISA(ReduceN);

}  // namespace
}  // namespace chorus::kernels::testing
