#include "collectives.h"

#include <algorithm>
#include <cmath>

namespace chorus::plan {

LinkModel group_link(const Cluster& c, int p, int stride) {
  const bool inside = int64_t(p) * stride <= c.per_node;
  const Link& l = inside ? c.intra : c.inter;
  return {l.latency_s, l.bytes_per_s * c.link_efficiency};
}

double ring_all_reduce_s(const LinkModel& l, int p, double bytes) {
  if (p <= 1) return 0;
  return 2.0 * (p - 1) * l.latency_s + 2.0 * (p - 1) / p * bytes / l.bytes_per_s;
}

double tree_all_reduce_s(const LinkModel& l, int p, double bytes) {
  if (p <= 1) return 0;
  return 2.0 * std::ceil(std::log2(double(p))) * l.latency_s + 2.0 * bytes / l.bytes_per_s;
}

double all_reduce_s(const LinkModel& l, int p, double bytes) {
  return std::min(ring_all_reduce_s(l, p, bytes), tree_all_reduce_s(l, p, bytes));
}

double reduce_scatter_s(const LinkModel& l, int p, double bytes) {
  if (p <= 1) return 0;
  return (p - 1) * l.latency_s + double(p - 1) / p * bytes / l.bytes_per_s;
}

double all_gather_s(const LinkModel& l, int p, double bytes) {
  return reduce_scatter_s(l, p, bytes);
}

double p2p_s(const LinkModel& l, double bytes) { return l.latency_s + bytes / l.bytes_per_s; }

double all_to_all_s(const LinkModel& l, int p, double bytes) {
  return reduce_scatter_s(l, p, bytes);  // the same steps and bytes, without the additions
}

}  // namespace chorus::plan
