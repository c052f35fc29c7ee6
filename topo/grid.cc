#include "chorus/topo/grid.h"

#include "chorus/error.h"

namespace chorus::topo {

int Grid::world_size() const {
  int n = 1;
  for (const GridAxis& a : axes) n *= a.size;
  return n;
}

std::vector<int> Grid::coord_of(int rank) const {
  CHORUS_ARG_CHECK(rank >= 0 && rank < world_size(), "rank ", rank, " outside the grid ",
                   to_string(*this), " of ", world_size(), " ranks");
  std::vector<int> c(axes.size());
  for (size_t i = 0; i < axes.size(); ++i) {
    c[i] = rank % axes[i].size;
    rank /= axes[i].size;
  }
  return c;
}

int Grid::rank_of(std::span<const int> coord) const {
  CHORUS_ARG_CHECK(coord.size() == axes.size(), "a coordinate of ", coord.size(),
                   " entries for the grid ", to_string(*this), " of ", axes.size(), " axes");
  int rank = 0;
  for (size_t i = axes.size(); i-- > 0;) {
    CHORUS_ARG_CHECK(coord[i] >= 0 && coord[i] < axes[i].size, "coordinate ", coord[i],
                     " outside axis ", axes[i].name, " of size ", axes[i].size);
    rank = rank * axes[i].size + coord[i];
  }
  return rank;
}

std::string to_string(const Grid& grid) {
  std::string out;
  for (const GridAxis& a : grid.axes)
    out += (out.empty() ? "" : ",") + a.name + "=" + std::to_string(a.size);
  return out;
}

}  // namespace chorus::topo
