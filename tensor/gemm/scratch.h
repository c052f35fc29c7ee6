// Internal: a 64-byte aligned, growable scratch buffer for packed GEMM operands. Used as a
// thread_local, one per thread, freed at thread exit; contents are not preserved on growth.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>

namespace chorus::tensor::gemm_impl {

template <class T>
class Scratch {
 public:
  T* get(size_t count) {
    if (count > size_) {
      data_.reset(static_cast<T*>(std::aligned_alloc(64, (count * sizeof(T) + 63) / 64 * 64)));
      if (!data_) throw std::bad_alloc();
      size_ = count;
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data_;
  size_t size_ = 0;
};

}  // namespace chorus::tensor::gemm_impl
