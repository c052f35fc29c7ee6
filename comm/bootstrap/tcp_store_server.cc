// The bootstrap store server: one thread, one poll() loop over non-blocking sockets.
//
// Each connection is a strict request/reply stream. A connection is in one of three states:
//   reading  - waiting for (the rest of) a request frame               poll POLLIN
//   replying - a reply is queued but the socket buffer is full         poll POLLOUT
//   parked   - a get/wait whose keys are not all set yet               poll POLLRDHUP only
// Input is not read while replying or parked, so a client that pipelines requests or never reads
// its replies costs at most one frame of memory. Parked requests are answered by the set/add that
// completes them (through waiters_, key -> parked connection ids) or with kTimedOut at their
// deadline. Connections are closed only between events (dead + sweep), so handlers may hold
// references to them.
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "bootstrap/socket.h"
#include "bootstrap/store_protocol.h"
#include "chorus/error.h"
#include "chorus/log.h"
#include "chorus/store.h"

namespace chorus {
namespace {

using bootstrap::Clock;
using bootstrap::Fd;
using bootstrap::Op;
using bootstrap::RequestHeader;
using bootstrap::Status;

constexpr int kBacklog = 4096;  // the kernel caps it at net.core.somaxconn
constexpr size_t kReadChunk = size_t{256} << 10;
constexpr size_t kKeepCapacity = size_t{1} << 20;  // buffers above this shrink once drained
constexpr int kAcceptBurst = 256;                  // accepts per wake-up, so serving continues
constexpr auto kAcceptPause = std::chrono::milliseconds(100);  // after EMFILE and the like
constexpr uint64_t kMalformedLoggedInFull = 16;

struct Parked {
  Op op;
  std::vector<std::string> keys;            // as requested (kGet: one key)
  std::unordered_set<std::string> missing;  // those not set yet
  Clock::time_point deadline;
};

struct Connection {
  uint64_t id = 0;
  Fd fd;
  std::string peer;  // "address:port", for log lines
  std::string in;
  std::string out;
  size_t out_sent = 0;
  std::optional<Parked> parked;
  bool dead = false;

  bool replying() const { return out_sent < out.size(); }
};

std::string peer_name(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  char host[NI_MAXHOST] = "?", port[NI_MAXSERV] = "?";
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    ::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), port, sizeof(port),
                  NI_NUMERICHOST | NI_NUMERICSERV);
  return detail::concat(host, ":", port);
}

void release_if_large(std::string& buffer) {
  if (buffer.empty() && buffer.capacity() > kKeepCapacity) std::string().swap(buffer);
}

}  // namespace

struct TcpStoreServer::Impl {
  explicit Impl(Fd listen_fd);
  ~Impl();

  void run() noexcept;
  void loop();
  int poll_timeout_ms(Clock::time_point now) const;

  void accept_clients();
  void service(Connection& c, short revents);
  void read_some(Connection& c);
  void process(Connection& c);
  void handle(Connection& c, const RequestHeader& h, std::string key, std::string_view value);
  void handle_add(Connection& c, const std::string& key, std::string_view delta_text);
  void handle_wait(Connection& c, std::string_view key_list, int64_t timeout_ms);

  void reply(Connection& c, Status status, std::string_view value);
  void flush(Connection& c);
  void park(Connection& c, Op op, std::vector<std::string> keys,
            std::unordered_set<std::string> missing, int64_t timeout_ms);
  void unpark(Connection& c);
  void notify(const std::string& key);
  void expire_deadlines(Clock::time_point now);
  void drain_runnable();
  void mark_dead(Connection& c, std::string_view why, bool malformed);
  void sweep_dead();

  Fd listen_fd_;
  Fd wake_fd_;
  int port_ = 0;

  // Owned by the server thread once it runs.
  std::unordered_map<std::string, std::string> data_;
  std::unordered_map<uint64_t, Connection> conns_;
  std::unordered_map<std::string, std::vector<uint64_t>> waiters_;
  std::vector<uint64_t> runnable_;  // just unparked: may hold buffered requests to process
  uint64_t next_id_ = 1;
  uint64_t malformed_count_ = 0;
  Clock::time_point accept_paused_until_{};
  std::array<char, kReadChunk> scratch_;

  std::thread thread_;  // last: starts once every member above exists
};

TcpStoreServer::Impl::Impl(Fd listen_fd) : listen_fd_(std::move(listen_fd)) {
  wake_fd_ = Fd(CHORUS_SYSCALL(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)));
  port_ = bootstrap::local_port(listen_fd_.get());
  thread_ = std::thread([this] { run(); });
}

