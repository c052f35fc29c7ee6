// chorus-plan's output: the table (one line per mesh: memory split, verdict, step time split,
// tokens/s, MFU) with the recommendation, or the same as one JSON object (--json).
#pragma once

#include <string>

#include "plan.h"

namespace chorus::plan {

std::string text_report(const Plan& p);
std::string json_report(const Plan& p);

}  // namespace chorus::plan
