#include "chorus/dynamic_library.h"

#include <dlfcn.h>

#include <utility>

namespace chorus {

DynamicLibrary::DynamicLibrary(std::initializer_list<const char*> sonames) {
  open(sonames, RTLD_NOW | RTLD_LOCAL);
}

DynamicLibrary DynamicLibrary::find_loaded(std::initializer_list<const char*> sonames) {
  DynamicLibrary lib;
  lib.open(sonames, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  return lib;
}

void DynamicLibrary::open(std::initializer_list<const char*> sonames, int flags) {
  for (const char* so : sonames) {
    handle_ = ::dlopen(so, flags);
    if (handle_ != nullptr) {
      soname_ = so;
      error_.clear();
      return;
    }
    const char* why = ::dlerror();
    if (!error_.empty()) error_ += "; ";
    error_ += why != nullptr ? why : std::string(so) + ": not loaded";
  }
  if (sonames.size() == 0) error_ = "no library named";
}

DynamicLibrary::DynamicLibrary(DynamicLibrary&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)),
      soname_(std::move(other.soname_)),
      error_(std::move(other.error_)) {}

DynamicLibrary& DynamicLibrary::operator=(DynamicLibrary&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) ::dlclose(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    soname_ = std::move(other.soname_);
    error_ = std::move(other.error_);
  }
  return *this;
}

DynamicLibrary::~DynamicLibrary() {
  if (handle_ != nullptr) ::dlclose(handle_);
}

void* DynamicLibrary::address(const char* name) const noexcept {
  return handle_ != nullptr ? ::dlsym(handle_, name) : nullptr;
}

}  // namespace chorus
