// The bootstrap store client. Each request takes a connection from a small pool (a mutex guards
// it), so a thread parked in get() or wait() never holds up another thread's set(): the first
// connection is made by the constructor, more only while requests overlap. Every wait has the
// store's timeout as its bound (the communicator's, for the stores from_env makes): connecting,
// each reply to a request that does not wait for keys, and, beyond their own timeout, the replies
// to get and wait (the server answers those at their deadline at the latest); an open
// DeadlineScope cuts any of them shorter. A server that does not answer in time is stopped or
// hung; like a server found gone, it makes every later call fail at once.
#include <algorithm>
#include <cctype>
#include <mutex>
#include <thread>

#include "bootstrap/socket.h"
#include "bootstrap/store_protocol.h"
#include "chorus/error.h"
#include "chorus/log.h"
#include "chorus/store.h"

namespace chorus {
namespace {

using bootstrap::Clock;
using bootstrap::Fd;
using bootstrap::IoStatus;
using bootstrap::Op;
using bootstrap::Status;

constexpr auto kFirstRetry = std::chrono::milliseconds(1);
constexpr auto kMaxRetry = std::chrono::milliseconds(100);
constexpr size_t kMaxIdleConnections = 4;
constexpr size_t kMaxKeysNamed = 8;

// A key as it appears in messages: quoted, non-printable bytes escaped, long keys shortened.
std::string quoted(std::string_view key) {
  constexpr size_t kMaxShown = 120;
  std::string out = "'";
  for (size_t i = 0; i < key.size() && i < kMaxShown; ++i) {
    auto ch = static_cast<unsigned char>(key[i]);
    if (std::isprint(ch) && ch != '\\' && ch != '\'') {
      out.push_back(static_cast<char>(ch));
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out.push_back(kHex[ch >> 4]);
      out.push_back(kHex[ch & 15]);
    }
  }
  if (key.size() > kMaxShown) out += detail::concat("...(", key.size(), " bytes)");
  return out + "'";
}

std::string quoted_list(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size() && i < kMaxKeysNamed; ++i)
    out += (i == 0 ? "" : ", ") + quoted(keys[i]);
  if (keys.size() > kMaxKeysNamed)
    out += detail::concat(" and ", keys.size() - kMaxKeysNamed, " more");
  return out;
}

void check_key(const std::string& key) {
  CHORUS_ARG_CHECK(key.size() <= bootstrap::kMaxKeyBytes, "store key of ", key.size(),
                   " bytes is too long (at most ", bootstrap::kMaxKeyBytes, ")");
}

int64_t timeout_ms(Millis timeout) { return clamp_timeout(timeout).count(); }

struct Reply {
  Status status;
  std::string value;
};

}  // namespace

struct TcpStore::Impl {
  Impl(std::string host, int port, Millis timeout, int server_rank)
      : host_(std::move(host)),
        port_(port),
        server_rank_(server_rank),
        served_by_(server_rank >= 0 ? detail::concat("world rank ", server_rank) : "its server"),
        timeout_(clamp_timeout(timeout)) {}

  std::string address() const { return detail::concat(host_, ":", port_); }
  Millis timeout() const { return timeout_; }
  // The first connection, retried until the timeout (the server may not be up yet).
  void connect();
  // Sends one request and returns its reply. `waits`: how long the server may hold the request
  // (get and wait); the reply must come within that plus the store's timeout.
  Reply request(Op op, const std::string& key, std::string_view value, Millis waits);

 private:
  Fd take_connection();
  void return_connection(Fd fd);
  [[noreturn]] void fail_lost(std::string_view what);
  [[noreturn]] void fail_silent(std::string_view what, Clock::duration waited);
  // "world rank 0, which hosts the bootstrap store at HOST:PORT,"
  std::string server() const;

  const std::string host_;
  const int port_;
  const int server_rank_;
  const std::string served_by_;  // "world rank 0"
  const Millis timeout_;
  std::mutex mutex_;
  std::vector<Fd> idle_;  // guarded by mutex_
  std::string lost_;      // guarded by mutex_; why the server is considered gone, empty until then
};

std::string TcpStore::Impl::server() const {
  return detail::concat(served_by_, ", which hosts the bootstrap store at ", address(), ",");
}

