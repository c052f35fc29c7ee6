#include "chorus/error.h"

#include <cstring>

namespace chorus {

std::string_view to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidArgument:
      return "invalid argument";
    case ErrorKind::kTimeout:
      return "timeout";
    case ErrorKind::kPeerFailure:
      return "peer failure";
    case ErrorKind::kTransport:
      return "transport error";
    case ErrorKind::kSystem:
      return "system error";
    case ErrorKind::kInternal:
      return "internal error";
    case ErrorKind::kMismatch:
      return "mismatch";
  }
  return "error";
}

namespace {
std::string format_what(ErrorKind kind, const std::string& message, int rank, const std::string& op,
                        int64_t seq, const std::string& rank_label) {
  std::string s = "chorus ";
  s += to_string(kind);
  if (rank >= 0 || !op.empty()) {
    s += " [";
    bool first = true;
    if (rank >= 0) {
      s += rank_label.empty() ? "rank " + std::to_string(rank) : rank_label;
      first = false;
    }
    if (!op.empty()) {
      s += first ? "" : ", ";
      s += op;
      first = false;
    }
    if (seq >= 0) {
      s += " #" + std::to_string(seq);
    }
    s += "]";
  }
  s += ": ";
  s += message;
  return s;
}
}  // namespace

Error::Error(ErrorKind kind, std::string message, int rank, std::string op, int64_t seq, int peer)
    : std::runtime_error(message),
      kind_(kind),
      rank_(rank),
      op_(std::move(op)),
      seq_(seq),
      peer_(peer),
      message_(std::move(message)),
      what_(format_what(kind_, message_, rank_, op_, seq_, rank_label_)) {}

std::exception_ptr relabeled(const Error& e, std::string message, std::string rank_label) {
  auto make = [&](auto error) {
    error.rank_label_ = std::move(rank_label);
    error.what_ = format_what(error.kind_, error.message_, error.rank_, error.op_, error.seq_,
                              error.rank_label_);
    return std::make_exception_ptr(std::move(error));
  };
  switch (e.kind()) {
    case ErrorKind::kInvalidArgument:
      return make(InvalidArgument(std::move(message), e.rank(), e.op()));
    case ErrorKind::kTimeout:
      return make(Timeout(std::move(message), e.rank(), e.op(), e.seq(), e.peer()));
    case ErrorKind::kPeerFailure:
      return make(PeerFailure(std::move(message), e.rank(), e.op(), e.seq(), e.peer()));
    case ErrorKind::kMismatch:
      return make(Mismatch(std::move(message), e.rank(), e.op(), e.seq(), e.peer()));
    default:
      return make(Error(e.kind(), std::move(message), e.rank(), e.op(), e.seq(), e.peer()));
  }
}

void throw_system_error(std::string_view what, int err) {
  throw Error(ErrorKind::kSystem, detail::concat(what, ": ", std::strerror(err)));
}

namespace detail {
void check_failed(const char* file, int line, const std::string& message) {
  const char* base = std::strrchr(file, '/');
  throw Error(ErrorKind::kInternal, concat(message, " at ", base ? base + 1 : file, ":", line));
}
}  // namespace detail

}  // namespace chorus
