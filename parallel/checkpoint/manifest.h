// Internal: a checkpoint's manifest (checkpoint.h describes the layout) and its JSON form.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "chorus/tensor/tensor.h"

namespace chorus::parallel {

struct Entry {
  std::string name;  // the logical tensor's name ("h.0.mlp.c_fc.weight")
  std::string kind;  // "param", "exp_avg", "exp_avg_sq", "master"
  DataType dtype = DataType::kF32;
  tensor::Shape shape;                            // the full tensor's
  std::vector<std::pair<int64_t, int64_t>> runs;  // (begin, length) of its elements, in order
  uint64_t offset = 0, bytes = 0;                 // where the bytes lie in the file
  uint64_t fnv = 0;                               // FNV-1a 64 of the bytes
};

struct FileInfo {
  std::string file;  // relative to the checkpoint directory
  uint64_t bytes = 0;
  std::vector<Entry> entries;
};

struct Manifest {
  int64_t step = 0;
  std::map<std::string, double> scalars;
  std::map<std::string, int64_t> model;  // vocab, context, layers, heads, width
  std::string mesh;
  std::vector<FileInfo> files;
};

uint64_t fnv1a(const void* data, size_t bytes, uint64_t h = 1469598103934665603ull);

std::string to_json(const Manifest& m);
std::string to_json(const FileInfo& f);
// Throws InvalidArgument naming `where` and what is malformed.
Manifest parse_manifest(const std::string& text, const std::string& where);
FileInfo parse_file_info(const std::string& text, const std::string& where);

}  // namespace chorus::parallel
