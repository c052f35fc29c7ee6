// chorus — a shared library opened at run time (dlopen): the one wrapper chorus uses for
// libraries it does not link (oneDNN, OpenBLAS, an OpenMP runtime), so a chorus binary runs on
// machines that lack them and asks at run time what is there.
//
// A library opens the first of a list of sonames that loads (alternatives such as
// "libopenblas.so.0", "libopenblas.so"), with RTLD_NOW | RTLD_LOCAL: its symbols are resolved at
// once and serve no other library. An empty one (none loaded) says why in error(): each soname
// tried with the loader's dlerror text. Closed at destruction; the loader keeps it mapped while
// anything else still holds it.
#pragma once

#include <initializer_list>
#include <string>

namespace chorus {

class DynamicLibrary {
 public:
  DynamicLibrary() = default;
  // Opens the first of `sonames` that loads; empty, with error() saying why, when none does.
  explicit DynamicLibrary(std::initializer_list<const char*> sonames);
  // The first of `sonames` already loaded in this process (RTLD_NOLOAD: nothing new is loaded),
  // for reaching a library another one pulled in; empty when none is.
  static DynamicLibrary find_loaded(std::initializer_list<const char*> sonames);

  DynamicLibrary(DynamicLibrary&& other) noexcept;
  DynamicLibrary& operator=(DynamicLibrary&& other) noexcept;
  DynamicLibrary(const DynamicLibrary&) = delete;
  DynamicLibrary& operator=(const DynamicLibrary&) = delete;
  ~DynamicLibrary();

  bool loaded() const noexcept { return handle_ != nullptr; }
  explicit operator bool() const noexcept { return loaded(); }

  // The symbol `name` as a pointer of type Fn (a function pointer type), or nullptr when the
  // library is empty or lacks it.
  template <class Fn>
  Fn symbol(const char* name) const noexcept {
    return reinterpret_cast<Fn>(address(name));
  }
  void* address(const char* name) const noexcept;

  // The soname that loaded; empty when none did.
  const std::string& soname() const noexcept { return soname_; }
  // Why nothing loaded: "libfoo.so.1: cannot open shared object file ...; libfoo.so: ..."; empty
  // once a library is loaded.
  const std::string& error() const noexcept { return error_; }

 private:
  void open(std::initializer_list<const char*> sonames, int flags);

  void* handle_ = nullptr;
  std::string soname_;
  std::string error_;
};

}  // namespace chorus
