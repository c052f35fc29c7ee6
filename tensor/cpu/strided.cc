#include "cpu/strided.h"

#include <cstring>

#include "cpu/dispatch.h"

namespace chorus::tensor {

void strided_copy(const Tensor& dst, const Tensor& src, bool accumulate) {
  CHORUS_ARG_CHECK(dst.shape() == src.shape(), "copy: shape ", to_string(dst.shape()), " vs ",
                   to_string(src.shape()));
  if (!accumulate && dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    std::memcpy(dst.data_ptr(), src.data_ptr(), dst.nbytes());
    return;
  }
  dispatch_any(dst.dtype(), "copy", [&](auto d_tag) {
    using D = decltype(d_tag);
    dispatch_any(src.dtype(), "copy", [&](auto s_tag) {
      using S = decltype(s_tag);
      D* d = static_cast<D*>(dst.data_ptr());
      const S* s = static_cast<const S*>(src.data_ptr());
      // Integers travel through int64 / double as appropriate; floats through double only
      // when either side is f64 (f32 and 16-bit formats convert exactly through float).
      using Acc = std::conditional_t<
          std::is_integral_v<D> && std::is_integral_v<S>, int64_t,
          std::conditional_t<std::is_same_v<D, double> || std::is_same_v<S, double> ||
                                 std::is_integral_v<D> || std::is_integral_v<S>,
                             double, float>>;
      for_each_row2(dst.shape(), dst.strides(), src.strides(),
                    [&](int64_t od, int64_t os, int64_t n, int64_t id, int64_t is) {
                      D* dr = d + od;
                      const S* sr = s + os;
                      if (accumulate) {
                        for (int64_t i = 0; i < n; ++i)
                          dr[i * id] =
                              store_as<D>(load_as<Acc>(dr[i * id]) + load_as<Acc>(sr[i * is]));
                      } else {
                        for (int64_t i = 0; i < n; ++i)
                          dr[i * id] = store_as<D>(load_as<Acc>(sr[i * is]));
                      }
                    });
    });
  });
}

}  // namespace chorus::tensor
