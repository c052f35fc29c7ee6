#include "algo/tune_update.h"

#include <algorithm>
#include <sstream>

namespace chorus::algo {

void fit_non_decreasing(std::vector<TuneTable::Point>& curve) {
  struct Block {
    double sum;
    int n;
  };
  std::vector<Block> blocks;
  for (const auto& p : curve) {
    blocks.push_back({p.us, 1});
    while (blocks.size() > 1 && blocks[blocks.size() - 2].sum / blocks[blocks.size() - 2].n >
                                    blocks.back().sum / blocks.back().n) {
      blocks[blocks.size() - 2].sum += blocks.back().sum;
      blocks[blocks.size() - 2].n += blocks.back().n;
      blocks.pop_back();
    }
  }
  size_t i = 0;
  for (const Block& b : blocks)
    for (int k = 0; k < b.n; ++k) curve[i++].us = b.sum / b.n;
}

bool TuneRun::replaces(int np, Collective coll, std::string_view variant) const {
  return np == world_size && std::find(colls.begin(), colls.end(), coll) != colls.end() &&
         (variants.empty() ||
          std::find(variants.begin(), variants.end(), variant) != variants.end());
}

std::string merge_tune_text(std::string_view old_text, const TuneTable& measured,
                            const TuneRun& run) {
  std::string kept;
  std::istringstream old{std::string(old_text)};
  std::string line;
  while (std::getline(old, line)) {
    std::istringstream f(line);
    int np = 0;
    if (line.empty() || line[0] == '#' || !(f >> np)) continue;
    std::string coll, variant;
    f >> coll >> variant;
    if (coll.ends_with("/in-place"))
      coll.resize(coll.size() - std::string_view("/in-place").size());
    bool replaced = false;
    for (Collective c : run.colls) replaced |= coll == to_string(c) && run.replaces(np, c, variant);
    if (!replaced) kept += line + "\n";
  }
  return kept + measured.format();
}

}  // namespace chorus::algo