void TcpStore::Impl::connect() {
  const auto start = Clock::now();
  const auto deadline = deadline_after(timeout());
  auto backoff = std::chrono::duration_cast<Clock::duration>(kFirstRetry);
  std::string error;
  int attempts = 0;
  Fd fd;
  for (;;) {
    ++attempts;
    fd = bootstrap::try_connect_tcp(host_, port_, deadline, &error);
    if (fd) break;
    const auto now = Clock::now();
    if (now >= deadline) {
      throw PeerFailure(
          detail::concat("cannot reach the bootstrap store at ", address(), " after ",
                         std::chrono::duration_cast<Millis>(now - start).count(), " ms and ",
                         attempts, " attempts (last error: ", error,
                         "); check CHORUS_MASTER_ADDR/CHORUS_MASTER_PORT (or "
                         "MASTER_ADDR/MASTER_PORT) and that ",
                         served_by_, " is running (CHORUS_TIMEOUT sets how long to try)"),
          -1, {}, -1, server_rank_);
    }
    // Gentle growth keeps the wait after a late server start short relative to the time waited.
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min<Clock::duration>(backoff * 3 / 2, kMaxRetry);
  }
  CHORUS_INFO(kLogBoot, "connected to the bootstrap store at ", address(), " in ",
              std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count(),
              " us (", attempts, attempts == 1 ? " attempt)" : " attempts)");
  return_connection(std::move(fd));
}

Fd TcpStore::Impl::take_connection() {
  {
    std::lock_guard lock(mutex_);
    if (!lost_.empty())
      throw PeerFailure(
          detail::concat("lost the bootstrap store at ", address(), " (earlier: ", lost_, ")"), -1,
          {}, -1, server_rank_);
    if (!idle_.empty()) {
      Fd fd = std::move(idle_.back());
      idle_.pop_back();
      return fd;
    }
  }
  // Every pooled connection is busy: another thread is mid-request (perhaps parked in get()).
  std::string error;
  Fd fd = bootstrap::try_connect_tcp(
      host_, port_, std::min(deadline_after(timeout()), DeadlineScope::current()), &error);
  if (!fd) fail_lost(detail::concat("cannot open another connection: ", error));
  return fd;
}

void TcpStore::Impl::return_connection(Fd fd) {
  std::lock_guard lock(mutex_);
  if (lost_.empty() && idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(fd));
}

void TcpStore::Impl::fail_lost(std::string_view what) {
  {
    std::lock_guard lock(mutex_);
    if (lost_.empty()) lost_ = std::string(what);
    idle_.clear();
  }
  throw PeerFailure(detail::concat("lost the bootstrap store at ", address(), " (", what, "); ",
                                   served_by_, ", which serves it, has probably exited or failed"),
                    -1, {}, -1, server_rank_);
}

void TcpStore::Impl::fail_silent(std::string_view what, Clock::duration waited) {
  const std::string why =
      detail::concat(server(), " does not answer: ", what, " had no reply within ",
                     describe_timeout(std::chrono::ceil<Millis>(waited)));
  {
    std::lock_guard lock(mutex_);
    if (lost_.empty()) lost_ = why;
    idle_.clear();
  }
  throw PeerFailure(why +
                        " (the process is stopped or hung, or the port is served by something "
                        "else than a chorus store)",
                    -1, {}, -1, server_rank_);
}

Reply TcpStore::Impl::request(Op op, const std::string& key, std::string_view value, Millis waits) {
  using bootstrap::read_full;
  std::string frame;
  bootstrap::append_request(frame, op, key, value, timeout_ms(waits));
  const auto start = Clock::now();
  // Both clamped, so the sum cannot overflow.
  const auto reply_deadline =
      std::min(deadline_after(clamp_timeout(waits) + timeout()), DeadlineScope::current());
  Fd fd = take_connection();

  const auto what = [&] {
    return op == Op::kWait ? std::string("wait") : detail::concat(to_string(op), " ", quoted(key));
  };
  auto check = [&](IoStatus status) {
    if (status == IoStatus::kClosed) fail_lost(detail::concat("connection closed during ", what()));
    // The reply may still come; this connection is out of step and is dropped with fd.
    if (status == IoStatus::kTimedOut) fail_silent(what(), reply_deadline - start);
  };
  check(bootstrap::write_full(fd.get(), frame.data(), frame.size(), reply_deadline));

  char header[bootstrap::kReplyHeaderBytes];
  check(read_full(fd.get(), header, sizeof(header), reply_deadline));
  std::string error;
  auto h = bootstrap::parse_reply_header(header, &error);
  if (!h) fail_lost(detail::concat("malformed reply to ", what(), ": ", error));
  Reply reply{h->status, std::string(h->value_bytes, '\0')};
  check(read_full(fd.get(), reply.value.data(), reply.value.size(), reply_deadline));
  return_connection(std::move(fd));
  return reply;
}

