// chorus-plan's `local` cluster: this machine, one rank per core (as chorus-train runs with
// --threads 1), measured. Compute: the f32 GEMM rate of one thread on a 512^3 product (the
// product chorus-train's MFU divides by). Links: the all-reduce ring curve chorus-tune wrote for
// this host (alpha = its latency over the ring's 2(p-1) steps, beta from its slope), else a
// short probe (a memory copy's bandwidth, halved: the shared-memory path copies in and out).
#pragma once

#include "cluster.h"

namespace chorus::plan {

Cluster local_cluster();

}  // namespace chorus::plan
