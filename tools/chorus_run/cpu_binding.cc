#include "cpu_binding.h"

#include <sched.h>

#include <algorithm>

#include "chorus/error.h"
#include "chorus/log.h"
#include "chorus/topo/binding.h"
#include "chorus/topo/discover.h"

namespace chorus::run {

std::vector<std::vector<int>> local_cpu_binding(std::string_view policy, int nproc) {
  const std::optional<topo::BindPolicy> parsed = topo::parse_bind_policy(policy);
  CHORUS_ARG_CHECK(parsed, "--bind: unknown policy '", policy, "'");
  if (*parsed == topo::BindPolicy::kNone)
    return std::vector<std::vector<int>>(static_cast<size_t>(nproc));
  std::vector<std::vector<int>> cpus = topo::local_rank_cpus(topo::discover(), nproc, *parsed);
  // Keep to the CPUs chorus-run may use itself (a topology from HWLOC_XMLFILE can name others).
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0)
    return std::vector<std::vector<int>>(cpus.size());
  for (size_t i = 0; i < cpus.size(); ++i) {
    std::erase_if(cpus[i], [&](int cpu) {
      return cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &allowed);
    });
    if (cpus[i].empty())
      CHORUS_WARN(kLogRun, "--bind ", policy, ": no usable CPU for local rank ", i,
                  "; left unbound");
    else
      CHORUS_INFO(kLogRun, "local rank ", i, " bound to PUs ", topo::format_cpu_list(cpus[i]));
  }
  return cpus;
}

}  // namespace chorus::run
