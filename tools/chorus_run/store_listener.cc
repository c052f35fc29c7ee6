#include "store_listener.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "chorus/error.h"

namespace chorus::run {
namespace {

struct AddrInfoDeleter {
  void operator()(addrinfo* info) const { ::freeaddrinfo(info); }
};

int bound_port(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  CHORUS_SYSCALL(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len));
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

[[noreturn]] void throw_bind_error(const std::string& where, int err, int port) {
  if (err == EADDRINUSE)
    throw Error(ErrorKind::kSystem,
                detail::concat("cannot listen on ", where, ": port ", port,
                               " is already in use (choose another --master-port, or 0 to let "
                               "the kernel pick one)"));
  if (err == EADDRNOTAVAIL)
    throw Error(ErrorKind::kSystem,
                detail::concat("cannot listen on ", where,
                               ": not an address of this host (node 0 must run where "
                               "--master-addr points)"));
  throw Error(ErrorKind::kSystem,
              detail::concat("cannot listen on ", where, ": ", std::strerror(err)));
}

}  // namespace

StoreListener open_store_listener(const std::string& addr, int port) {
  const std::string where = addr + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* raw = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(addr.c_str(), service.c_str(), &hints, &raw); rc != 0)
    throw Error(ErrorKind::kSystem,
                detail::concat("cannot resolve --master-addr ", addr, ": ", ::gai_strerror(rc)));
  std::unique_ptr<addrinfo, AddrInfoDeleter> infos(raw);

  int last_error = EADDRNOTAVAIL;
  for (const addrinfo* ai = infos.get(); ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd) {
      last_error = errno;
      continue;
    }
    // Lets a restarted job reuse the port while the previous one's connections sit in TIME_WAIT;
    // a port with a live listener still fails with EADDRINUSE.
    int one = 1;
    CHORUS_SYSCALL(::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one));
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd.get(), SOMAXCONN) != 0) {
      last_error = errno;
      continue;
    }
    const int real_port = bound_port(fd.get());
    return StoreListener{std::move(fd), real_port};
  }
  throw_bind_error(where, last_error, port);
}

}  // namespace chorus::run
