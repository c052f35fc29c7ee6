// chorus — a grid of ranks: named axes, how ranks are numbered over them, and the traffic along
// each. What the axes mean (data, tensor, pipeline parallelism, ...) is the caller's business;
// placement (placement.h) only needs each axis's size, weight and communication pattern.
//
// Numbering. Axes are listed fastest-varying first, and that order numbers the ranks: with axes
// a0, a1, a2 of sizes s0, s1, s2,
//   rank = c0 + s0 * (c1 + s1 * c2)
// Coordinates are vectors indexed like `axes`.
//
// Groups. The ranks that differ only in their coordinate along axis a form one group of a; every
// group of a moves `weight` (relative bytes per step) in the axis's pattern: a ring collective
// (all-reduce, all-gather) or a chain between neighbours (pipeline stages).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace chorus::topo {

struct GridAxis {
  enum class Pattern : uint8_t {
    kRing,   // a ring collective over the group: runs at its slowest link
    kChain,  // neighbour to neighbour (0-1, 1-2, ...): every link carries the traffic
  };
  std::string name;   // "tp"; names the axis in layouts and errors
  int size = 1;       // ranks along the axis
  double weight = 1;  // relative bytes per step that each group of this axis moves
  Pattern pattern = Pattern::kRing;
};

struct Grid {
  std::vector<GridAxis> axes;  // fastest-varying first: the rank numbering

  int world_size() const;
  // The coordinate of `rank` (one entry per axis) and the reverse. Throw InvalidArgument for a
  // rank or coordinate outside the grid.
  std::vector<int> coord_of(int rank) const;
  int rank_of(std::span<const int> coord) const;
};

// "tp=4,dp=2,pp=2": the axes in grid order.
std::string to_string(const Grid& grid);

}  // namespace chorus::topo
