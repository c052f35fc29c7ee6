// The shape classes of a GEMM and their plan strings (gemm/shape_class.h).
#include "gemm/shape_class.h"

#include <sstream>

#include "chorus/error.h"

namespace chorus::tensor::gemm_impl {
namespace {

// Multiply-adds from which a GEMM is "large".
constexpr double kLargeMacs = double(1 << 21);

constexpr const char* kPatternNames[] = {"nn", "nt", "tn", "tt"};

}  // namespace

int shape_class(bool ta, bool tb, int64_t m, int64_t n, int64_t k) {
  const int pattern = (ta ? 2 : 0) + (tb ? 1 : 0);
  const bool large =
      static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) >= kLargeMacs;
  return pattern * 2 + (large ? 1 : 0);
}

std::string class_name(int c) {
  return std::string(kPatternNames[c / 2]) + (c % 2 ? ".large" : ".small");
}

bool class_ta(int c) { return (c / 2) >= 2; }

bool class_tb(int c) { return (c / 2) % 2 == 1; }

void class_shape(int c, int64_t* m, int64_t* n, int64_t* k) {
  if (c % 2) {
    *m = 512, *n = 768, *k = 256;
  } else {
    *m = 128, *n = 128, *k = 64;
  }
}

void f32_class_shape(int c, int64_t* m, int64_t* n, int64_t* k) {
  constexpr int64_t kTokens = 512, kIn = 256, kOut = 768;
  if (c % 2 == 0) {
    class_shape(c, m, n, k);
  } else if (class_ta(c) && !class_tb(c)) {  // weight gradient: dy^T x
    *m = kOut, *n = kIn, *k = kTokens;
  } else if (!class_ta(c) && !class_tb(c)) {  // input gradient: dy W
    *m = kTokens, *n = kIn, *k = kOut;
  } else {  // forward: x W^T
    *m = kTokens, *n = kOut, *k = kIn;
  }
}

std::array<int, kShapeClasses> parse_class_plan(
    const std::string& plan, const char* what,
    const std::function<int(const std::string&)>& resolve) {
  std::array<int, kShapeClasses> chosen;
  chosen.fill(-1);
  if (plan == "auto") return chosen;
  if (plan.find('=') == std::string::npos) {
    chosen.fill(resolve(plan));
    return chosen;
  }
  std::stringstream ss(plan);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t eq = item.find('=');
    CHORUS_ARG_CHECK(eq != std::string::npos, what, "=", plan, ": expected class=name in '", item,
                     "'");
    const std::string cls = item.substr(0, eq);
    int found = -1;
    for (int c = 0; c < kShapeClasses; ++c)
      if (class_name(c) == cls) found = c;
    CHORUS_ARG_CHECK(found >= 0, what, "=", plan, ": unknown shape class '", cls,
                     "' (nn|nt|tn|tt . small|large)");
    chosen[static_cast<size_t>(found)] = resolve(item.substr(eq + 1));
  }
  return chosen;
}

std::string class_plan_string(const std::vector<int>& choice,
                              const std::function<std::string(int)>& name_of) {
  bool uniform = true;
  for (int x : choice) uniform &= x == choice[0];
  if (uniform) return name_of(choice[0]);
  std::string s;
  for (int c = 0; c < kShapeClasses; ++c) {
    if (c > 0) s += ',';
    s += class_name(c) + '=' + name_of(choice[static_cast<size_t>(c)]);
  }
  return s;
}

}  // namespace chorus::tensor::gemm_impl
