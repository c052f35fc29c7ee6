#include "chorus/timeout.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "chorus/config.h"
#include "chorus/error.h"

namespace chorus {
namespace {

const StringKnob kTimeout{"CHORUS_TIMEOUT", "300",
                          "seconds any blocking step may take (store connect and requests, "
                          "set-up, each operation) before it fails with chorus::Timeout; inf "
                          "or 0 = no deadline"};

// The innermost DeadlineScope's deadline on this thread (a scope's state, not configuration).
thread_local std::chrono::steady_clock::time_point scope_deadline =
    std::chrono::steady_clock::time_point::max();

bool is_never(std::string_view text) {
  return text == "inf" || text == "infinity" || text == "never" || text == "none";
}

}  // namespace

Millis clamp_timeout(Millis timeout) { return std::clamp(timeout, Millis::zero(), kNoDeadline); }

std::optional<Millis> parse_timeout(std::string_view text, std::string* error) {
  std::string s(text);
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (is_never(s)) return kNoDeadline;
  char* end = nullptr;
  const double seconds = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || std::isnan(seconds)) {
    *error = "is not a number of seconds (or inf for no deadline)";
    return std::nullopt;
  }
  if (seconds < 0) {
    *error = "is negative (use inf or 0 for no deadline)";
    return std::nullopt;
  }
  if (seconds == 0) return kNoDeadline;
  // Compared in seconds first, so that a huge value never reaches an integer conversion.
  const double limit_s = std::chrono::duration<double>(kNoDeadline).count();
  if (seconds >= limit_s) return kNoDeadline;
  const double ms = std::round(seconds * 1000.0);
  if (ms < 1) {
    *error = "is below the smallest timeout, 1 ms";
    return std::nullopt;
  }
  return Millis(static_cast<int64_t>(ms));
}

Millis default_timeout() {
  const std::string text = kTimeout.get();
  std::string error;
  auto t = parse_timeout(text, &error);
  CHORUS_ARG_CHECK(t.has_value(), kTimeout.name(), "='", text, "' ", error);
  return *t;
}

std::chrono::steady_clock::time_point deadline_after(Millis timeout) {
  return std::chrono::steady_clock::now() + clamp_timeout(timeout);
}

std::string describe_timeout(Millis timeout) {
  timeout = clamp_timeout(timeout);
  if (timeout == kNoDeadline) return "no deadline";
  std::ostringstream s;
  s << std::chrono::duration<double>(timeout).count() << " s";
  return s.str();
}

DeadlineScope::DeadlineScope(std::chrono::steady_clock::time_point deadline)
    : previous_(scope_deadline) {
  scope_deadline = std::min(previous_, deadline);
}

DeadlineScope::~DeadlineScope() { scope_deadline = previous_; }

std::chrono::steady_clock::time_point DeadlineScope::current() { return scope_deadline; }

}  // namespace chorus
