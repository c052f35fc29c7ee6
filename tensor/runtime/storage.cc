#include "chorus/tensor/storage.h"

#include "backend/backend.h"

namespace chorus::tensor {

Storage::Storage(size_t bytes, Device device)
    : bytes_(bytes), device_(device), backend_(&backend_for(device)) {
  reallocate();
}

Storage::~Storage() { release(); }

void Storage::release() {
  if (data_ == nullptr) return;
  backend_->deallocate(data_, bytes_);
  data_ = nullptr;
}

void Storage::reallocate() {
  if (data_ != nullptr) return;
  data_ = backend_->allocate(bytes_);
}

MemoryStats memory_stats(Device device) { return backend_for(device).memory_stats(); }

void empty_cache(Device device) { backend_for(device).empty_cache(); }

void reset_peak_memory(Device device) { backend_for(device).reset_peak_memory(); }

}  // namespace chorus::tensor
