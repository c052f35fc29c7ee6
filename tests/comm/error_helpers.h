// Test helpers shared by the multi-process test suites: catching the chorus::Error (or the
// InvalidArgument) a call throws, and looking for text in its message.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "chorus/error.h"

namespace chorus::testing {

// Runs `call` and returns the chorus::Error it throws (fails the test if it does not).
template <class F>
std::optional<Error> error_of(F&& call) {
  try {
    call();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a chorus::Error";
  return std::nullopt;
}

// Runs `call` and returns the message of the InvalidArgument it throws, or "(no
// InvalidArgument)" when it throws none.
template <class F>
std::string invalid_message(F&& call) {
  try {
    call();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no InvalidArgument)";
}

inline bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

}  // namespace chorus::testing
