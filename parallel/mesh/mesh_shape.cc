// MeshShape: axis names, the rank <-> coordinate arithmetic and the --mesh text form.
#include "chorus/parallel/mesh_shape.h"

#include <charconv>
#include <cstdint>
#include <optional>

#include "chorus/error.h"

namespace chorus::parallel {
namespace {

constexpr int kMaxAxisSize = 1 << 20;

std::optional<Axis> axis_named(std::string_view name) {
  if (name == "tp") return Axis::kTp;
  if (name == "dp") return Axis::kDp;
  if (name == "pp") return Axis::kPp;
  return std::nullopt;
}

std::array<Axis, 3> parse_order(std::string_view text) {
  std::array<Axis, 3> order{};
  bool seen[3] = {};
  size_t start = 0;
  for (int i = 0; i < 3; ++i) {
    const size_t end = i < 2 ? text.find('-', start) : text.size();
    const std::optional<Axis> axis =
        end == std::string_view::npos ? std::nullopt : axis_named(text.substr(start, end - start));
    CHORUS_ARG_CHECK(axis && !seen[static_cast<int>(*axis)] && (i < 2 || end == text.size()),
                     "mesh order '", text,
                     "': expected the three axes tp, dp, pp joined by '-', "
                     "fastest-varying first (e.g. tp-dp-pp)");
    seen[static_cast<int>(*axis)] = true;
    order[static_cast<size_t>(i)] = *axis;
    start = end + 1;
  }
  return order;
}

}  // namespace

std::string_view to_string(Axis axis) {
  switch (axis) {
    case Axis::kTp:
      return "tp";
    case Axis::kDp:
      return "dp";
    case Axis::kPp:
      return "pp";
  }
  return "?";
}

int MeshCoord::operator[](Axis axis) const {
  return axis == Axis::kTp ? tp : axis == Axis::kDp ? dp : pp;
}

int& MeshCoord::operator[](Axis axis) {
  return axis == Axis::kTp ? tp : axis == Axis::kDp ? dp : pp;
}

int MeshShape::size(Axis axis) const {
  return axis == Axis::kTp ? tp : axis == Axis::kDp ? dp : pp;
}

MeshCoord MeshShape::coord_of(int rank) const {
  CHORUS_ARG_CHECK(rank >= 0 && rank < world_size(), "rank ", rank, " outside the mesh of ",
                   world_size());
  MeshCoord c;
  for (Axis axis : order) {
    c[axis] = rank % size(axis);
    rank /= size(axis);
  }
  return c;
}

int MeshShape::rank_of(const MeshCoord& c) const {
  int rank = 0;
  for (auto it = order.rbegin(); it != order.rend(); ++it) rank = rank * size(*it) + c[*it];
  return rank;
}

std::string MeshShape::order_string() const {
  return std::string(to_string(order[0])) + "-" + std::string(to_string(order[1])) + "-" +
         std::string(to_string(order[2]));
}

MeshShape parse_mesh(std::string_view text) {
  MeshShape mesh;
  CHORUS_ARG_CHECK(!text.empty(), "empty mesh: expected e.g. dp=2,tp=4,pp=2");
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view part = text.substr(start, end - start);
    const size_t eq = part.find('=');
    CHORUS_ARG_CHECK(eq != std::string_view::npos, "mesh '", text, "': '", part,
                     "' is not NAME=VALUE (expected e.g. dp=2,tp=4,pp=2)");
    const std::string_view name = part.substr(0, eq);
    const std::string_view value = part.substr(eq + 1);
    if (name == "order") {
      mesh.order = parse_order(value);
    } else {
      const std::optional<Axis> axis = axis_named(name);
      CHORUS_ARG_CHECK(axis, "mesh '", text, "': unknown axis '", name,
                       "' (the axes are dp, tp, pp; and order=)");
      int size = 0;
      auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), size);
      CHORUS_ARG_CHECK(ec == std::errc() && ptr == value.data() + value.size() && size >= 1 &&
                           size <= kMaxAxisSize,
                       "mesh '", text, "': ", name, " must be a positive integer, got '", value,
                       "'");
      MeshCoord sizes{mesh.dp, mesh.tp, mesh.pp};
      sizes[*axis] = size;
      mesh.dp = sizes.dp;
      mesh.tp = sizes.tp;
      mesh.pp = sizes.pp;
    }
    start = end + 1;
  }
  CHORUS_ARG_CHECK(static_cast<int64_t>(mesh.dp) * mesh.tp * mesh.pp <= kMaxAxisSize, "mesh '",
                   text, "' has more than ", kMaxAxisSize, " ranks");
  return mesh;
}

}  // namespace chorus::parallel
