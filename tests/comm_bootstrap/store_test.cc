// TcpStore / TcpStoreServer / PrefixStore behaviour over loopback.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "chorus/error.h"
#include "chorus/store.h"

namespace chorus {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr const char* kHost = "127.0.0.1";

Millis since(Clock::time_point start) {
  return std::chrono::duration_cast<Millis>(Clock::now() - start);
}

// Runs f, expects a chorus::Error of `kind`, and returns it.
template <class F>
Error expect_error(ErrorKind kind, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    return e;
  }
  ADD_FAILURE() << "no chorus::Error thrown";
  return Error(ErrorKind::kInternal, "nothing thrown");
}

class StoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<TcpStore> connect() { return std::make_unique<TcpStore>(kHost, server_->port()); }

  std::unique_ptr<TcpStoreServer> server_ = std::make_unique<TcpStoreServer>(kHost, 0);
  std::unique_ptr<TcpStore> store_ = connect();
};

TEST_F(StoreTest, SetGetTryGetAddRemove) {
  store_->set("a", "1");
  EXPECT_EQ(store_->get("a", 1s), "1");
  EXPECT_EQ(store_->try_get("a"), "1");
  EXPECT_EQ(store_->try_get("missing"), std::nullopt);

  store_->set("a", "overwritten");
  EXPECT_EQ(store_->get("a", 1s), "overwritten");

  const std::string binary("\0\x01\xff value\0", 10);
  store_->set("binary", binary);
  EXPECT_EQ(store_->get("binary", 1s), binary);
  store_->set("empty", "");
  EXPECT_EQ(store_->try_get("empty"), "");

  EXPECT_EQ(store_->add("counter", 5), 5);
  EXPECT_EQ(store_->add("counter", -7), -2);
  EXPECT_EQ(store_->get("counter", 1s), "-2");  // counters read back as decimal text
  store_->set("forty", "40");
  EXPECT_EQ(store_->add("forty", 2), 42);
  auto e = expect_error(ErrorKind::kInvalidArgument, [&] { store_->add("a", 1); });
  EXPECT_NE(e.message().find("'a'"), std::string::npos) << e.what();
  store_->set("max", std::to_string(INT64_MAX));
  expect_error(ErrorKind::kInvalidArgument, [&] { store_->add("max", 1); });

  EXPECT_TRUE(store_->remove("a"));
  EXPECT_FALSE(store_->remove("a"));
  EXPECT_EQ(store_->try_get("a"), std::nullopt);

  store_->wait({"counter", "forty", "empty"}, 1s);
  store_->wait({}, 0ms);
}

TEST_F(StoreTest, KeyAndValueLimits) {
  store_->set(std::string(4096, 'k'), "ok");
  EXPECT_EQ(store_->get(std::string(4096, 'k'), 1s), "ok");
  expect_error(ErrorKind::kInvalidArgument, [&] { store_->set(std::string(4097, 'k'), "v"); });
  expect_error(ErrorKind::kInvalidArgument,
               [&] { store_->set("big", std::string((64u << 20) + 1, 'v')); });
  // The rejected requests never reached the wire: the connection is still in step.
  EXPECT_EQ(store_->get(std::string(4096, 'k'), 1s), "ok");
}

TEST_F(StoreTest, GetBlocksUntilAnotherClientSets) {
  const auto start = Clock::now();
  auto value = std::async(std::launch::async, [&] { return store_->get("late", 10s); });
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(value.wait_for(0s), std::future_status::timeout) << "get returned before the set";
  connect()->set("late", "here");
  EXPECT_EQ(value.get(), "here");
  EXPECT_GE(since(start), 90ms);
  EXPECT_LT(since(start), 5s);
}

TEST_F(StoreTest, WaitWakesOnlyWhenEveryKeyIsSet) {
  auto other = connect();
  auto done = std::async(std::launch::async, [&] { store_->wait({"k1", "k2", "k1"}, 10s); });
  other->set("k1", "x");
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(done.wait_for(0s), std::future_status::timeout) << "wait returned with k2 missing";
  other->add("k2", 1);
  EXPECT_EQ(done.wait_for(5s), std::future_status::ready);
  done.get();
}