TcpStore::TcpStore(const std::string& host, int port, Millis timeout, int server_rank)
    : impl_(std::make_unique<Impl>(host, port, timeout, server_rank)) {
  CHORUS_ARG_CHECK(port > 0 && port <= 65535, "bootstrap store port ", port,
                   " is out of range (1-65535)");
  impl_->connect();
}

TcpStore::~TcpStore() = default;

void TcpStore::set(const std::string& key, const std::string& value) {
  check_key(key);
  CHORUS_ARG_CHECK(value.size() <= bootstrap::kMaxValueBytes, "value of ", value.size(),
                   " bytes for store key ", quoted(key), " is too large (at most ",
                   bootstrap::kMaxValueBytes, ")");
  impl_->request(Op::kSet, key, value, Millis::zero());
}

std::string TcpStore::get(const std::string& key, Millis timeout) {
  check_key(key);
  Reply r = impl_->request(Op::kGet, key, {}, timeout);
  if (r.status == Status::kTimedOut) {
    throw Timeout(detail::concat("timed out after ", describe_timeout(timeout), " waiting for key ",
                                 quoted(key), " in the bootstrap store at ", impl_->address()));
  }
  CHORUS_CHECK(r.status == Status::kOk, "unexpected reply status ", static_cast<int>(r.status));
  return std::move(r.value);
}

std::optional<std::string> TcpStore::try_get(const std::string& key) {
  check_key(key);
  Reply r = impl_->request(Op::kTryGet, key, {}, Millis::zero());
  if (r.status == Status::kNotFound) return std::nullopt;
  CHORUS_CHECK(r.status == Status::kOk, "unexpected reply status ", static_cast<int>(r.status));
  return std::move(r.value);
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  check_key(key);
  Reply r = impl_->request(Op::kAdd, key, std::to_string(delta), Millis::zero());
  if (r.status == Status::kError) {
    throw InvalidArgument(
        detail::concat("cannot add ", delta, " to store key ", quoted(key), ": ", r.value));
  }
  CHORUS_CHECK(r.status == Status::kOk, "unexpected reply status ", static_cast<int>(r.status));
  auto value = bootstrap::parse_int64(r.value);
  CHORUS_CHECK(value.has_value(), "add reply is not an integer: ", quoted(r.value));
  return *value;
}

bool TcpStore::remove(const std::string& key) {
  check_key(key);
  Reply r = impl_->request(Op::kRemove, key, {}, Millis::zero());
  return r.status == Status::kOk;
}

void TcpStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  if (keys.empty()) return;
  for (const auto& key : keys) check_key(key);
  std::string list = bootstrap::encode_key_list(keys);
  CHORUS_ARG_CHECK(list.size() <= bootstrap::kMaxValueBytes, "wait on ", keys.size(),
                   " keys is too large a request");
  Reply r = impl_->request(Op::kWait, {}, list, timeout);
  if (r.status == Status::kTimedOut) {
    auto missing = bootstrap::decode_key_list(r.value).value_or(keys);
    throw Timeout(detail::concat("timed out after ", describe_timeout(timeout), " waiting for ",
                                 missing.size(), " of ", keys.size(),
                                 " keys in the bootstrap store at ", impl_->address(),
                                 "; still missing: ", quoted_list(missing)));
  }
  CHORUS_CHECK(r.status == Status::kOk, "unexpected reply status ", static_cast<int>(r.status));
}

}  // namespace chorus
