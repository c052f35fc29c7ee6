// chorus — the error type every layer throws, and the checks that build it.
//
// One exception hierarchy: chorus::Error carries a kind, the rank that raised it (-1 when not in a
// communicator), the operation and its sequence number when one was running. Checks print both
// sides of a failed comparison and the source place, so calling code carries no error plumbing.
#pragma once

#include <cstdint>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace chorus {

enum class ErrorKind : uint8_t {
  kInvalidArgument,  // the caller passed something the API does not accept
  kTimeout,          // a wait passed its deadline
  kPeerFailure,      // another rank failed or went away
  kTransport,        // a transport (shm, socket, ucx) reported an error
  kSystem,           // an OS call failed (errno attached in the message)
  kInternal,         // a broken invariant inside chorus
  kMismatch,         // ranks called different collectives, counts, types or roots
};

std::string_view to_string(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message, int rank = -1, std::string op = {}, int64_t seq = -1,
        int peer = -1);

  ErrorKind kind() const noexcept { return kind_; }
  int rank() const noexcept { return rank_; }
  const std::string& op() const noexcept { return op_; }
  int64_t seq() const noexcept { return seq_; }
  // The rank at fault when it is another one (kPeerFailure: the first rank that failed; kTimeout:
  // the first rank waited for), else -1.
  int peer() const noexcept { return peer_; }
  // The message without the "chorus error [...]" prefix that what() carries.
  const std::string& message() const noexcept { return message_; }
  // How what() names rank(): "rank 1 of tp group 0 (world rank 3)" for a rank of a group made
  // by split(); empty: "rank <rank>".
  const std::string& rank_label() const noexcept { return rank_label_; }
  const char* what() const noexcept override { return what_.c_str(); }

  // The same error (same kind and class, rank, operation, number and peer) with another
  // message, its rank named by `rank_label`.
  friend std::exception_ptr relabeled(const Error& e, std::string message, std::string rank_label);

 private:
  ErrorKind kind_;
  int rank_;
  std::string op_;
  int64_t seq_;
  int peer_;
  std::string message_;
  std::string rank_label_;
  std::string what_;
};

std::exception_ptr relabeled(const Error& e, std::string message, std::string rank_label);

class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(std::string message, int rank = -1, std::string op = {})
      : Error(ErrorKind::kInvalidArgument, std::move(message), rank, std::move(op)) {}
};

class Timeout : public Error {
 public:
  Timeout(std::string message, int rank = -1, std::string op = {}, int64_t seq = -1, int peer = -1)
      : Error(ErrorKind::kTimeout, std::move(message), rank, std::move(op), seq, peer) {}
};

class PeerFailure : public Error {
 public:
  PeerFailure(std::string message, int rank = -1, std::string op = {}, int64_t seq = -1,
              int peer = -1)
      : Error(ErrorKind::kPeerFailure, std::move(message), rank, std::move(op), seq, peer) {}
};

// Ranks called different operations (or the same with different counts, types, ops or roots).
class Mismatch : public Error {
 public:
  Mismatch(std::string message, int rank = -1, std::string op = {}, int64_t seq = -1, int peer = -1)
      : Error(ErrorKind::kMismatch, std::move(message), rank, std::move(op), seq, peer) {}
};

// Throws kSystem with "<what>: <strerror(err)>".
[[noreturn]] void throw_system_error(std::string_view what, int err);

namespace detail {
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] void check_failed(const char* file, int line, const std::string& message);
}  // namespace detail

}  // namespace chorus

// CHORUS_CHECK(cond, parts...): internal invariant; throws kInternal with the place.
#define CHORUS_CHECK(cond, ...)                                                 \
  do {                                                                          \
    if (!(cond)) [[unlikely]]                                                   \
      ::chorus::detail::check_failed(                                           \
          __FILE__, __LINE__,                                                   \
          ::chorus::detail::concat("check failed: " #cond " ", ##__VA_ARGS__)); \
  } while (0)

// CHORUS_CHECK_EQ(a, b, parts...) and friends print both values.
#define CHORUS_CHECK_OP_(a, b, op, ...)                                                        \
  do {                                                                                         \
    const auto& chorus_a_ = (a);                                                               \
    const auto& chorus_b_ = (b);                                                               \
    if (!(chorus_a_ op chorus_b_)) [[unlikely]]                                                \
      ::chorus::detail::check_failed(                                                          \
          __FILE__, __LINE__,                                                                  \
          ::chorus::detail::concat("check failed: " #a " " #op " " #b " (", chorus_a_, " vs ", \
                                   chorus_b_, ") ", ##__VA_ARGS__));                           \
  } while (0)
#define CHORUS_CHECK_EQ(a, b, ...) CHORUS_CHECK_OP_(a, b, ==, ##__VA_ARGS__)
#define CHORUS_CHECK_NE(a, b, ...) CHORUS_CHECK_OP_(a, b, !=, ##__VA_ARGS__)
#define CHORUS_CHECK_LT(a, b, ...) CHORUS_CHECK_OP_(a, b, <, ##__VA_ARGS__)
#define CHORUS_CHECK_LE(a, b, ...) CHORUS_CHECK_OP_(a, b, <=, ##__VA_ARGS__)
#define CHORUS_CHECK_GE(a, b, ...) CHORUS_CHECK_OP_(a, b, >=, ##__VA_ARGS__)

// CHORUS_ARG_CHECK(cond, parts...): validates a caller's argument; throws InvalidArgument.
#define CHORUS_ARG_CHECK(cond, ...)                                           \
  do {                                                                        \
    if (!(cond)) [[unlikely]]                                                 \
      throw ::chorus::InvalidArgument(::chorus::detail::concat(__VA_ARGS__)); \
  } while (0)

// CHORUS_SYSCALL(expr): evaluates a POSIX call returning -1 on error; throws kSystem naming it.
#define CHORUS_SYSCALL(expr)                      \
  ([&]() {                                        \
    auto chorus_r_ = (expr);                      \
    if (chorus_r_ == -1) [[unlikely]]             \
      ::chorus::throw_system_error(#expr, errno); \
    return chorus_r_;                             \
  }())