TEST_F(StoreTest, WaitTimeoutNamesTheMissingKey) {
  store_->set("present", "1");
  auto start = Clock::now();
  auto e = expect_error(ErrorKind::kTimeout, [&] { store_->wait({"present", "absent"}, 200ms); });
  EXPECT_GE(since(start), 190ms);
  EXPECT_LT(since(start), 2s);
  EXPECT_NE(e.message().find("'absent'"), std::string::npos) << e.what();
  EXPECT_EQ(e.message().find("'present'"), std::string::npos) << e.what();
  EXPECT_NE(e.message().find("1 of 2 keys"), std::string::npos) << e.what();

  start = Clock::now();
  e = expect_error(ErrorKind::kTimeout, [&] { store_->get("nobody-sets-this", 100ms); });
  EXPECT_LT(since(start), 2s);
  EXPECT_NE(e.message().find("'nobody-sets-this'"), std::string::npos) << e.what();
  expect_error(ErrorKind::kTimeout, [&] { store_->get("nobody-sets-this", 0ms); });

  // The server answered each timeout itself, so no stale reply is left on the connection.
  store_->set("after", "fine");
  EXPECT_EQ(store_->get("after", 1s), "fine");
}

TEST_F(StoreTest, TimeoutThrowsTheTimeoutType) {
  EXPECT_THROW(store_->get("never", 20ms), Timeout);
  EXPECT_THROW(store_->wait({"never"}, 20ms), Timeout);
}

TEST_F(StoreTest, RemoveWakesNobody) {
  auto waiter = std::async(std::launch::async, [&] { store_->wait({"r"}, 300ms); });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(connect()->remove("r"));
  EXPECT_THROW(waiter.get(), Timeout);
}

TEST_F(StoreTest, ConcurrentAddFromForkedProcesses) {
  constexpr int kProcs = 8;
  constexpr int kAdds = 1000;
  const int port = server_->port();
  std::vector<pid_t> children;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int status = 0;
      try {
        TcpStore client(kHost, port);
        for (int i = 0; i < kAdds; ++i) client.add("total", 1);
        client.add("done", 1);
      } catch (...) {
        status = 1;
      }
      ::_exit(status);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child " << pid;
  }
  EXPECT_EQ(store_->get("total", 1s), std::to_string(kProcs * kAdds));
  EXPECT_EQ(store_->add("done", 0), kProcs);
}

TEST_F(StoreTest, ManyThreadsShareOneClient) {
  constexpr int kThreads = 8;
  constexpr int kOps = 200;
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kOps; ++i) {
        std::string key = "t" + std::to_string(t) + "/" + std::to_string(i);
        std::string value = key + "=" + std::to_string(t * 100000 + i);
        store_->set(key, value);
        store_->add("shared", 1);
        if (store_->get(key, 1s) != value) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(store_->add("shared", 0), kThreads * kOps);
}

TEST_F(StoreTest, ParkedGetDoesNotHoldUpOtherThreadsOfTheSameClient) {
  // One client: a thread waits for a key that another thread of the same client then sets.
  auto value = std::async(std::launch::async, [&] { return store_->get("from-sibling", 10s); });
  auto done = std::async(std::launch::async, [&] { store_->wait({"from-sibling", "too"}, 10s); });
  std::this_thread::sleep_for(50ms);
  const auto start = Clock::now();
  store_->set("from-sibling", "v");
  store_->add("too", 1);
  EXPECT_EQ(value.get(), "v");
  done.get();
  EXPECT_LT(since(start), 2s);
}

TEST_F(StoreTest, LargeValue) {
  std::string big(16u << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 2654435761u) >> 13);
  store_->set("big", big);
  EXPECT_TRUE(connect()->get("big", 5s) == big);
  EXPECT_TRUE(store_->try_get("big") == big);
}

