#include "cluster.h"

#include <iterator>

#include "error.h"
#include "local_probe.h"

namespace chorus::plan {

namespace {

// The rate measured at the size nearest `micro_batch_size` (the smaller one on a tie).
double nearest(const std::map<int64_t, double>& rates, int64_t micro_batch_size) {
  auto at = rates.lower_bound(micro_batch_size);
  if (at == rates.end()) return std::prev(at)->second;
  if (at->first == micro_batch_size || at == rates.begin()) return at->second;
  const auto below = std::prev(at);
  return micro_batch_size - below->first <= at->first - micro_batch_size ? below->second
                                                                         : at->second;
}

}  // namespace

double Cluster::ends_s(int64_t micro_batch_size, int tp) const {
  if (tp > 1) {
    const auto split = tp_ends_seconds.find(tp);
    return split == tp_ends_seconds.end() || split->second.empty()
               ? 0
               : nearest(split->second, micro_batch_size);
  }
  return ends_seconds.empty() ? 0 : nearest(ends_seconds, micro_batch_size);
}

double Cluster::compute_flops(const std::string& dtype, int64_t micro_batch_size, int tp) const {
  const auto split = tp_flops_per_s.find(tp);
  if (tp > 1 && split != tp_flops_per_s.end() && !split->second.empty())
    return nearest(split->second, micro_batch_size);
  if (model_flops_per_s.empty()) return flops(dtype) * compute_efficiency;
  return nearest(model_flops_per_s, micro_batch_size);
}

namespace {

constexpr double kT = 1e12, kG = 1e9;

// Inter-node: one 400 Gb/s NIC per GPU (ConnectX-7 / NDR InfiniBand), 50 GB/s per direction;
// A100 systems: 200 Gb/s HDR per GPU (DGX A100). Latencies: a collective step over NVLink or
// xGMI ~3 us, over InfiniBand ~6 us (what NCCL's and RCCL's tuning models use as base latency
// per step, order of magnitude).
Cluster h100() {
  Cluster c;
  c.name = "8xh100";
  c.source =
      "NVIDIA H100 Tensor Core GPU datasheet (SXM5): 989 TFLOP/s dense BF16, 67 FP32, "
      "80 GB HBM3 at 3.35 TB/s, NVLink 900 GB/s (450 per direction); 400 Gb/s IB per GPU";
  c.device = "H100 SXM5 80GB";
  c.f32_flops = 67 * kT;
  c.bf16_flops = 989 * kT;
  c.memory_bytes = 80 * kG;
  c.hbm_bytes_per_s = 3350 * kG;
  c.intra = {3e-6, 450 * kG};
  c.inter = {6e-6, 50 * kG};
  c.compute_efficiency = 0.6;
  c.link_efficiency = 0.8;
  return c;
}

Cluster h200() {
  Cluster c = h100();
  c.name = "8xh200";
  c.source =
      "NVIDIA H200 Tensor Core GPU datasheet (SXM): 989 TFLOP/s dense BF16, 67 FP32, "
      "141 GB HBM3e at 4.8 TB/s, NVLink 900 GB/s; 400 Gb/s IB per GPU";
  c.device = "H200 SXM 141GB";
  c.memory_bytes = 141 * kG;
  c.hbm_bytes_per_s = 4800 * kG;
  return c;
}

Cluster mi300x() {
  Cluster c = h100();
  c.name = "8xmi300x";
  c.source =
      "AMD Instinct MI300X datasheet: 1307.4 TFLOP/s dense BF16, 163.4 FP32 (vector), "
      "192 GB HBM3 at 5.3 TB/s, 7 Infinity Fabric links of 64 GB/s per direction to the "
      "other 7 GPUs (448 GB/s); 400 Gb/s per GPU network";
  c.device = "MI300X 192GB";
  c.f32_flops = 163.4 * kT;
  c.bf16_flops = 1307.4 * kT;
  c.memory_bytes = 192 * kG;
  c.hbm_bytes_per_s = 5300 * kG;
  c.intra = {3e-6, 448 * kG};
  return c;
}

Cluster a100() {
  Cluster c = h100();
  c.name = "8xa100";
  c.source =
      "NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB): 312 TFLOP/s dense BF16, 19.5 "
      "FP32, 80 GB HBM2e at 2.04 TB/s, NVLink 600 GB/s (300 per direction); DGX A100: "
      "200 Gb/s HDR IB per GPU";
  c.device = "A100 SXM4 80GB";
  c.f32_flops = 19.5 * kT;
  c.bf16_flops = 312 * kT;
  c.memory_bytes = 80 * kG;
  c.hbm_bytes_per_s = 2039 * kG;
  c.intra = {3e-6, 300 * kG};
  c.inter = {6e-6, 25 * kG};
  return c;
}

}  // namespace

std::vector<std::string> cluster_names() {
  return {"8xh100", "8xh200", "8xmi300x", "8xa100", "local"};
}

Cluster cluster_preset(const std::string& name, int nodes) {
  if (nodes < 1) fail("--nodes must be at least 1");
  Cluster c;
  if (name == "8xh100") {
    c = h100();
  } else if (name == "8xh200") {
    c = h200();
  } else if (name == "8xmi300x") {
    c = mi300x();
  } else if (name == "8xa100") {
    c = a100();
  } else if (name == "local") {
    if (nodes != 1) fail("--cluster local is this one machine: --nodes must be 1");
    c = local_cluster();
  } else {
    fail_unknown("cluster preset", name, cluster_names());
  }
  c.nodes = nodes;
  return c;
}

}  // namespace chorus::plan
