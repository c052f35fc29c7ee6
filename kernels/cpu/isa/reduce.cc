// chorus — reduce and reduce_n for one instruction set (see isa.h).
//
// Every element is loaded into its arithmetic type, combined and stored (element_ops.h); the
// loops are plain element-wise code that the compiler vectorises, bf16 conversions included. f16
// is the exception: it is widened kStage elements at a time into f32 blocks that stay in L1,
// combined there and narrowed once per output element. reduce_n folds left through an
// accumulator block, so each source is read once from memory and dst is written once.
// reduce_stream computes a 64-byte line of results at a time and stores it past the caches.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "element_ops.h"
#include "half_convert.h"
#include "isa.h"
#include "loops.h"

namespace chorus::kernels::detail::CHORUS_KERNELS_ISA_NS {
namespace {

constexpr size_t block_size(size_t done, size_t count) {
  return count - done < kStage ? count - done : kStage;
}

// The per-element steps of a fold, as types so the loops inline them. C is the arithmetic type.
template <ReduceOp kOp, class T>
struct Fold {
  using C = Compute<T>;
  // a op b, both from storage, rounded back to storage.
  T operator()(T a, T b) const {
    return store_element<T>(combine<kOp>(load_element(a), load_element(b)));
  }
  // The first step into an accumulator, the middle steps, and the last step out of it.
  struct First {
    C operator()(T a, T b) const { return combine<kOp>(load_element(a), load_element(b)); }
  };
  struct Middle {
    C operator()(C acc, T x) const { return combine<kOp>(acc, load_element(x)); }
  };
  struct Last {
    T operator()(C acc, T x) const { return store_element<T>(combine<kOp>(acc, load_element(x))); }
  };
};

template <ReduceOp kOp, class T>
void reduce_typed(T* dst, const T* a, const T* b, size_t count) {
  if constexpr (kStagedThroughF32<T>) {
    alignas(64) float fa[kStage];
    alignas(64) float fb[kStage];
    for (size_t i = 0; i < count; i += kStage) {
      const size_t n = block_size(i, count);
      widen(a + i, fa, n);  // both inputs are read before dst (which may be a or b) is written
      widen(b + i, fb, n);
      map2_into_a(fa, static_cast<const float*>(fb), n,
                  [](float x, float y) { return combine<kOp>(x, y); });
      narrow(fa, dst + i, n);
    }
  } else {
    map2(dst, a, b, count, Fold<kOp, T>{});
  }
}

// srcs[0] op srcs[1] op ... for n >= 3; dst may be any of the sources.
template <ReduceOp kOp, class T>
void reduce_n_typed(T* dst, const T* const* srcs, int n, size_t count) {
  if constexpr (kStagedThroughF32<T>) {
    alignas(64) float acc[kStage];
    alignas(64) float x[kStage];
    const auto combine_f32 = [](float p, float q) { return combine<kOp>(p, q); };
    for (size_t i = 0; i < count; i += kStage) {
      const size_t m = block_size(i, count);
      widen(srcs[0] + i, acc, m);
      for (int k = 1; k < n; ++k) {
        widen(srcs[k] + i, x, m);
        map2_into_a(acc, static_cast<const float*>(x), m, combine_f32);
      }
      narrow(acc, dst + i, m);
    }
  } else {
    using F = Fold<kOp, T>;
    alignas(64) Compute<T> acc[kStage];
    for (size_t i = 0; i < count; i += kStage) {
      const size_t m = block_size(i, count);
      const T* last = srcs[n - 1] + i;
      map2_disjoint(acc, srcs[0] + i, srcs[1] + i, m, typename F::First{});
      for (int k = 2; k < n - 1; ++k) map2_into_a(acc, srcs[k] + i, m, typename F::Middle{});
      // The last step writes dst, which may be the last source (its own loop shape) or an earlier
      // one whose block has already been consumed.
      if (dst + i == last)
        map2_into_b(static_cast<const Compute<T>*>(acc), dst + i, m, typename F::Last{});
      else
        map2_disjoint(dst + i, static_cast<const Compute<T>*>(acc), last, m, typename F::Last{});
    }
  }
}

}  // namespace

void reduce(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count) {
  visit_dtype(dtype, [&]<class T>(Type<T>) {
    visit_op(op, [&]<ReduceOp kOp>(Op<kOp>) {
      reduce_typed<kOp>(static_cast<T*>(dst), static_cast<const T*>(a), static_cast<const T*>(b),
                        count);
    });
  });
}

// Stores one 64-byte line of results, just computed into `line` (still in L1), past the caches.
inline void stream_line(void* dst, const void* line) {
#if defined(__AVX512F__)
  _mm512_stream_si512(static_cast<__m512i*>(dst), _mm512_load_si512(line));
#elif defined(__AVX2__)
  const auto* s = static_cast<const __m256i*>(line);
  auto* d = static_cast<__m256i*>(dst);
  _mm256_stream_si256(d, _mm256_load_si256(s));
  _mm256_stream_si256(d + 1, _mm256_load_si256(s + 1));
#else
  const auto* s = static_cast<const __m128i*>(line);
  auto* d = static_cast<__m128i*>(dst);
  for (int k = 0; k < 4; ++k) _mm_stream_si128(d + k, _mm_load_si128(s + k));
#endif
}

// dst[i] = a[i] op b[i], streamed; also[i] (when not null) the same, with ordinary stores.
template <ReduceOp kOp, class T>
void reduce_stream_typed(T* dst, T* also, const T* a, const T* b, size_t count) {
  constexpr size_t kLine = 64 / sizeof(T);
  const Fold<kOp, T> f;
  const auto one = [&](size_t i) {
    const T r = f(a[i], b[i]);
    dst[i] = r;
    if (also != nullptr) also[i] = r;
  };
  // Ordinary stores up to the first 64-byte aligned result (T's alignment divides 64).
  size_t i = 0;
  for (; i < count && reinterpret_cast<uintptr_t>(dst + i) % 64 != 0; ++i) one(i);
  for (; i + kLine <= count; i += kLine) {
    alignas(64) T line[kLine];
    map2_disjoint(line, a + i, b + i, kLine, f);
    stream_line(dst + i, line);
    if (also != nullptr) std::memcpy(also + i, line, sizeof line);
  }
  for (; i < count; ++i) one(i);
  _mm_sfence();
}

// Out of cache an ordinary store first reads its line (read for ownership): a + b then moves four
// streams where three are needed. Each line of results here is computed and stored past the
// caches in one pass, so the inputs' reads never pause (computing 8 KiB into L1 and streaming it
// from there measured 14.9 against 19-21 GB/s for this loop, f32 sum 256 MiB). f16 and bf16 are
// bound by their conversions, not by memory: streamed, a line or a block at a time, they ran
// slower than reduce() on every instruction set (bf16 256 MiB 4.4-10.6 against 7.8-11.1 GB/s),
// so they take reduce()'s ordinary stores.
void reduce_stream(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b,
                   size_t count, void* also) {
  visit_dtype(dtype, [&]<class T>(Type<T>) {
    visit_op(op, [&]<ReduceOp kOp>(Op<kOp>) {
      const auto* x = static_cast<const T*>(a);
      const auto* y = static_cast<const T*>(b);
      if constexpr (kIs16BitFloat<T>) {
        if (also == nullptr) {
          reduce_typed<kOp>(static_cast<T*>(dst), x, y, count);
        } else {
          reduce_typed<kOp>(static_cast<T*>(also), x, y, count);
          std::memcpy(dst, also, count * sizeof(T));
        }
      } else {
        reduce_stream_typed<kOp>(static_cast<T*>(dst), static_cast<T*>(also), x, y, count);
      }
    });
  });
}

void reduce_n(DataType dtype, ReduceOp op, void* dst, const void* const* srcs, int n,
              size_t count) {
  if (n == 1) {
    // One input: nothing to combine or round, just its bits.
    if (dst != srcs[0]) std::memmove(dst, srcs[0], count * dtype_size(dtype));
    return;
  }
  visit_dtype(dtype, [&]<class T>(Type<T>) {
    const T* const* typed = reinterpret_cast<const T* const*>(srcs);
    visit_op(op, [&]<ReduceOp kOp>(Op<kOp>) {
      if (n == 2)
        reduce_typed<kOp>(static_cast<T*>(dst), typed[0], typed[1], count);
      else
        reduce_n_typed<kOp>(static_cast<T*>(dst), typed, n, count);
    });
  });
}

}  // namespace chorus::kernels::detail::CHORUS_KERNELS_ISA_NS
