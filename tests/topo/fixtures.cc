#include "fixtures.h"

#include <gtest/gtest.h>

#include <map>

#include "chorus/topo/discover.h"

namespace chorus::topo::testing {

std::string fixture_path(const std::string& name) {
  return std::string(CHORUS_TOPO_FIXTURES) + "/" + name;
}

const Topology& fixture(const std::string& name) {
  static std::map<std::string, Topology> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, load_xml(fixture_path(name))).first;
  return it->second;
}

std::vector<Topology> hosts_of(const std::string& name, int count) {
  std::vector<Topology> out;
  for (int i = 0; i < count; ++i) {
    out.push_back(fixture(name));
    out.back().hostname += "-" + std::to_string(i);
  }
  return out;
}

int node_named(const Topology& t, const std::string& name) {
  for (size_t i = 0; i < t.nodes.size(); ++i)
    if (t.nodes[i].name == name) return static_cast<int>(i);
  ADD_FAILURE() << "no node named " << name << " in " << t.hostname;
  return 0;
}

}  // namespace chorus::topo::testing
