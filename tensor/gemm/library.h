// Internal: a library opened at run time (dlopen), for the GEMM backends in gemm/.
#pragma once

#include <dlfcn.h>

#include <initializer_list>
#include <string>

namespace chorus::tensor::gemm_impl {

// RAII for a dlopen handle.
class Library {
 public:
  Library() = default;
  ~Library() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  // Opens the first soname that loads; false when none does.
  bool open(std::initializer_list<const char*> sonames) {
    for (const char* so : sonames) {
      handle_ = dlopen(so, RTLD_NOW | RTLD_LOCAL);
      if (handle_ != nullptr) {
        soname_ = so;
        return true;
      }
    }
    return false;
  }
  template <class Fn>
  Fn symbol(const char* name) const {
    return handle_ ? reinterpret_cast<Fn>(dlsym(handle_, name)) : nullptr;
  }
  const std::string& soname() const { return soname_; }

 private:
  void* handle_ = nullptr;
  std::string soname_;
};

// omp_set_num_threads of the OpenMP runtime a library already loaded (oneDNN's), or nullptr.
// No new load: RTLD_NOLOAD.
inline auto loaded_omp_set_num_threads() -> void (*)(int) {
  for (const char* so : {"libgomp.so.1", "libiomp5.so", "libomp.so.5", "libomp.so"}) {
    if (void* h = dlopen(so, RTLD_NOW | RTLD_NOLOAD)) {
      auto fn = reinterpret_cast<void (*)(int)>(dlsym(h, "omp_set_num_threads"));
      dlclose(h);  // still loaded: the library that pulled it in holds it
      if (fn) return fn;
    }
  }
  return nullptr;
}

}  // namespace chorus::tensor::gemm_impl
