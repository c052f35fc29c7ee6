// chorus-plan: the time of a collective from its algorithm's own step count (alpha-beta): p ranks,
// n bytes per rank, a link of latency a and bandwidth B (per direction, after the cluster's link
// efficiency).
//   ring all-reduce:           2(p-1) a + 2 (p-1)/p n / B
//   tree all-reduce (double binary tree, pipelined): 2 log2(p) a + 2 n / B
//   ring reduce-scatter / all-gather:  (p-1) a + (p-1)/p n / B
//   point-to-point:            a + n / B
//   pairwise all-to-all:       (p-1) a + (p-1)/p n / B   (n: the rows this rank sends, its own
//                              share included; expert parallelism's dispatch and combine)
// all_reduce_s takes the faster of ring and tree, as a tuned selector would. On `local`, a group
// inside the host is priced by the selector's own cost model instead (GroupCollectives).
#pragma once

#include "cluster.h"

namespace chorus::plan {

struct LinkModel {
  double latency_s = 0;
  double bytes_per_s = 0;
};
// The link a group of `p` ranks spaced `stride` ranks apart crosses: NVLink/xGMI when the group
// stays inside a node, the network otherwise (one NIC per device: the slower link bounds a ring).
LinkModel group_link(const Cluster& c, int p, int stride);

double ring_all_reduce_s(const LinkModel& l, int p, double bytes);
double tree_all_reduce_s(const LinkModel& l, int p, double bytes);
double all_reduce_s(const LinkModel& l, int p, double bytes);
double reduce_scatter_s(const LinkModel& l, int p, double bytes);
double all_gather_s(const LinkModel& l, int p, double bytes);
double p2p_s(const LinkModel& l, double bytes);
double all_to_all_s(const LinkModel& l, int p, double bytes);

// The collectives of a group of `p` ranks spaced `stride` apart, as a plan prices them: the
// link forms above, or where the cluster has a cost model (`local`) and the group stays inside
// the host, the time of the algorithm the selector would pick there, by the constants fitted for
// each algorithm (chorus/cost_model.h). Point-to-point always by the link.
class GroupCollectives {
 public:
  GroupCollectives(const Cluster& c, int p, int stride);
  double all_reduce_s(double bytes) const;
  double reduce_scatter_s(double bytes) const;  // bytes: the whole buffer
  double all_gather_s(double bytes) const;      // bytes: the whole result
  double p2p_s(double bytes) const;

 private:
  double modelled_s(Collective coll, double bytes, double fallback) const;
  int p_;
  LinkModel link_;
  const CostModel* costs_ = nullptr;  // null: the link forms
};

}  // namespace chorus::plan