TcpStoreServer::Impl::~Impl() {
  uint64_t one = 1;
  // eventfd writes of 8 bytes cannot be partial; EINTR is the only transient failure.
  while (::write(wake_fd_.get(), &one, sizeof(one)) < 0 && errno == EINTR) {
  }
  thread_.join();
}

void TcpStoreServer::Impl::run() noexcept {
  try {
    loop();
  } catch (const std::exception& e) {
    // Closing every connection makes each client fail promptly instead of at its deadline.
    CHORUS_WARN(kLogBoot, "bootstrap store on port ", port_, " stopped: ", e.what());
    conns_.clear();
  }
}

void TcpStoreServer::Impl::loop() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  for (;;) {
    const auto now = Clock::now();
    fds.clear();
    ids.clear();
    fds.push_back({wake_fd_.get(), POLLIN, 0});
    // A negative fd is skipped by poll(): that is how accepting pauses.
    fds.push_back({now >= accept_paused_until_ ? listen_fd_.get() : -1, POLLIN, 0});
    for (const auto& [id, c] : conns_) {
      short events = c.parked ? POLLRDHUP : c.replying() ? POLLOUT : POLLIN;
      fds.push_back({c.fd.get(), events, 0});
      ids.push_back(id);
    }
    int n = ::poll(fds.data(), fds.size(), poll_timeout_ms(now));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_system_error("poll", errno);
    }
    if (fds[0].revents != 0) return;  // the destructor asked us to stop
    if (fds[1].revents != 0) accept_clients();
    for (size_t i = 0; i < ids.size(); ++i) {
      if (fds[i + 2].revents == 0) continue;
      auto it = conns_.find(ids[i]);
      if (it != conns_.end()) service(it->second, fds[i + 2].revents);
    }
    expire_deadlines(Clock::now());
    drain_runnable();
    sweep_dead();
  }
}

int TcpStoreServer::Impl::poll_timeout_ms(Clock::time_point now) const {
  std::optional<Clock::time_point> wake;
  if (now < accept_paused_until_) wake = accept_paused_until_;
  for (const auto& [id, c] : conns_)
    if (c.parked && (!wake || c.parked->deadline < *wake)) wake = c.parked->deadline;
  if (!wake) return -1;
  if (*wake <= now) return 0;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(*wake - now).count();
  return static_cast<int>(std::min<int64_t>(ms, 1'000'000));
}

void TcpStoreServer::Impl::accept_clients() {
  for (int i = 0; i < kAcceptBurst; ++i) {
    int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      CHORUS_WARN(kLogBoot, "bootstrap store on port ", port_,
                  " cannot accept connections: ", std::strerror(errno),
                  errno == EMFILE ? " (too many open files: raise `ulimit -n`)" : "");
      accept_paused_until_ = Clock::now() + kAcceptPause;
      return;
    }
    Connection c;
    c.fd = Fd(fd);
    c.id = next_id_++;
    c.peer = peer_name(fd);
    try {
      bootstrap::tune_tcp(fd);
    } catch (const Error& e) {
      CHORUS_WARN(kLogBoot, "bootstrap store: dropping connection from ", c.peer, ": ", e.what());
      continue;
    }
    CHORUS_TRACE(kLogBoot, "bootstrap store: connection from ", c.peer);
    conns_.emplace(c.id, std::move(c));
  }
}

void TcpStoreServer::Impl::service(Connection& c, short revents) {
  try {
    if (c.parked) {
      if (revents & (POLLRDHUP | POLLHUP | POLLERR)) mark_dead(c, "closed while waiting", false);
      return;
    }
    if (c.replying()) {
      flush(c);
      if (!c.replying()) process(c);
      return;
    }
    read_some(c);
    process(c);
  } catch (const std::exception& e) {
    mark_dead(c, e.what(), true);
  }
}

void TcpStoreServer::Impl::read_some(Connection& c) {
  ssize_t n;
  do {
    n = ::recv(c.fd.get(), scratch_.data(), scratch_.size(), 0);
  } while (n < 0 && errno == EINTR);
  if (n > 0) {
    c.in.append(scratch_.data(), static_cast<size_t>(n));
  } else if (n == 0) {
    if (c.in.empty()) {
      mark_dead(c, "closed", false);
    } else {
      mark_dead(c,
                detail::concat("closed in the middle of a request (", c.in.size(),
                               " bytes of it received)"),
                true);
    }
  } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
    mark_dead(c, std::strerror(errno), false);
  }
}

