#include "chorus/knob_table.h"

#include <algorithm>
#include <vector>

#include "chorus/config.h"

namespace chorus {

void print_knobs(std::FILE* out) {
  std::vector<KnobInfo> knobs = all_knobs();
  std::sort(knobs.begin(), knobs.end(),
            [](const KnobInfo& a, const KnobInfo& b) { return a.name < b.name; });
  std::fprintf(out, "%-30s %-7s %-12s %-12s %s\n", "knob", "type", "value", "default", "meaning");
  for (const KnobInfo& k : knobs) {
    const auto value = env_get(k.name.c_str());
    std::fprintf(out, "%-30s %-7s %-12s %-12s %s\n", k.name.c_str(), k.type.c_str(),
                 value ? value->c_str() : "(unset)",
                 k.default_value.empty() ? "\"\"" : k.default_value.c_str(), k.description.c_str());
  }
}

}  // namespace chorus
