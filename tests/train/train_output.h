// What the chorus-train end-to-end tests read back (tests/train, tests/train_gpu): the losses and
// gradient norms a run prints, and a file's bytes (exported checkpoints, logs).
#pragma once

#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <string>

namespace chorus::testing {

// The losses of the "step N loss L" lines, by step.
inline std::map<int, double> losses(const std::string& out) {
  std::map<int, double> v;
  const std::regex re("step ([0-9]+) loss ([-0-9.eE+]+)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator();
       ++it)
    v[std::stoi((*it)[1].str())] = std::stod((*it)[2].str());
  return v;
}

// The gradient norms of the same lines (printed to 3 decimals), by step.
inline std::map<int, double> grad_norms(const std::string& out) {
  std::map<int, double> v;
  const std::regex re("step ([0-9]+) loss [-0-9.eE+]+ grad_norm ([-0-9.eE+]+)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator();
       ++it)
    v[std::stoi((*it)[1].str())] = std::stod((*it)[2].str());
  return v;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

}  // namespace chorus::testing