TEST_F(StoreTest, ServerLostFailsPromptlyWithPeerFailure) {
  auto waiter = std::async(std::launch::async, [&] { store_->get("never-set", 30s); });
  std::this_thread::sleep_for(50ms);
  const auto start = Clock::now();
  server_.reset();
  auto e = expect_error(ErrorKind::kPeerFailure, [&] { waiter.get(); });
  EXPECT_LT(since(start), 2s);
  EXPECT_NE(e.message().find("lost the bootstrap store at 127.0.0.1:"), std::string::npos)
      << e.what();
  // Later calls fail the same way, at once.
  expect_error(ErrorKind::kPeerFailure, [&] { store_->set("k", "v"); });
}

TEST(StoreServerLost, IdleClientNoticesOnItsNextCall) {
  auto server = std::make_unique<TcpStoreServer>(kHost, 0);
  TcpStore store(kHost, server->port());
  store.set("k", "v");
  server.reset();
  const auto start = Clock::now();
  expect_error(ErrorKind::kPeerFailure, [&] { store.get("k", 30s); });
  EXPECT_LT(since(start), 2s);
}

TEST(StoreConnect, RetriesUntilTheServerStarts) {
  int port = TcpStoreServer(kHost, 0).port();  // a port that was free a moment ago
  auto client = std::async(std::launch::async,
                           [&] { return std::make_unique<TcpStore>(kHost, port, Millis(10000)); });
  std::this_thread::sleep_for(100ms);
  TcpStoreServer server(kHost, port);
  auto store = client.get();
  store->set("k", "v");
  EXPECT_EQ(store->get("k", 1s), "v");
}

TEST(StoreConnect, FailureNamesTheAddress) {
  int port = TcpStoreServer(kHost, 0).port();
  const auto start = Clock::now();
  auto e = expect_error(ErrorKind::kPeerFailure, [&] { TcpStore(kHost, port, Millis(150)); });
  EXPECT_GE(since(start), 140ms);
  EXPECT_LT(since(start), 2s);
  EXPECT_NE(e.message().find("127.0.0.1:" + std::to_string(port)), std::string::npos) << e.what();
  EXPECT_NE(e.message().find("CHORUS_MASTER_ADDR"), std::string::npos) << e.what();
  EXPECT_NE(e.message().find("rank 0"), std::string::npos) << e.what();
}

TEST(StoreConnect, HappyPathIsFast) {
  TcpStoreServer server(kHost, 0);
  const auto start = Clock::now();
  TcpStore store(kHost, server.port());
  store.set("k", "v");
  EXPECT_EQ(store.get("k", 1s), "v");
  // Generous for a loaded CI machine; on an idle one this takes well under a millisecond.
  EXPECT_LT(since(start), 500ms);
}

TEST(StoreServer, PortInUse) {
  TcpStoreServer first(kHost, 0);
  auto e = expect_error(ErrorKind::kSystem, [&] { TcpStoreServer(kHost, first.port()); });
  const std::string expected = "port " + std::to_string(first.port()) + " is in use on 127.0.0.1";
  EXPECT_NE(e.message().find(expected), std::string::npos) << e.what();
  EXPECT_NE(e.message().find("CHORUS_MASTER_PORT or port 0"), std::string::npos) << e.what();
}

TEST(StoreServer, AdoptsAnInheritedListeningSocket) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 16), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);

  auto server = TcpStoreServer::adopt(fd);
  EXPECT_EQ(server->port(), ntohs(addr.sin_port));
  TcpStore store(kHost, server->port());
  store.set("adopted", "yes");
  EXPECT_EQ(store.get("adopted", 1s), "yes");
}

TEST(StoreServer, AdoptRejectsWhatIsNotAListeningSocket) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  expect_error(ErrorKind::kInvalidArgument, [&] { TcpStoreServer::adopt(fd); });
  ::close(fd);  // a rejected fd stays the caller's
  expect_error(ErrorKind::kInvalidArgument, [&] { TcpStoreServer::adopt(-1); });
}

