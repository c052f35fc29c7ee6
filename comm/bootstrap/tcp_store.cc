// The bootstrap store client. Each request takes a connection from a small pool (a mutex guards
// it), so a thread parked in get() or wait() never holds up another thread's set(): the first
// connection is made by the constructor, more only while requests overlap. Blocking get/wait
// send their timeout to the server, which answers at the deadline at the latest; the client waits
// a little longer than that (kReplySlack) so it only gives up on its own when the server itself
// has stopped answering. Once any connection finds the server gone, every call fails at once.
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

using comm::bootstrap::Clock;
using comm::bootstrap::Fd;
using comm::bootstrap::IoStatus;
using comm::bootstrap::Op;
using comm::bootstrap::Status;

constexpr auto kFirstRetry = std::chrono::milliseconds(1);
constexpr auto kMaxRetry = std::chrono::milliseconds(100);
// Connections beyond the first are made to a server known to be up: one attempt, this long.
constexpr auto kExtraConnectTimeout = std::chrono::seconds(10);
constexpr size_t kMaxIdleConnections = 4;
constexpr auto kReplySlack = std::chrono::seconds(5);
// Bound on requests that do not wait for keys (set, add, ...): the server answers those at once,
// so only a hung server or host reaches it.
constexpr auto kImmediateReplyTimeout = std::chrono::seconds(300);
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
  CHORUS_ARG_CHECK(key.size() <= comm::bootstrap::kMaxKeyBytes, "store key of ", key.size(),
                   " bytes is too long (at most ", comm::bootstrap::kMaxKeyBytes, ")");
}

int64_t timeout_ms(Millis timeout) { return std::max<int64_t>(timeout.count(), 0); }

struct Reply {
  Status status;
  std::string value;
};

}  // namespace

struct TcpStore::Impl {
  Impl(std::string host, int port) : host_(std::move(host)), port_(port) {}

  std::string address() const { return detail::concat(host_, ":", port_); }
  // The first connection, retried until `connect_timeout` (the server may not be up yet).
  void connect(Millis connect_timeout);
  // Sends one request and returns its reply; the client waits for it until `reply_deadline`.
  Reply request(Op op, const std::string& key, std::string_view value, int64_t timeout,
                Clock::time_point reply_deadline);

 private:
  Fd take_connection();
  void return_connection(Fd fd);
  [[noreturn]] void fail_lost(std::string_view what);

  const std::string host_;
  const int port_;
  std::mutex mutex_;
  std::vector<Fd> idle_;  // guarded by mutex_
  std::string lost_;      // guarded by mutex_; why the server is considered gone, empty until then
};

void TcpStore::Impl::connect(Millis connect_timeout) {
  const auto start = Clock::now();
  const auto deadline = comm::bootstrap::deadline_after(connect_timeout);
  auto backoff = std::chrono::duration_cast<Clock::duration>(kFirstRetry);
  std::string error;
  int attempts = 0;
  Fd fd;
  for (;;) {
    ++attempts;
    fd = comm::bootstrap::try_connect_tcp(host_, port_, deadline, &error);
    if (fd) break;
    const auto now = Clock::now();
    if (now >= deadline) {
      throw PeerFailure(detail::concat("cannot reach the bootstrap store at ", address(), " after ",
                                       std::chrono::duration_cast<Millis>(now - start).count(),
                                       " ms and ", attempts, " attempts (last error: ", error,
                                       "); check CHORUS_MASTER_ADDR/CHORUS_MASTER_PORT (or "
                                       "MASTER_ADDR/MASTER_PORT) and that rank 0 is running"));
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
          detail::concat("lost the bootstrap store at ", address(), " (earlier: ", lost_, ")"));
    if (!idle_.empty()) {
      Fd fd = std::move(idle_.back());
      idle_.pop_back();
      return fd;
    }
  }
  // Every pooled connection is busy: another thread is mid-request (perhaps parked in get()).
  std::string error;
  Fd fd = comm::bootstrap::try_connect_tcp(
      host_, port_, comm::bootstrap::deadline_after(kExtraConnectTimeout), &error);
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
  throw PeerFailure(detail::concat("lost the bootstrap store at ", address(), " (", what,
                                   "); rank 0, which serves it, has probably exited or failed"));
}

