#include "culprit.h"

#include <algorithm>
#include <map>

namespace chorus::run {

std::optional<Culprit> find_culprit(const std::vector<RankEnd>& ends, const FailureReports& reports,
                                    size_t first) {
  auto index_of = [&](int rank) {
    for (size_t i = 0; i < ends.size(); ++i)
      if (ends[i].rank == rank) return i;
    return ends.size();
  };
  // Where the reports lead from rank `i`.
  auto origin_of = [&](size_t i) {
    std::vector<bool> seen(ends.size(), false);
    size_t cur = i;
    for (;;) {
      seen[cur] = true;
      const std::optional<int> cause = reports.cause_of(ends[cur].rank);
      if (!cause || *cause == ends[cur].rank) return cur;
      const size_t next = index_of(*cause);
      if (next == ends.size() || seen[next]) return cur;
      cur = next;
    }
  };
  std::map<size_t, std::vector<int>> followers;  // origin -> failed ranks leading there
  std::string followed;
  bool any = false;
  for (size_t i = 0; i < ends.size(); ++i) {
    if (!ends[i].failed) continue;
    const std::optional<int> cause = reports.cause_of(ends[i].rank);
    if (!cause) continue;
    any = true;
    followers[origin_of(i)].push_back(ends[i].rank);
    if (*cause != ends[i].rank)
      followed += (followed.empty() ? "" : ", ") + std::to_string(ends[i].rank) + " -> " +
                  std::to_string(*cause);
  }
  if (!any) return std::nullopt;
  const size_t from_first = origin_of(first);
  size_t best = from_first;
  for (const auto& [origin, who] : followers)
    if (who.size() > followers[best].size()) best = origin;
  Culprit c;
  c.index = best;
  c.waiting = followers[best];
  std::sort(c.waiting.begin(), c.waiting.end());
  c.reports = followed;
  return c;
}

}  // namespace chorus::run
