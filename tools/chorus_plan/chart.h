// chorus-plan's picture (--svg FILE): per runnable mesh, a stacked bar of the step time
// (compute, tensor parallelism, bubble, point-to-point, exposed data parallelism, optimizer)
// beside a bar of the peak memory against the device's, in the order of the table.
#pragma once

#include <string>

#include "plan.h"

namespace chorus::plan {

std::string svg_chart(const Plan& p);

}  // namespace chorus::plan
