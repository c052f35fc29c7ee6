// chorus — the one source of deadlines.
//
// Every blocking wait in chorus (connecting to the bootstrap store, each store request, the
// rendezvous at set-up, the collectives, teardown) takes its deadline from a communicator's
// timeout: CommOptions::timeout, else CHORUS_TIMEOUT (default_timeout()). A step with a shorter
// bound of its own says so where it is declared (teardown: kTeardownBound).
//
// Timeouts run from 1 ms to "no deadline". No deadline is kNoDeadline, a duration long enough to
// mean never (50 years) yet small enough that now + it, or it in nanoseconds, cannot overflow:
// every timeout is clamped to it (clamp_timeout) before any arithmetic, so a huge value never
// wraps into the past.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace chorus {

using Millis = std::chrono::milliseconds;

// "Never": the largest timeout; larger ones are clamped to it.
inline constexpr Millis kNoDeadline =
    std::chrono::duration_cast<Millis>(std::chrono::hours(24 * 365 * 50));

// The longest a communicator's teardown waits for the bootstrap store, in all (when its timeout
// is shorter, that): the goodbye and the transport's last notices. Once the store has failed to
// answer in time, every later request fails at once.
inline constexpr Millis kTeardownBound = Millis(2000);

// Clamps to [0, kNoDeadline].
Millis clamp_timeout(Millis timeout);

// Seconds as CHORUS_TIMEOUT takes them: a decimal number ("10", "0.5", "1e3"), or "inf",
// "never", "none" or "0" for no deadline. Values past kNoDeadline mean no deadline. nullopt,
// with the reason in *error, for text that is not a number, negative or NaN, or below 1 ms.
std::optional<Millis> parse_timeout(std::string_view text, std::string* error);

// CHORUS_TIMEOUT (seconds, default 300); throws InvalidArgument naming the variable when its value
// is not accepted by parse_timeout().
Millis default_timeout();

// now + timeout on the steady clock, timeout clamped first (never overflows).
std::chrono::steady_clock::time_point deadline_after(Millis timeout);

// For messages: "300 s", "0.25 s", "no deadline".
std::string describe_timeout(Millis timeout);

// While it lives, bounds every wait of this thread that honours it (each request of the
// bootstrap store's client) by `deadline`: a step made of several waits (a set-up wait cut into
// slices, a teardown) ends by its own deadline even when one of them hangs. Scopes nest; the
// earliest deadline applies.
class DeadlineScope {
 public:
  explicit DeadlineScope(std::chrono::steady_clock::time_point deadline);
  ~DeadlineScope();
  DeadlineScope(const DeadlineScope&) = delete;
  DeadlineScope& operator=(const DeadlineScope&) = delete;

  // The earliest deadline of the scopes open on this thread; time_point::max() when none is.
  static std::chrono::steady_clock::time_point current();

 private:
  std::chrono::steady_clock::time_point previous_;
};

}  // namespace chorus
