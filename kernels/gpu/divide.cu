// chorus — GPU divide, the last step of kAvg. Floats divide in their own precision (16-bit floats
// in f32, rounded once), with IEEE division (the build never enables fast math). Integers truncate
// toward zero: the quotient is computed in 64 bits, where only INT64_MIN / -1 overflows, so that
// one case negates with wrap-around instead, exactly as the CPU kernel's result.
#include "map.cuh"

namespace chorus::kernels::gpu::detail {
namespace {

template <class T>
struct DivideBy {
  using Acc = Compute<T>;
  int64_t divisor;
  CHORUS_DEVICE Acc first(T x) const {
    if constexpr (std::is_integral_v<T>) {
      if (divisor == -1) {
        using U = std::make_unsigned_t<T>;
        return static_cast<T>(U{0} - static_cast<U>(x));
      }
      return static_cast<T>(static_cast<int64_t>(x) / divisor);
    } else {
      return load_element(x) / static_cast<Acc>(divisor);
    }
  }
  CHORUS_DEVICE Acc next(Acc acc, T) const { return acc; }  // one source only
  CHORUS_DEVICE T last(Acc acc) const { return store_element<T>(acc); }
};

}  // namespace

void launch_divide(DataType dtype, void* dst, const void* src, size_t count, int64_t divisor,
                   chorus::gpu::Stream stream) {
  visit_dtype(dtype, [&]<class T>(Type<T>) {
    const void* srcs[1] = {src};
    launch_map<T, T>(static_cast<T*>(dst), srcs, 1, count, DivideBy<T>{divisor}, stream,
                     "gpu divide kernel");
  });
}

}  // namespace chorus::kernels::gpu::detail
