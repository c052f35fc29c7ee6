#include "chorus/parallel/no_sync.h"

namespace chorus::parallel {

NoSync::NoSync(int* depth) : depth_(depth) { ++*depth_; }
NoSync::NoSync(NoSync&& other) noexcept : depth_(other.depth_) { other.depth_ = nullptr; }
NoSync::~NoSync() {
  if (depth_ != nullptr) --*depth_;
}

}  // namespace chorus::parallel
