// chorus — GPU cast between any two DataTypes: one map_kernel instantiation per (dst, src) pair
// (56 pairs; equal types never get here, api.cc turns them into copies). A pack holds 16 bytes of
// the narrower type, so both sides move in whole 16-byte words.
#include "map.cuh"

namespace chorus::kernels::gpu::detail {
namespace {

template <class D, class S>
struct CastTo {
  using Acc = D;
  CHORUS_DEVICE D first(S x) const { return cast_element<D>(x); }
  CHORUS_DEVICE D next(D acc, S) const { return acc; }  // one source only
  CHORUS_DEVICE D last(D acc) const { return acc; }
};

}  // namespace

void launch_cast(DataType dst_type, void* dst, DataType src_type, const void* src, size_t count,
                 chorus::gpu::Stream stream) {
  visit_dtype(dst_type, [&]<class D>(Type<D>) {
    visit_dtype(src_type, [&]<class S>(Type<S>) {
      if constexpr (!std::is_same_v<D, S>) {
        const void* srcs[1] = {src};
        launch_map<D, S>(static_cast<D*>(dst), srcs, 1, count, CastTo<D, S>{}, stream,
                         "gpu cast kernel");
      }
    });
  });
}

}  // namespace chorus::kernels::gpu::detail