// Serves the complete requests buffered on c, one at a time, until one parks, a reply cannot be
// sent at once, or the buffer holds only part of a frame.
void TcpStoreServer::Impl::process(Connection& c) {
  using bootstrap::kRequestHeaderBytes;
  while (!c.dead && !c.parked && !c.replying() && c.in.size() >= kRequestHeaderBytes) {
    std::string error;
    auto h = bootstrap::parse_request_header(c.in.data(), &error);
    if (!h) {
      mark_dead(c, error, true);
      return;
    }
    if (c.in.size() < h->frame_bytes()) return;
    const char* body = c.in.data() + kRequestHeaderBytes;
    handle(c, *h, std::string(body, h->key_bytes),
           std::string_view(body + h->key_bytes, h->value_bytes));
    c.in.erase(0, h->frame_bytes());
  }
  release_if_large(c.in);
}

void TcpStoreServer::Impl::handle(Connection& c, const RequestHeader& h, std::string key,
                                  std::string_view value) {
  switch (h.op) {
    case Op::kSet:
      data_[key].assign(value);
      reply(c, Status::kOk, {});
      notify(key);
      return;
    case Op::kGet:
    case Op::kTryGet: {
      auto it = data_.find(key);
      if (it != data_.end()) {
        reply(c, Status::kOk, it->second);
      } else if (h.op == Op::kTryGet) {
        reply(c, Status::kNotFound, {});
      } else if (h.timeout_ms == 0) {
        reply(c, Status::kTimedOut, {});
      } else {
        std::unordered_set<std::string> missing{key};
        park(c, Op::kGet, {std::move(key)}, std::move(missing), h.timeout_ms);
      }
      return;
    }
    case Op::kAdd:
      handle_add(c, key, value);
      return;
    case Op::kRemove:  // wakes nobody: waiters want keys to appear, not disappear
      reply(c, data_.erase(key) != 0 ? Status::kOk : Status::kNotFound, {});
      return;
    case Op::kWait:
      handle_wait(c, value, h.timeout_ms);
      return;
  }
}

void TcpStoreServer::Impl::handle_add(Connection& c, const std::string& key,
                                      std::string_view delta_text) {
  auto delta = bootstrap::parse_int64(delta_text);
  if (!delta) {
    mark_dead(c, "add with a delta that is not a decimal integer", true);
    return;
  }
  int64_t current = 0;
  if (auto it = data_.find(key); it != data_.end()) {
    auto parsed = bootstrap::parse_int64(it->second);
    if (!parsed) {
      reply(c, Status::kError, "its value is not a decimal integer");
      return;
    }
    current = *parsed;
  }
  int64_t next = 0;
  if (__builtin_add_overflow(current, *delta, &next)) {
    reply(c, Status::kError, detail::concat(current, " + ", *delta, " overflows int64"));
    return;
  }
  std::string text = std::to_string(next);
  data_[key] = text;
  reply(c, Status::kOk, text);
  notify(key);
}

void TcpStoreServer::Impl::handle_wait(Connection& c, std::string_view key_list,
                                       int64_t timeout_ms) {
  auto keys = bootstrap::decode_key_list(key_list);
  if (!keys) {
    mark_dead(c, "wait with a malformed key list", true);
    return;
  }
  std::unordered_set<std::string> missing;
  for (const auto& key : *keys)
    if (!data_.contains(key)) missing.insert(key);
  if (missing.empty()) {
    reply(c, Status::kOk, {});
  } else if (timeout_ms == 0) {
    std::vector<std::string> still(missing.begin(), missing.end());
    reply(c, Status::kTimedOut, bootstrap::encode_key_list(still));
  } else {
    park(c, Op::kWait, std::move(*keys), std::move(missing), timeout_ms);
  }
}

void TcpStoreServer::Impl::reply(Connection& c, Status status, std::string_view value) {
  bootstrap::append_reply(c.out, status, value);
  flush(c);
}

void TcpStoreServer::Impl::flush(Connection& c) {
  while (c.replying()) {
    ssize_t n =
        ::send(c.fd.get(), c.out.data() + c.out_sent, c.out.size() - c.out_sent, MSG_NOSIGNAL);
    if (n >= 0) {
      c.out_sent += static_cast<size_t>(n);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return;  // the loop polls for POLLOUT
    } else if (errno != EINTR) {
      mark_dead(c, std::strerror(errno), false);
      return;
    }
  }
  c.out.clear();
  c.out_sent = 0;
  release_if_large(c.out);
}

void TcpStoreServer::Impl::park(Connection& c, Op op, std::vector<std::string> keys,
                                std::unordered_set<std::string> missing, int64_t timeout_ms) {
  for (const auto& key : missing) waiters_[key].push_back(c.id);
  c.parked = Parked{op, std::move(keys), std::move(missing),
                    bootstrap::deadline_after(std::chrono::milliseconds(timeout_ms))};
}

