#include "common/gather_strings.h"

#include <algorithm>

namespace chorus::parallel {

std::vector<std::string> gather_strings(Communicator& world, const std::string& mine) {
  const int n = world.size();
  const int64_t len = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lens(static_cast<size_t>(n));
  world.all_gather(&len, lens.data(), 1, DataType::kI64);
  const size_t width = static_cast<size_t>(*std::max_element(lens.begin(), lens.end()));
  std::string padded = mine;
  padded.resize(width);
  std::string all(width * static_cast<size_t>(n), '\0');
  world.all_gather(padded.data(), all.data(), width, DataType::kU8);
  std::vector<std::string> out;
  for (int r = 0; r < n; ++r)
    out.push_back(all.substr(static_cast<size_t>(r) * width,
                             static_cast<size_t>(lens[static_cast<size_t>(r)])));
  return out;
}

}  // namespace chorus::parallel