Reply TcpStore::Impl::request(Op op, const std::string& key, std::string_view value,
                              int64_t timeout, Clock::time_point reply_deadline) {
  using comm::bootstrap::read_full;
  std::string frame;
  comm::bootstrap::append_request(frame, op, key, value, timeout);
  Fd fd = take_connection();

  const auto what = [&] {
    return op == Op::kWait ? std::string("wait") : detail::concat(to_string(op), " ", quoted(key));
  };
  auto check = [&](IoStatus status) {
    if (status == IoStatus::kClosed) fail_lost(detail::concat("connection closed during ", what()));
    if (status == IoStatus::kTimedOut) {
      // The reply may still come; this connection is out of step and is dropped with fd.
      throw Timeout(detail::concat("the bootstrap store at ", address(), " did not answer ", what(),
                                   " in time; it may be hung"));
    }
  };
  check(comm::bootstrap::write_full(fd.get(), frame.data(), frame.size(), reply_deadline));

  char header[comm::bootstrap::kReplyHeaderBytes];
  check(read_full(fd.get(), header, sizeof(header), reply_deadline));
  std::string error;
  auto h = comm::bootstrap::parse_reply_header(header, &error);
  if (!h) fail_lost(detail::concat("malformed reply to ", what(), ": ", error));
  Reply reply{h->status, std::string(h->value_bytes, '\0')};
  check(read_full(fd.get(), reply.value.data(), reply.value.size(), reply_deadline));
  return_connection(std::move(fd));
  return reply;
}

TcpStore::TcpStore(const std::string& host, int port, Millis connect_timeout)
    : impl_(std::make_unique<Impl>(host, port)) {
  CHORUS_ARG_CHECK(port > 0 && port <= 65535, "bootstrap store port ", port,
                   " is out of range (1-65535)");
  impl_->connect(connect_timeout);
}

TcpStore::~TcpStore() = default;

void TcpStore::set(const std::string& key, const std::string& value) {
  check_key(key);
  CHORUS_ARG_CHECK(value.size() <= comm::bootstrap::kMaxValueBytes, "value of ", value.size(),
                   " bytes for store key ", quoted(key), " is too large (at most ",
                   comm::bootstrap::kMaxValueBytes, ")");
  impl_->request(Op::kSet, key, value, 0, Clock::now() + kImmediateReplyTimeout);
}

std::string TcpStore::get(const std::string& key, Millis timeout) {
  check_key(key);
  Reply r = impl_->request(Op::kGet, key, {}, timeout_ms(timeout),
                           comm::bootstrap::deadline_after(timeout) + kReplySlack);
  if (r.status == Status::kTimedOut) {
    throw Timeout(detail::concat("timed out after ", timeout_ms(timeout), " ms waiting for key ",
                                 quoted(key), " in the bootstrap store at ", impl_->address()));
  }
  CHORUS_CHECK(r.status == Status::kOk, "unexpected reply status ", static_cast<int>(r.status));
  return std::move(r.value);
}

std::optional<std::string> TcpStore::try_get(const std::string& key) {
  check_key(key);
  Reply r = impl_->request(Op::kTryGet, key, {}, 0, Clock::now() + kImmediateReplyTimeout);
  if (r.status == Status::kNotFound) return std::nullopt;
  CHORUS_CHECK(r.status == Status::kOk, "unexpected reply status ", static_cast<int>(r.status));
  return std::move(r.value);
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  check_key(key);
  Reply r = impl_->request(Op::kAdd, key, std::to_string(delta), 0,
                           Clock::now() + kImmediateReplyTimeout);
  if (r.status == Status::kError) {
    throw InvalidArgument(
        detail::concat("cannot add ", delta, " to store key ", quoted(key), ": ", r.value));
  }
  CHORUS_CHECK(r.status == Status::kOk, "unexpected reply status ", static_cast<int>(r.status));
  auto value = comm::bootstrap::parse_int64(r.value);
  CHORUS_CHECK(value.has_value(), "add reply is not an integer: ", quoted(r.value));
  return *value;
}

bool TcpStore::remove(const std::string& key) {
  check_key(key);
  Reply r = impl_->request(Op::kRemove, key, {}, 0, Clock::now() + kImmediateReplyTimeout);
  return r.status == Status::kOk;
}

void TcpStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  if (keys.empty()) return;
  for (const auto& key : keys) check_key(key);
  std::string list = comm::bootstrap::encode_key_list(keys);
  CHORUS_ARG_CHECK(list.size() <= comm::bootstrap::kMaxValueBytes, "wait on ", keys.size(),
                   " keys is too large a request");
  Reply r = impl_->request(Op::kWait, {}, list, timeout_ms(timeout),
                           comm::bootstrap::deadline_after(timeout) + kReplySlack);
  if (r.status == Status::kTimedOut) {
    auto missing = comm::bootstrap::decode_key_list(r.value).value_or(keys);
    throw Timeout(detail::concat("timed out after ", timeout_ms(timeout), " ms waiting for ",
                                 missing.size(), " of ", keys.size(),
                                 " keys in the bootstrap store at ", impl_->address(),
                                 "; still missing: ", quoted_list(missing)));
  }
  CHORUS_CHECK(r.status == Status::kOk, "unexpected reply status ", static_cast<int>(r.status));
}

}  // namespace chorus
