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

GroupCollectives::GroupCollectives(const Cluster& c, int p, int stride)
    : p_(p), link_(group_link(c, p, stride)) {
  if (c.costs && int64_t(p) * stride <= c.per_node) costs_ = c.costs.get();
}

double GroupCollectives::modelled_s(Collective coll, double bytes, double fallback) const {
  if (costs_ == nullptr || p_ <= 1) return fallback;
  const auto choice = costs_->fastest(coll, p_, bytes);
  return choice ? choice->us * 1e-6 : fallback;
}

double GroupCollectives::all_reduce_s(double bytes) const {
  return modelled_s(Collective::kAllReduce, bytes, plan::all_reduce_s(link_, p_, bytes));
}
double GroupCollectives::reduce_scatter_s(double bytes) const {
  return modelled_s(Collective::kReduceScatter, bytes, plan::reduce_scatter_s(link_, p_, bytes));
}
double GroupCollectives::all_gather_s(double bytes) const {
  return modelled_s(Collective::kAllGather, bytes, plan::all_gather_s(link_, p_, bytes));
}
double GroupCollectives::p2p_s(double bytes) const { return plan::p2p_s(link_, bytes); }

}  // namespace chorus::plan
