#include "chorus/tensor/serialize.h"

#include <cstdio>
#include <cstring>
#include <fstream>

#include "chorus/error.h"

namespace chorus::tensor {
namespace {

constexpr char kMagic[8] = {'C', 'H', 'R', 'S', 'T', 'N', 'S', 'R'};
constexpr uint32_t kVersion = 1;

template <class V>
void put(std::ofstream& f, V v) {
  f.write(reinterpret_cast<const char*>(&v), sizeof(v));
}

template <class V>
V get(std::ifstream& f, const std::string& path) {
  V v;
  f.read(reinterpret_cast<char*>(&v), sizeof(v));
  CHORUS_ARG_CHECK(f.good(), "load_tensors(", path, "): truncated file");
  return v;
}

}  // namespace

void save_tensors(const std::string& path, const nn::NamedTensors& tensors) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw_system_error("open " + tmp, errno);
    f.write(kMagic, sizeof(kMagic));
    put<uint32_t>(f, kVersion);
    put<uint64_t>(f, tensors.size());
    for (const auto& [name, t] : tensors) {
      // Files hold host bytes: a GPU tensor is copied to the host first.
      const Tensor host = t.device().is_cpu() ? t : t.detach().to(Device::cpu());
      const Tensor dense = host.is_contiguous() ? host : host.detach().contiguous();
      put<uint32_t>(f, static_cast<uint32_t>(name.size()));
      f.write(name.data(), static_cast<std::streamsize>(name.size()));
      put<uint8_t>(f, static_cast<uint8_t>(dense.dtype()));
      put<uint32_t>(f, static_cast<uint32_t>(dense.dim()));
      for (int64_t d : dense.shape()) put<int64_t>(f, d);
      put<uint64_t>(f, dense.nbytes());
      f.write(static_cast<const char*>(dense.data_ptr()),
              static_cast<std::streamsize>(dense.nbytes()));
    }
    f.flush();
    if (!f) throw_system_error("write " + tmp, errno);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw_system_error("rename " + tmp, errno);
}

nn::NamedTensors load_tensors(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw_system_error("open " + path, errno);
  char magic[8];
  f.read(magic, sizeof(magic));
  CHORUS_ARG_CHECK(f.good() && std::memcmp(magic, kMagic, sizeof(kMagic)) == 0, "load_tensors(",
                   path, "): not a chorus tensor file");
  const auto version = get<uint32_t>(f, path);
  CHORUS_ARG_CHECK(version == kVersion, "load_tensors(", path, "): version ", version,
                   ", expected ", kVersion);
  const auto count = get<uint64_t>(f, path);
  nn::NamedTensors out;
  for (uint64_t i = 0; i < count; ++i) {
    const auto len = get<uint32_t>(f, path);
    CHORUS_ARG_CHECK(len < (1u << 16), "load_tensors(", path, "): bad name length");
    std::string name(len, '\0');
    f.read(name.data(), len);
    const auto dtype = static_cast<DataType>(get<uint8_t>(f, path));
    CHORUS_ARG_CHECK(is_valid(dtype), "load_tensors(", path, "): bad dtype for ", name);
    const auto ndim = get<uint32_t>(f, path);
    CHORUS_ARG_CHECK(ndim <= 16, "load_tensors(", path, "): bad rank for ", name);
    Shape shape(ndim);
    for (auto& d : shape) d = get<int64_t>(f, path);
    const auto bytes = get<uint64_t>(f, path);
    Tensor t = Tensor::empty(shape, dtype);
    CHORUS_ARG_CHECK(bytes == t.nbytes(), "load_tensors(", path, "): ", name, " has ", bytes,
                     " bytes for shape ", to_string(shape));
    f.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(bytes));
    CHORUS_ARG_CHECK(f.good(), "load_tensors(", path, "): truncated in ", name);
    out.emplace_back(std::move(name), std::move(t));
  }
  return out;
}

}  // namespace chorus::tensor
