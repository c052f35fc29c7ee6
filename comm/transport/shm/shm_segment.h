// chorus — an RAII POSIX shared-memory segment: created (O_EXCL) or opened, mapped, unlinked.
#pragma once

#include <cstddef>
#include <string>

#include "chorus/error.h"

namespace chorus::transport {

// ShmSegment::create found the name taken (another job with the same names, or a leftover).
class ShmSegmentExists : public Error {
 public:
  explicit ShmSegmentExists(std::string message)
      : Error(ErrorKind::kInvalidArgument, std::move(message)) {}
};

class ShmSegment {
 public:
  ShmSegment() = default;
  // Creates /name with `bytes` bytes (zero-filled) and maps it. Throws a chorus::Error that says
  // how much /dev/shm space is needed when the file system is too small, ShmSegmentExists when
  // the name is taken.
  static ShmSegment create(const std::string& name, size_t bytes);
  // Opens and maps an existing segment created by another process.
  static ShmSegment open(const std::string& name, size_t bytes);
  ~ShmSegment();
  ShmSegment(ShmSegment&& o) noexcept { *this = std::move(o); }
  ShmSegment& operator=(ShmSegment&& o) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // Removes the name (the mapping stays valid); idempotent.
  void unlink();
  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  void* data_ = nullptr;
  size_t size_ = 0;
  bool owner_ = false;  // created here: unlink on destruction if still linked
  bool linked_ = false;
};

}  // namespace chorus::transport
