// chorus — reduce and reduce_n for one instruction set (see isa.h).
//
// Every element is loaded into its arithmetic type, combined and stored (element_ops.h); the
// loops are plain element-wise code that the compiler vectorises, bf16 conversions included. f16
// is the exception: it is widened kStage elements at a time into f32 blocks that stay in L1,
// combined there and narrowed once per output element. reduce_n folds left through an
// accumulator block, so each source is read once from memory and dst is written once.
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
