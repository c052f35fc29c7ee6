// chorus — device memory an application registered (Communicator::register_device_memory,
// docs/GPU.md "Buffer lifetime"): address ranges that do not overlap. The communicator keeps the
// registrations; a transport that maps peers' device memory keeps a copy to decide which messages
// go zero copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace chorus::transport {

class RegisteredRanges {
 public:
  // Adds [base, base + bytes); refuses (InvalidArgument) an empty range or one overlapping
  // another.
  void add(const void* base, size_t bytes);
  // Removes the range starting at `base`; false when there is none.
  bool remove(const void* base);
  // Whether [ptr, ptr + bytes) lies inside one range.
  bool contains(const void* ptr, size_t bytes) const;
  bool empty() const { return ranges_.empty(); }

 private:
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges_;  // [begin, end), sorted by begin
};

}  // namespace chorus::transport
