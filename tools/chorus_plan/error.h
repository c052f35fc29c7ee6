// chorus-plan: a plan that cannot be made (bad flags, an unknown preset, a mesh that does not
// divide the world or the model), with the message the user sees.
#pragma once

#include <string>
#include <vector>

namespace chorus::plan {

struct PlanError {
  std::string message;
};

[[noreturn]] void fail(const std::string& message);

// The entry of `valid` nearest to `name` (edit distance), for "did you mean".
std::string nearest(const std::string& name, const std::vector<std::string>& valid);

// "unknown WHAT 'name' (did you mean X?; valid: a, b, c)".
[[noreturn]] void fail_unknown(const std::string& what, const std::string& name,
                               const std::vector<std::string>& valid);

}  // namespace chorus::plan
