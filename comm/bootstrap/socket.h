// chorus — TCP socket plumbing for the bootstrap store: owned fds (chorus::UniqueFd),
// deadline-bounded full reads/writes, and connect/listen helpers. Sockets are created
// non-blocking and close-on-exec; every wait is bounded by a deadline on the steady clock.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "chorus/unique_fd.h"

namespace chorus::bootstrap {

using Clock = std::chrono::steady_clock;

// The bootstrap's sockets are owned file descriptors.
using Fd = UniqueFd;

// Outcome of a full read or write: the peer closing or resetting the connection is an expected
// event for callers (it means "the other side is gone"), not an exception.
enum class IoStatus { kOk, kClosed, kTimedOut };

// Reads exactly `bytes` from a non-blocking socket, polling until `deadline`. Retries EINTR;
// throws chorus::Error (kSystem) on any other error.
IoStatus read_full(int fd, void* data, size_t bytes, Clock::time_point deadline);
// Writes exactly `bytes` (never raises SIGPIPE); same contract as read_full.
IoStatus write_full(int fd, const void* data, size_t bytes, Clock::time_point deadline);

// One attempt to connect to host:port before `deadline`. Returns a connected, non-blocking,
// TCP_NODELAY socket, or an empty Fd with the reason in *error (refused, unresolvable, ...).
Fd try_connect_tcp(const std::string& host, int port, Clock::time_point deadline,
                   std::string* error);

// A non-blocking listening socket on host:port (empty host or "0.0.0.0" = every interface;
// port 0 = the kernel picks). SO_REUSEADDR is set. Throws chorus::Error when the port is taken,
// naming it and how to choose another.
Fd listen_tcp(const std::string& host, int port, int backlog);

// The local port a socket is bound to.
int local_port(int fd);
// True when fd is a socket in the listening state.
bool is_listening_socket(int fd);

void set_nonblocking(int fd);
void set_cloexec(int fd);
// TCP_NODELAY (bootstrap traffic is small request/reply) and keepalive probes so a vanished host
// is noticed within a minute even when it never sends a FIN.
void tune_tcp(int fd);

// now + timeout, the timeout clamped to chorus::kNoDeadline first (chorus/timeout.h), so that
// huge timeouts ("forever") do not overflow.
Clock::time_point deadline_after(std::chrono::milliseconds timeout);

}  // namespace chorus::bootstrap
