// chorus — GPU reduce and reduce_n: one map_kernel instantiation per (dtype, op), with the number
// of sources a run-time argument. 16-bit floats fold in an f32 accumulator and round once, like the
// CPU kernels; kAvg folds as kSum (divide.cu finishes it).
#include "map.cuh"

namespace chorus::kernels::gpu::detail {
namespace {

template <ReduceOp kOp, class T>
struct ReduceOpFold {
  using Acc = Compute<T>;
  CHORUS_DEVICE Acc first(T x) const { return load_element(x); }
  CHORUS_DEVICE Acc next(Acc acc, T x) const { return combine<kOp>(acc, load_element(x)); }
  CHORUS_DEVICE T last(Acc acc) const { return store_element<T>(acc); }
};

template <ReduceOp kOp, class T>
void launch_typed(void* dst, const void* const* srcs, int n, size_t count,
                  chorus::gpu::Stream stream) {
  launch_map<T, T>(static_cast<T*>(dst), srcs, n, count, ReduceOpFold<kOp, T>{}, stream,
                   "gpu reduce kernel");
}

}  // namespace

void launch_reduce(DataType dtype, ReduceOp op, void* dst, const void* const* srcs, int n,
                   size_t count, chorus::gpu::Stream stream) {
  visit_dtype(dtype, [&]<class T>(Type<T>) {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        return launch_typed<ReduceOp::kSum, T>(dst, srcs, n, count, stream);
      case ReduceOp::kProd:
        return launch_typed<ReduceOp::kProd, T>(dst, srcs, n, count, stream);
      case ReduceOp::kMin:
        return launch_typed<ReduceOp::kMin, T>(dst, srcs, n, count, stream);
      case ReduceOp::kMax:
        return launch_typed<ReduceOp::kMax, T>(dst, srcs, n, count, stream);
      default:
        break;
    }
  });
}

}  // namespace chorus::kernels::gpu::detail