void TcpStoreServer::Impl::unpark(Connection& c) {
  for (const auto& key : c.parked->missing) {
    auto it = waiters_.find(key);
    if (it == waiters_.end()) continue;
    std::erase(it->second, c.id);
    if (it->second.empty()) waiters_.erase(it);
  }
  c.parked.reset();
}

void TcpStoreServer::Impl::notify(const std::string& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  std::vector<uint64_t> ids = std::move(it->second);
  waiters_.erase(it);
  for (uint64_t id : ids) {
    auto conn = conns_.find(id);
    if (conn == conns_.end()) continue;
    Connection& w = conn->second;
    if (w.dead || !w.parked || w.parked->missing.erase(key) == 0 || !w.parked->missing.empty())
      continue;
    const bool is_get = w.parked->op == Op::kGet;
    w.parked.reset();
    reply(w, Status::kOk, is_get ? std::string_view(data_.at(key)) : std::string_view());
    runnable_.push_back(id);
  }
}

void TcpStoreServer::Impl::expire_deadlines(Clock::time_point now) {
  for (auto& [id, c] : conns_) {
    if (c.dead || !c.parked || c.parked->deadline > now) continue;
    std::string missing;
    if (c.parked->op == Op::kWait) {
      std::vector<std::string> still;
      for (const auto& key : c.parked->keys)
        if (c.parked->missing.contains(key)) still.push_back(key);
      missing = bootstrap::encode_key_list(still);
    }
    unpark(c);
    reply(c, Status::kTimedOut, missing);
    runnable_.push_back(id);
  }
}

void TcpStoreServer::Impl::drain_runnable() {
  while (!runnable_.empty()) {
    std::vector<uint64_t> ids;
    ids.swap(runnable_);
    for (uint64_t id : ids) {
      auto it = conns_.find(id);
      if (it == conns_.end()) continue;
      try {
        process(it->second);
      } catch (const std::exception& e) {
        mark_dead(it->second, e.what(), true);
      }
    }
  }
}

void TcpStoreServer::Impl::mark_dead(Connection& c, std::string_view why, bool malformed) {
  if (c.dead) return;
  c.dead = true;
  if (!malformed) {
    CHORUS_TRACE(kLogBoot, "bootstrap store: connection from ", c.peer, " ", why);
    return;
  }
  // A port scanner or a confused client must not flood the log: the first few in full, then a
  // count now and then.
  uint64_t n = ++malformed_count_;
  if (n <= kMalformedLoggedInFull || n % 1024 == 0) {
    CHORUS_WARN(kLogBoot, "bootstrap store on port ", port_, ": closing the connection from ",
                c.peer, ": ", why,
                n == kMalformedLoggedInFull  ? " (further ones are counted, not logged)"
                : n > kMalformedLoggedInFull ? detail::concat(" (", n, " such connections so far)")
                                             : std::string());
  }
}

void TcpStoreServer::Impl::sweep_dead() {
  for (auto it = conns_.begin(); it != conns_.end();) {
    if (!it->second.dead) {
      ++it;
      continue;
    }
    if (it->second.parked) unpark(it->second);
    it = conns_.erase(it);
  }
}

TcpStoreServer::TcpStoreServer(const std::string& host, int port)
    : impl_(std::make_unique<Impl>(bootstrap::listen_tcp(host, port, kBacklog))) {
  CHORUS_INFO(kLogBoot, "bootstrap store listening on ", host.empty() ? "*" : host, ":",
              impl_->port_);
}

TcpStoreServer::TcpStoreServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<TcpStoreServer> TcpStoreServer::adopt(int listen_fd) {
  CHORUS_ARG_CHECK(listen_fd >= 0, "cannot adopt fd ", listen_fd, ": not a file descriptor");
  CHORUS_ARG_CHECK(bootstrap::is_listening_socket(listen_fd), "cannot adopt fd ", listen_fd,
                   ": it is not a listening socket (check CHORUS_STORE_FD)");
  // Inherited sockets arrive blocking and inheritable; the server needs neither.
  bootstrap::set_nonblocking(listen_fd);
  bootstrap::set_cloexec(listen_fd);
  auto impl = std::make_unique<Impl>(Fd(listen_fd));
  CHORUS_INFO(kLogBoot, "bootstrap store serving inherited socket ", listen_fd, " on port ",
              impl->port_);
  return std::unique_ptr<TcpStoreServer>(new TcpStoreServer(std::move(impl)));
}

TcpStoreServer::~TcpStoreServer() = default;

int TcpStoreServer::port() const { return impl_->port_; }

}  // namespace chorus
