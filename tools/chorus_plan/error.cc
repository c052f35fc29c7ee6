#include "error.h"

#include "chorus/nearest_name.h"

namespace chorus::plan {

void fail(const std::string& message) { throw PlanError{message}; }

std::string nearest(const std::string& name, const std::vector<std::string>& valid) {
  return nearest_name(name, valid).name;
}

void fail_unknown(const std::string& what, const std::string& name,
                  const std::vector<std::string>& valid) {
  std::string list;
  for (const auto& v : valid) list += (list.empty() ? "" : ", ") + v;
  fail("unknown " + what + " '" + name + "' (did you mean " + nearest(name, valid) +
       "?; valid: " + list + ")");
}

}  // namespace chorus::plan
