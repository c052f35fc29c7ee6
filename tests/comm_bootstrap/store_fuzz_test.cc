// The store's wire format, and the server's resilience to hostile or broken clients: malformed,
// oversized and truncated frames, clients that never read, clients that vanish while parked.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "bootstrap/socket.h"
#include "bootstrap/store_protocol.h"
#include "chorus/error.h"
#include "chorus/store.h"

namespace chorus::bootstrap {
namespace {

using namespace std::chrono_literals;

constexpr const char* kHost = "127.0.0.1";

// A request header with arbitrary (possibly invalid) fields, little-endian like the real one.
std::string raw_header(uint8_t op, uint32_t key_bytes, uint32_t value_bytes, int64_t timeout_ms) {
  std::string out(1, static_cast<char>(op));
  auto put = [&](uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  put(key_bytes, 4);
  put(value_bytes, 4);
  put(static_cast<uint64_t>(timeout_ms), 8);
  return out;
}

std::string request(Op op, std::string_view key, std::string_view value, int64_t timeout_ms) {
  std::string out;
  append_request(out, op, key, value, timeout_ms);
  return out;
}

Fd raw_connect(int port) {
  std::string error;
  Fd fd = try_connect_tcp(kHost, port, deadline_after(2s), &error);
  EXPECT_TRUE(fd) << error;
  return fd;
}

// Sends what it can: the server may close the connection before reading everything.
void send_bytes(const Fd& fd, std::string_view bytes) {
  write_full(fd.get(), bytes.data(), bytes.size(), deadline_after(2s));
}

// True when the server closes the connection (after any reply bytes) within two seconds.
bool closed_by_server(const Fd& fd) {
  const auto deadline = deadline_after(2s);
  char byte;
  for (;;) {
    IoStatus s = read_full(fd.get(), &byte, 1, deadline);
    if (s != IoStatus::kOk) return s == IoStatus::kClosed;
  }
}

TEST(StoreProtocol, RequestHeaderRoundTripAndValidation) {
  std::string frame = request(Op::kGet, "key", {}, 1234);
  ASSERT_EQ(frame.size(), kRequestHeaderBytes + 3);
  std::string error;
  auto h = parse_request_header(frame.data(), &error);
  ASSERT_TRUE(h) << error;
  EXPECT_EQ(h->op, Op::kGet);
  EXPECT_EQ(h->key_bytes, 3u);
  EXPECT_EQ(h->value_bytes, 0u);
  EXPECT_EQ(h->timeout_ms, 1234);
  EXPECT_EQ(h->frame_bytes(), frame.size());

  auto rejects = [](const std::string& header) {
    std::string why;
    return !parse_request_header(header.data(), &why) && !why.empty();
  };
  EXPECT_TRUE(rejects(raw_header(0, 1, 0, 0)));
  EXPECT_TRUE(rejects(raw_header(7, 1, 0, 0)));
  EXPECT_TRUE(rejects(raw_header(1, kMaxKeyBytes + 1, 0, 0)));
  EXPECT_TRUE(rejects(raw_header(1, 1, kMaxValueBytes + 1, 0)));
  EXPECT_TRUE(rejects(raw_header(2, 1, 0, -1)));
  EXPECT_TRUE(rejects(raw_header(static_cast<uint8_t>(Op::kGet), 1, 5, 0)));
  EXPECT_TRUE(rejects(raw_header(static_cast<uint8_t>(Op::kWait), 3, 5, 0)));
  EXPECT_FALSE(rejects(raw_header(1, kMaxKeyBytes, kMaxValueBytes, 0)));
}

TEST(StoreProtocol, KeyListsAndIntegers) {
  std::vector<std::string> keys{"a", "", std::string("\0b", 2), std::string(kMaxKeyBytes, 'k')};
  std::string list = encode_key_list(keys);
  EXPECT_EQ(decode_key_list(list), keys);
  EXPECT_EQ(decode_key_list(""), std::vector<std::string>{});
  EXPECT_FALSE(decode_key_list(list.substr(0, list.size() - 1)));
  EXPECT_FALSE(decode_key_list(std::string("\x01\x00", 2)));
  EXPECT_FALSE(decode_key_list(raw_header(0, kMaxKeyBytes + 1, 0, 0).substr(1, 4) +
                               std::string(kMaxKeyBytes + 1, 'k')));

  EXPECT_EQ(parse_int64("0"), 0);
  EXPECT_EQ(parse_int64("-17"), -17);
  EXPECT_EQ(parse_int64("9223372036854775807"), INT64_MAX);
  for (const char* bad : {"", "+1", " 1", "1 ", "1.0", "0x10", "9223372036854775808", "-"})
    EXPECT_FALSE(parse_int64(bad)) << bad;
}

TEST(StoreFuzz, ServerSurvivesMalformedTruncatedAndOversizedInput) {
  TcpStoreServer server(kHost, 0);
  const int port = server.port();
  TcpStore bystander(kHost, port);
  bystander.set("before", "fuzz");

  // Connections left holding half a frame for the whole run must not hold up anyone else.
  std::vector<Fd> stalled;
  for (int i = 0; i < 8; ++i) {
    stalled.push_back(raw_connect(port));
    send_bytes(stalled.back(), raw_header(1, 10, 1 << 20, 0).substr(0, 3 + i));
  }

  std::mt19937_64 rng(20240601);
  auto random_bytes = [&](size_t n) {
    std::string s(n, '\0');
    for (auto& ch : s) ch = static_cast<char>(rng());
    return s;
  };
  auto uniform = [&](uint64_t lo, uint64_t hi) { return lo + rng() % (hi - lo + 1); };

  constexpr int kConnections = 3000;
  int expected_closes = 0, observed_closes = 0;
  for (int i = 0; i < kConnections; ++i) {
    Fd fd = raw_connect(port);
    ASSERT_TRUE(fd);
    bool must_close = true;  // the server has to drop this one on its own
    switch (i % 6) {
      case 0:  // noise; it may even be a valid request, so only send and hang up
        send_bytes(fd, random_bytes(uniform(0, 64)));
        must_close = false;
        break;
      case 1: {  // lengths over the limits, followed by a little of the promised body
        bool big_key = rng() % 2 == 0;
        auto key = static_cast<uint32_t>(big_key ? uniform(kMaxKeyBytes + 1, UINT32_MAX) : 4);
        auto value = static_cast<uint32_t>(big_key ? 0 : uniform(kMaxValueBytes + 1, UINT32_MAX));
        send_bytes(fd, raw_header(static_cast<uint8_t>(uniform(1, 6)), key, value, 0) +
                           random_bytes(uniform(0, 256)));
        break;
      }
      case 2: {  // a valid request cut short, then the client goes away
        static const Op kOps[] = {Op::kSet, Op::kGet, Op::kAdd, Op::kWait};
        Op op = kOps[rng() % 4];
        std::string value = op == Op::kSet    ? random_bytes(uniform(0, 3000))
                            : op == Op::kAdd  ? "12"
                            : op == Op::kWait ? encode_key_list({"x", "y"})
                                              : "";
        std::string frame = request(op, op == Op::kWait ? "" : "fuzz-key", value, 5000);
        send_bytes(fd, std::string_view(frame).substr(0, uniform(1, frame.size() - 1)));
        must_close = false;
        break;
      }
      case 3:  // unknown op
        send_bytes(
            fd, raw_header(rng() % 2 ? 0 : static_cast<uint8_t>(uniform(7, 255)), 1, 0, 0) + "k");
        break;
      case 4: {  // bodies that do not fit their op
        // 11 bytes: (1, "a") ends at 5, (2, "bb") at 11; cutting anywhere else is malformed.
        std::string list = encode_key_list({"a", "bb"});
        size_t cut = uniform(1, list.size() - 2);
        std::string body = rng() % 2 ? list.substr(0, cut < 5 ? cut : cut + 1) : "12x";
        send_bytes(fd, body == "12x" ? request(Op::kAdd, "n", body, 0)
                                     : request(Op::kWait, "", body, 100));
        break;
      }
      case 5:  // header fields that contradict each other
        send_bytes(fd, rng() % 2 ? raw_header(static_cast<uint8_t>(Op::kGet), 1, 0, -5) + "k"
                                 : raw_header(static_cast<uint8_t>(Op::kTryGet), 1, 3, 0) + "kvvv");
        break;
    }
    if (must_close) {
      ++expected_closes;
      if (closed_by_server(fd)) ++observed_closes;
    }
    if (i % 500 == 499) {
      ASSERT_EQ(bystander.get("before", 1s), "fuzz") << "after " << i + 1;
    }
  }
  EXPECT_EQ(observed_closes, expected_closes);

  // The server still serves well-formed clients, old and new, with the stalled ones still open.
  EXPECT_EQ(bystander.get("before", 1s), "fuzz");
  TcpStore fresh(kHost, port);
  fresh.set("after", "still-serving");
  EXPECT_EQ(bystander.get("after", 1s), "still-serving");
  EXPECT_EQ(fresh.add("count", 2), 2);
  fresh.wait({"before", "after"}, 1s);
}

TEST(StoreFuzz, ClientThatNeverReadsDoesNotStallTheServer) {
  TcpStoreServer server(kHost, 0);
  TcpStore store(kHost, server.port());
  store.set("big", std::string(8u << 20, 'b'));
  Fd greedy = raw_connect(server.port());
  std::string pipelined;
  for (int i = 0; i < 32; ++i) append_request(pipelined, Op::kGet, "big", {}, 0);
  send_bytes(greedy, pipelined);  // and never read a reply
  std::this_thread::sleep_for(50ms);
  TcpStore other(kHost, server.port());
  other.set("k", "v");
  EXPECT_EQ(store.get("k", 1s), "v");
}

TEST(StoreFuzz, ParkedClientThatVanishesIsForgotten) {
  TcpStoreServer server(kHost, 0);
  TcpStore store(kHost, server.port());
  for (int i = 0; i < 20; ++i) {
    Fd fd = raw_connect(server.port());
    send_bytes(fd, i % 2 ? request(Op::kGet, "later", {}, 60000)
                         : request(Op::kWait, "", encode_key_list({"later", "never"}), 60000));
  }
  std::this_thread::sleep_for(50ms);
  store.set("later", "now");
  EXPECT_EQ(store.get("later", 1s), "now");
  EXPECT_THROW(store.wait({"never"}, 50ms), chorus::Timeout);
}

}  // namespace
}  // namespace chorus::bootstrap
