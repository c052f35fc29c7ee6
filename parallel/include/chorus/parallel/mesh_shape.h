// chorus::parallel — the shape of a device mesh: axis sizes, their order, and the arithmetic
// between mesh ranks and coordinates (mesh.h explains what the axes are).
//
// Mesh ranks. A mesh numbers its ranks by an axis order, fastest-varying axis first. The
// default, "tp-dp-pp", is Megatron-LM's: the ranks of one tensor-parallel group are consecutive,
// then data-parallel replicas, and pipeline stages are the slowest axis:
//   rank = tp_index + tp * (dp_index + dp * pp_index)
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace chorus::parallel {

enum class Axis : uint8_t { kTp, kDp, kPp };
std::string_view to_string(Axis axis);  // "tp", "dp", "pp"

struct MeshCoord {
  int dp = 0;
  int tp = 0;
  int pp = 0;
  int operator[](Axis axis) const;
  int& operator[](Axis axis);
};

struct MeshShape {
  int dp = 1;
  int tp = 1;
  int pp = 1;
  std::array<Axis, 3> order = {Axis::kTp, Axis::kDp, Axis::kPp};  // fastest-varying first

  int world_size() const { return dp * tp * pp; }
  int size(Axis axis) const;
  MeshCoord coord_of(int rank) const;
  int rank_of(const MeshCoord& coord) const;
  std::string order_string() const;  // "tp-dp-pp"
};

// Parses "dp=2,tp=4,pp=2" with an optional ",order=tp-pp-dp"; axes left out are 1. Throws
// chorus::InvalidArgument naming the bad part.
MeshShape parse_mesh(std::string_view text);

}  // namespace chorus::parallel
