// chorus — what the Communicator's typed forms accept as a buffer: any contiguous, sized range of
// one of chorus's element types (float, double, Half, BFloat16, int8_t, uint8_t, int32_t,
// int64_t), e.g. std::vector<T>, std::array<T, N>, std::span<T> or std::span<const T>. An input
// may be const; an output may not. The DataType comes from the element type (kDataTypeOf).
#pragma once

#include <concepts>
#include <cstddef>
#include <ranges>
#include <type_traits>

#include "chorus/half.h"
#include "chorus/types.h"

namespace chorus {

// The element type of a buffer (const removed): float for std::span<const float>.
template <class R>
using BufferElement = std::ranges::range_value_t<R>;

// A buffer a call reads.
template <class R>
concept InputBuffer = std::ranges::contiguous_range<R> && std::ranges::sized_range<R> && requires {
  DataTypeOf<BufferElement<R>>::value;
};

// A buffer a call writes: its elements are not const.
template <class R>
concept OutputBuffer =
    InputBuffer<R> && !std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>;

// Two buffers of one call hold the same element type.
template <class A, class B>
concept SameElement = std::same_as<BufferElement<A>, BufferElement<B>>;

namespace detail {
template <class R>
size_t buffer_size(R&& r) {
  return static_cast<size_t>(std::ranges::size(r));
}
}  // namespace detail

}  // namespace chorus
