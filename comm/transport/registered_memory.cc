// chorus — registered device memory (registered_memory.h).
#include "transport/registered_memory.h"

#include <algorithm>

#include "chorus/error.h"

namespace chorus::transport {

void RegisteredRanges::add(const void* base, size_t bytes) {
  const auto begin = reinterpret_cast<uintptr_t>(base);
  CHORUS_ARG_CHECK(base != nullptr && bytes > 0, "register_device_memory: an empty range (pointer ",
                   base, ", ", bytes, " bytes) cannot be registered");
  const uintptr_t end = begin + bytes;
  for (const auto& [b, e] : ranges_)
    CHORUS_ARG_CHECK(end <= b || begin >= e, "register_device_memory: [", base, ", +", bytes,
                     ") overlaps the registered [", reinterpret_cast<const void*>(b), ", +", e - b,
                     ")");
  ranges_.emplace_back(begin, end);
  std::sort(ranges_.begin(), ranges_.end());
}

bool RegisteredRanges::remove(const void* base) {
  const auto begin = reinterpret_cast<uintptr_t>(base);
  return std::erase_if(ranges_, [&](const auto& r) { return r.first == begin; }) > 0;
}

bool RegisteredRanges::contains(const void* ptr, size_t bytes) const {
  const auto begin = reinterpret_cast<uintptr_t>(ptr);
  // The last range starting at or before ptr.
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(),
                             std::pair<uintptr_t, uintptr_t>(begin, UINTPTR_MAX));
  if (it == ranges_.begin()) return false;
  --it;
  return begin < it->second && bytes <= it->second - begin;
}

}  // namespace chorus::transport
