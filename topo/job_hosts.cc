#include <algorithm>
#include <map>

#include "chorus/topo/serialize.h"

namespace chorus::topo {

JobHosts group_by_host(std::span<const Topology> per_rank) {
  JobHosts job;
  std::map<std::string, int> index;
  for (const Topology& t : per_rank) {
    auto [it, fresh] = index.try_emplace(t.hostname, static_cast<int>(job.hosts.size()));
    if (fresh) job.hosts.push_back(t);
    job.host_of_rank.push_back(it->second);
    job.local_rank.push_back(static_cast<int>(
        std::count(job.host_of_rank.begin(), job.host_of_rank.end(), it->second) - 1));
  }
  return job;
}

}  // namespace chorus::topo
