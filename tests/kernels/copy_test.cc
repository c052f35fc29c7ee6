// copy() and copy_stream() at many sizes and alignments, and their handling of overlap.
#include <numeric>

#include "chorus/error.h"
#include "chorus/kernels/cpu.h"
#include "dispatch.h"
#include "test_data.h"

namespace chorus::kernels::testing {
namespace {

std::vector<unsigned char> pattern(size_t bytes, unsigned seed) {
  std::vector<unsigned char> v(bytes);
  std::mt19937 rng(seed);
  for (auto& c : v) c = static_cast<unsigned char>(rng());
  return v;
}

using CopyFn = void (*)(void*, const void*, size_t);

void check_copy(CopyFn fn, size_t bytes, size_t src_offset, size_t dst_offset) {
  const std::vector<unsigned char> src = pattern(bytes + 64, static_cast<unsigned>(bytes));
  std::vector<unsigned char> dst(bytes + 128, 0xa5);
  fn(dst.data() + dst_offset, src.data() + src_offset, bytes);
  ASSERT_EQ(0, std::memcmp(dst.data() + dst_offset, src.data() + src_offset, bytes))
      << bytes << " bytes, src offset " << src_offset << ", dst offset " << dst_offset;
  // Nothing outside the destination range was touched.
  for (size_t i = 0; i < dst_offset; ++i) ASSERT_EQ(dst[i], 0xa5);
  for (size_t i = dst_offset + bytes; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xa5);
}

constexpr size_t kSizes[] = {
    0, 1, 2, 3, 15, 16, 17, 63, 64, 65, 127, 128, 129, 1000, 4096, 65537, (1u << 20) + 13};

TEST(Copy, AtManySizesAndOffsets) {
  for (size_t bytes : kSizes)
    for (size_t src_offset : {0, 1, 7, 16, 33})
      for (size_t dst_offset : {0, 1, 8, 31, 63}) {
        check_copy(kernels::copy, bytes, src_offset, dst_offset);
        if (HasFatalFailure()) return;
      }
}

// Every instruction set's streaming copy (each has its own vector width, head and tail), and the
// public entry point.
TEST(CopyStream, AtManySizesAndOffsetsOnEveryIsa) {
  for (detail::Isa isa : detail::supported_isas()) {
    SCOPED_TRACE(std::string(detail::to_string(isa)));
    for (size_t bytes : kSizes)
      for (size_t src_offset : {0, 1, 7, 16, 33})
        for (size_t dst_offset : {0, 1, 8, 31, 63}) {
          check_copy(detail::kernels_for(isa).copy_stream, bytes, src_offset, dst_offset);
          if (HasFatalFailure()) return;
        }
  }
  check_copy(kernels::copy_stream, 100000, 3, 5);
}

TEST(CopyStream, RejectsOverlapAndNullButAcceptsZeroBytes) {
  kernels::copy_stream(nullptr, nullptr, 0);
  std::vector<unsigned char> v(1000);
  EXPECT_THROW(kernels::copy_stream(v.data() + 1, v.data(), 999), InvalidArgument);
  EXPECT_THROW(kernels::copy_stream(nullptr, v.data(), 10), InvalidArgument);
}

TEST(Copy, NullWithZeroBytesAndOverlapAreSafe) {
  kernels::copy(nullptr, nullptr, 0);
  std::vector<unsigned char> v(1000);
  std::iota(v.begin(), v.end(), 0);
  kernels::copy(v.data(), v.data(), v.size());  // same buffer: no-op
  EXPECT_EQ(v[999], static_cast<unsigned char>(999));
  kernels::copy(v.data() + 1, v.data(), 999);  // overlap degrades to memmove
  EXPECT_EQ(v[1], 0);
  EXPECT_EQ(v[999], static_cast<unsigned char>(998));
}

}  // namespace
}  // namespace chorus::kernels::testing
