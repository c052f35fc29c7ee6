#include "error.h"

#include <algorithm>
#include <cstdint>

namespace chorus::plan {
namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

void fail(const std::string& message) { throw PlanError{message}; }

std::string nearest(const std::string& name, const std::vector<std::string>& valid) {
  std::string best;
  size_t d = SIZE_MAX;
  for (const auto& v : valid)
    if (const size_t e = edit_distance(name, v); e < d) {
      d = e;
      best = v;
    }
  return best;
}

void fail_unknown(const std::string& what, const std::string& name,
                  const std::vector<std::string>& valid) {
  std::string list;
  for (const auto& v : valid) list += (list.empty() ? "" : ", ") + v;
  fail("unknown " + what + " '" + name + "' (did you mean " + nearest(name, valid) +
       "?; valid: " + list + ")");
}

}  // namespace chorus::plan
