// chorus-topo: how this host is wired and where chorus places the ranks of a job.
// `chorus-topo --help` describes the views; docs/TOPOLOGY.md shows each one.

#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "chorus/error.h"
#include "chorus/parallel/mesh_placement.h"
#include "chorus/topo/discover.h"
#include "options.h"
#include "views.h"

namespace chorus::topo::cli {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

std::vector<Topology> load_hosts(const Options& o) {
  std::vector<Topology> loaded;
  if (!o.synthetic.empty()) {
    loaded.push_back(load_synthetic(o.synthetic));
  } else if (o.xml.empty()) {
    loaded.push_back(discover());
  } else {
    for (const std::string& path : o.xml) loaded.push_back(load_xml(path));
  }
  if (o.hosts == 1) return loaded;
  // N hosts like the loaded ones: each copy gets a name of its own.
  std::vector<Topology> hosts;
  for (int copy = 0; copy < o.hosts; ++copy)
    for (const Topology& t : loaded) {
      hosts.push_back(t);
      hosts.back().hostname += "-" + std::to_string(copy);
    }
  return hosts;
}

int run(const Options& o) {
  const std::vector<Topology> hosts = load_hosts(o);
  const Topology& host = hosts.front();
  std::optional<PlacedMesh> placed;
  if (o.mesh) placed = PlacedMesh{*o.mesh, parallel::place_mesh(*o.mesh, hosts)};

  if (o.json) {
    print_json(std::cout, host, placed ? &*placed : nullptr, hosts);
    return 0;
  }
  const bool defaults = o.default_views();
  bool first = true;
  auto section = [&]() {
    if (!first) std::cout << "\n";
    first = false;
  };
  if (o.summary || defaults) section(), print_summary(std::cout, host);
  if (o.matrix || defaults) section(), print_matrix(std::cout, host);
  if (placed) section(), print_placement(std::cout, *placed, hosts);
  if (o.dot) section(), std::cout << to_dot(host);
  if (!o.svg.empty()) render_image(to_dot(host), "svg", o.svg);
  if (!o.png.empty()) render_image(to_dot(host), "png", o.png);
  return 0;
}

int main_impl(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  Options options;
  try {
    options = parse_options(args);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "chorus-topo: %s\n%.*sTry 'chorus-topo --help' for more information.\n",
                 e.what(), static_cast<int>(usage_synopsis().size()), usage_synopsis().data());
    return kExitUsage;
  }
  if (options.help) {
    std::cout << usage_synopsis() << "\n" << help_text();
    return 0;
  }
  try {
    return run(options);
  } catch (const Error& e) {
    std::cout.flush();
    std::fprintf(stderr, "chorus-topo: %s\n", e.message().c_str());
    return kExitFailure;
  }
}

}  // namespace
}  // namespace chorus::topo::cli

int main(int argc, char** argv) { return chorus::topo::cli::main_impl(argc, argv); }
