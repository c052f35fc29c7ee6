// chorus — "did you mean": the candidate nearest to a mistyped name, for every program's usage
// errors (chorus-train's and chorus-plan's flags and presets).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace chorus {

// Levenshtein distance: the fewest single-character insertions, deletions and substitutions
// that turn a into b.
size_t edit_distance(std::string_view a, std::string_view b);

struct NearestName {
  std::string name;     // empty when there was no candidate
  size_t distance = 0;  // its edit distance to the name asked about (SIZE_MAX: no candidate)
};

// The candidate nearest to `name` by edit distance (the first of equals); `candidates` is any
// range of strings.
template <class Range>
NearestName nearest_name(std::string_view name, const Range& candidates) {
  NearestName best{{}, static_cast<size_t>(-1)};
  for (const auto& c : candidates)
    if (const size_t d = edit_distance(name, c); d < best.distance) best = {std::string(c), d};
  return best;
}

}  // namespace chorus
