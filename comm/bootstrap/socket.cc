#include "bootstrap/socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "chorus/error.h"
#include "chorus/timeout.h"

namespace chorus::bootstrap {
namespace {

using std::chrono::milliseconds;

// Milliseconds left until `deadline`, rounded up so poll() never wakes just before it.
int poll_timeout_ms(Clock::time_point deadline) {
  auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  auto ms = std::chrono::ceil<milliseconds>(left).count();
  return ms > 1'000'000 ? 1'000'000 : static_cast<int>(ms);
}

// Waits until fd is ready for `events`; false at the deadline.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, poll_timeout_ms(deadline));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) throw_system_error("poll", errno);
    if (n == 0 && Clock::now() >= deadline) return false;
  }
}

bool is_disconnect(int err) {
  return err == ECONNRESET || err == EPIPE || err == ENOTCONN || err == ETIMEDOUT ||
         err == EHOSTUNREACH || err == ENETUNREACH;
}

struct AddrInfoDeleter {
  void operator()(addrinfo* ai) const { ::freeaddrinfo(ai); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

// Resolves host:port; on failure returns null with the reason in *error.
AddrInfoPtr resolve(const char* host, int port, int flags, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags | AI_NUMERICSERV;
  addrinfo* result = nullptr;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host, service.c_str(), &hints, &result);
  if (rc != 0) {
    *error = detail::concat("cannot resolve '", host ? host : "",
                            "': ", rc == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(rc));
    return nullptr;
  }
  return AddrInfoPtr(result);
}

// A TCP connection to a port in the ephemeral range can, with nobody listening, connect to itself
// (simultaneous open). Such a socket must be discarded.
bool is_self_connected(int fd) {
  sockaddr_storage local{}, peer{};
  socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) return false;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return false;
  return local_len == peer_len && std::memcmp(&local, &peer, local_len) == 0;
}

Fd connect_one(const addrinfo& ai, Clock::time_point deadline, std::string* error) {
  Fd fd(::socket(ai.ai_family, ai.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai.ai_protocol));
  if (!fd) {
    *error = detail::concat("socket: ", std::strerror(errno));
    return {};
  }
  int rc;
  do {
    rc = ::connect(fd.get(), ai.ai_addr, ai.ai_addrlen);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0 && errno != EINPROGRESS) {
    *error = std::strerror(errno);
    return {};
  }
  if (rc != 0) {
    if (!wait_ready(fd.get(), POLLOUT, deadline)) {
      *error = "connect timed out";
      return {};
    }
    int err = 0;
    socklen_t len = sizeof(err);
    CHORUS_SYSCALL(::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len));
    if (err != 0) {
      *error = std::strerror(err);
      return {};
    }
  }
  if (is_self_connected(fd.get())) {
    *error = "connected to itself (nobody listening)";
    return {};
  }
  tune_tcp(fd.get());
  return fd;
}

std::string host_for_messages(const std::string& host) {
  if (!host.empty() && host != "0.0.0.0" && host != "::") return host;
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "this host";
  return name;
}

}  // namespace

IoStatus read_full(int fd, void* data, size_t bytes, Clock::time_point deadline) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = ::recv(fd, p, bytes, 0);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return IoStatus::kClosed;
    if (errno == EINTR) continue;
    if (is_disconnect(errno)) return IoStatus::kClosed;
    if (errno != EAGAIN && errno != EWOULDBLOCK) throw_system_error("recv", errno);
    if (!wait_ready(fd, POLLIN, deadline)) return IoStatus::kTimedOut;
  }
  return IoStatus::kOk;
}

IoStatus write_full(int fd, const void* data, size_t bytes, Clock::time_point deadline) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (n >= 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (is_disconnect(errno)) return IoStatus::kClosed;
    if (errno != EAGAIN && errno != EWOULDBLOCK) throw_system_error("send", errno);
    if (!wait_ready(fd, POLLOUT, deadline)) return IoStatus::kTimedOut;
  }
  return IoStatus::kOk;
}

Fd try_connect_tcp(const std::string& host, int port, Clock::time_point deadline,
                   std::string* error) {
  AddrInfoPtr addrs = resolve(host.c_str(), port, 0, error);
  if (!addrs) return {};
  for (const addrinfo* ai = addrs.get(); ai != nullptr; ai = ai->ai_next) {
    Fd fd = connect_one(*ai, deadline, error);
    if (fd) return fd;
  }
  return {};
}

Fd listen_tcp(const std::string& host, int port, int backlog) {
  CHORUS_ARG_CHECK(port >= 0 && port <= 65535, "port ", port, " is out of range (0-65535)");
  const bool any = host.empty() || host == "0.0.0.0";
  std::string error;
  AddrInfoPtr addrs = resolve(any ? nullptr : host.c_str(), port, AI_PASSIVE, &error);
  CHORUS_ARG_CHECK(addrs != nullptr, "cannot listen on ", host, ":", port, ": ", error);
  int last_errno = 0;
  for (const addrinfo* ai = addrs.get(); ai != nullptr; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd) {
      last_errno = errno;
      continue;
    }
    int one = 1;
    CHORUS_SYSCALL(::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)));
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno == EADDRINUSE) {
        throw Error(ErrorKind::kSystem,
                    detail::concat("port ", port, " is in use on ", host_for_messages(host),
                                   " (another job? choose another CHORUS_MASTER_PORT or port 0)"));
      }
      last_errno = errno;
      continue;
    }
    CHORUS_SYSCALL(::listen(fd.get(), backlog));
    return fd;
  }
  throw_system_error(detail::concat("cannot listen on ", host, ":", port), last_errno);
}

int local_port(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  CHORUS_SYSCALL(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len));
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  throw InvalidArgument(detail::concat("fd ", fd, " is not a TCP socket"));
}

bool is_listening_socket(int fd) {
  int listening = 0;
  socklen_t len = sizeof(listening);
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0) return false;
  return listening != 0;
}

void set_nonblocking(int fd) {
  int flags = CHORUS_SYSCALL(::fcntl(fd, F_GETFL));
  CHORUS_SYSCALL(::fcntl(fd, F_SETFL, flags | O_NONBLOCK));
}

void set_cloexec(int fd) {
  int flags = CHORUS_SYSCALL(::fcntl(fd, F_GETFD));
  CHORUS_SYSCALL(::fcntl(fd, F_SETFD, flags | FD_CLOEXEC));
}

void tune_tcp(int fd) {
  int one = 1;
  CHORUS_SYSCALL(::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)));
  CHORUS_SYSCALL(::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)));
  int idle_s = 30, interval_s = 5, probes = 6;
  CHORUS_SYSCALL(::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s)));
  CHORUS_SYSCALL(::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s)));
  CHORUS_SYSCALL(::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes)));
}

Clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  return chorus::deadline_after(timeout);
}

}  // namespace chorus::bootstrap