TEST_F(StoreTest, PrefixStoresAreIsolated) {
  auto base = std::shared_ptr<Store>(connect());
  PrefixStore a(base, "a/");
  PrefixStore b(base, "b/");
  a.set("k", "1");
  EXPECT_EQ(b.try_get("k"), std::nullopt);
  EXPECT_EQ(base->get("a/k", 1s), "1");
  b.set("k", "2");
  EXPECT_EQ(a.get("k", 1s), "1");
  EXPECT_EQ(b.get("k", 1s), "2");
  EXPECT_EQ(a.add("n", 3), 3);
  EXPECT_EQ(b.add("n", 1), 1);
  a.wait({"k", "n"}, 1s);
  auto e = expect_error(ErrorKind::kTimeout, [&] { b.wait({"k", "only-in-a"}, 50ms); });
  EXPECT_NE(e.message().find("'b/only-in-a'"), std::string::npos) << e.what();
  EXPECT_TRUE(a.remove("k"));
  EXPECT_EQ(b.get("k", 1s), "2");
  // Nested prefixes compose.
  PrefixStore nested(std::make_shared<PrefixStore>(base, "a/"), "sub/");
  nested.set("x", "y");
  EXPECT_EQ(base->get("a/sub/x", 1s), "y");
}

// ---- a store that does not answer ----------------------------------------------------------

// A listening socket nobody serves: connections complete (the kernel's backlog) but no request is
// ever answered, like a stopped rank 0 or a stranger on the master port.
class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
  }
  ~SilentListener() { ::close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(StoreSilent, ARequestFailsAtTheStoresTimeoutNamingTheHost) {
  SilentListener silent;
  TcpStore store(kHost, silent.port(), 300ms);  // connecting succeeds: the kernel accepts
  const auto start = Clock::now();
  auto e = expect_error(ErrorKind::kPeerFailure, [&] { store.set("k", "v"); });
  EXPECT_GE(since(start), 280ms);
  EXPECT_LT(since(start), 2s);
  EXPECT_NE(e.message().find("rank 0, which hosts the bootstrap store at 127.0.0.1:" +
                             std::to_string(silent.port()) + ", does not answer"),
            std::string::npos)
      << e.what();
  EXPECT_NE(e.message().find("set 'k'"), std::string::npos) << e.what();
  // Every later call fails at once.
  const auto later = Clock::now();
  auto again = expect_error(ErrorKind::kPeerFailure, [&] { store.try_get("k"); });
  EXPECT_LT(since(later), 100ms);
  EXPECT_NE(again.message().find("does not answer"), std::string::npos) << again.what();
}

TEST(StoreSilent, AGetWaitsItsOwnTimeoutPlusTheStoresTimeout) {
  SilentListener silent;
  TcpStore store(kHost, silent.port(), 300ms);
  const auto start = Clock::now();
  expect_error(ErrorKind::kPeerFailure, [&] { store.get("k", 400ms); });
  EXPECT_GE(since(start), 680ms);
  EXPECT_LT(since(start), 2s);
}

TEST(StoreSilent, ADeadlineScopeCutsEveryWaitShorter) {
  SilentListener silent;
  TcpStore store(kHost, silent.port(), 30s);
  const auto start = Clock::now();
  {
    DeadlineScope scope(Clock::now() + 200ms);
    auto e = expect_error(ErrorKind::kPeerFailure, [&] { store.get("k", 30s); });
    EXPECT_NE(e.message().find("within 0.2 s"), std::string::npos) << e.what();
  }
  EXPECT_GE(since(start), 180ms);
  EXPECT_LT(since(start), 2s);
}

TEST(StoreSilent, HugeTimeoutsDoNotWrapAround) {
  TcpStoreServer server(kHost, 0);
  TcpStore store(kHost, server.port(), Millis::max());
  store.set("k", "v");
  EXPECT_EQ(store.get("k", Millis::max()), "v");
  EXPECT_EQ(store.get("k", kNoDeadline), "v");
  store.wait({"k"}, Millis::max());
}

}  // namespace
}  // namespace chorus
