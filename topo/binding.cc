#include "chorus/topo/binding.h"

#include "chorus/error.h"
#include "chorus/topo/placement.h"

namespace chorus::topo {

std::optional<BindPolicy> parse_bind_policy(std::string_view text) {
  if (text == "none") return BindPolicy::kNone;
  if (text == "cores") return BindPolicy::kCores;
  if (text == "numa") return BindPolicy::kNuma;
  return std::nullopt;
}

std::vector<std::vector<int>> local_rank_cpus(const Topology& host, int local_world_size,
                                              BindPolicy policy) {
  CHORUS_ARG_CHECK(local_world_size >= 1,
                   "local_rank_cpus: local world size must be positive, got ", local_world_size);
  std::vector<std::vector<int>> out(static_cast<size_t>(local_world_size));
  switch (policy) {
    case BindPolicy::kNone:
      break;
    case BindPolicy::kCores: {
      std::vector<Slot> slots = host_slots(host, 0, local_world_size);
      for (size_t i = 0; i < out.size(); ++i) out[i] = std::move(slots[i].pus);
      break;
    }
    case BindPolicy::kNuma: {
      const std::vector<int> numa = host.numa_nodes();
      for (size_t i = 0; i < out.size(); ++i)
        for (const Core& c : host.cores)
          if (numa.empty() || c.numa == numa[i % numa.size()])
            out[i].insert(out[i].end(), c.pus.begin(), c.pus.end());
      break;
    }
  }
  return out;
}

}  // namespace chorus::topo
