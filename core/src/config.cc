#include "chorus/config.h"

#include <cstdlib>
#include <mutex>
#include <sstream>

#include "chorus/error.h"

namespace chorus {
namespace {
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::vector<KnobInfo>& registry() {
  static std::vector<KnobInfo> r;
  return r;
}
void register_knob(KnobInfo info) {
  std::lock_guard lock(registry_mutex());
  for (const auto& k : registry())
    if (k.name == info.name) return;  // an inline knob seen from several libraries
  registry().push_back(std::move(info));
}
}  // namespace

std::vector<KnobInfo> all_knobs() {
  std::lock_guard lock(registry_mutex());
  return registry();
}

std::optional<std::string> env_get(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::optional<int64_t> parse_size(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || v < 0) return std::nullopt;
  int64_t mult = 1;
  std::string rest(end);
  if (rest == "K" || rest == "k" || rest == "KiB")
    mult = int64_t{1} << 10;
  else if (rest == "M" || rest == "m" || rest == "MiB")
    mult = int64_t{1} << 20;
  else if (rest == "G" || rest == "g" || rest == "GiB")
    mult = int64_t{1} << 30;
  else if (!rest.empty())
    return std::nullopt;
  if (v > INT64_MAX / mult) return std::nullopt;
  return static_cast<int64_t>(v) * mult;
}

IntKnob::IntKnob(const char* name, int64_t default_value, const char* description)
    : name_(name), default_(default_value) {
  register_knob({name, "int", std::to_string(default_value), description});
}

int64_t IntKnob::get() const {
  auto v = env_get(name_);
  if (!v) return default_;
  // Negative values are allowed for plain integers ("-1" = auto in some knobs).
  if ((*v)[0] == '-') {
    auto p = parse_size(v->substr(1));
    CHORUS_ARG_CHECK(p.has_value(), name_, "='", *v, "' is not an integer");
    return -*p;
  }
  auto p = parse_size(*v);
  CHORUS_ARG_CHECK(p.has_value(), name_, "='", *v, "' is not an integer (K/M/G suffixes allowed)");
  return *p;
}

DoubleKnob::DoubleKnob(const char* name, double default_value, const char* description)
    : name_(name), default_(default_value) {
  std::ostringstream text;
  text << default_value;  // "300", "0.5": not to_string's "300.000000"
  register_knob({name, "double", text.str(), description});
}

double DoubleKnob::get() const {
  auto v = env_get(name_);
  if (!v) return default_;
  char* end = nullptr;
  double d = std::strtod(v->c_str(), &end);
  CHORUS_ARG_CHECK(end != v->c_str() && *end == '\0', name_, "='", *v, "' is not a number");
  return d;
}

StringKnob::StringKnob(const char* name, const char* default_value, const char* description)
    : name_(name), default_(default_value) {
  register_knob({name, "string", default_value, description});
}

std::string StringKnob::get() const { return env_get(name_).value_or(default_); }
std::optional<std::string> StringKnob::get_if_set() const { return env_get(name_); }

}  // namespace chorus
