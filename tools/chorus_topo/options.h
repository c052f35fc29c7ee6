// chorus-topo — command-line options.
#pragma once

#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/parallel/mesh_shape.h"

namespace chorus::topo::cli {

struct Options {
  std::vector<std::string> xml;  // --xml FILE (repeatable: one host each)
  std::string synthetic;         // --synthetic DESC
  bool summary = false;
  bool matrix = false;
  bool json = false;
  bool dot = false;
  std::string svg;  // --svg FILE
  std::string png;  // --png FILE
  std::optional<parallel::MeshShape> mesh;
  int hosts = 1;  // --hosts N: the loaded hosts, N times over
  bool help = false;

  // No view flag given: the summary and the matrix (and the placement with --mesh).
  bool default_views() const {
    return !summary && !matrix && !json && !dot && svg.empty() && png.empty();
  }
};

// A malformed command line; what() is the reason. chorus-topo prints it with the synopsis and
// exits 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

Options parse_options(std::span<const std::string> args);

std::string_view usage_synopsis();
std::string_view help_text();

}  // namespace chorus::topo::cli
