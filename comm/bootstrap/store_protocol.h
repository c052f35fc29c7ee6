// chorus — wire format of the bootstrap store (TcpStore <-> TcpStoreServer).
//
// One request, then one reply, on a TCP connection; integers are fixed-width little-endian.
//
//   request:  op:u8  key_bytes:u32  value_bytes:u32  timeout_ms:i64  key  value
//   reply:    status:u8  value_bytes:u32  value
//
// The lengths and timeout form a fixed 17-byte header ahead of the bytes they describe, so the
// server rejects an oversized frame from its header before buffering any of it.
//
//   op       request                              reply
//   kSet     key, value                           kOk
//   kGet     key, timeout_ms                      kOk + value, or kTimedOut at the deadline
//   kTryGet  key                                  kOk + value, or kNotFound
//   kAdd     key, value = delta as decimal text   kOk + new value as decimal text, or kError +
//                                                 message (stored value not an integer, overflow)
//   kRemove  key                                  kOk, or kNotFound
//   kWait    value = key list, timeout_ms         kOk, or kTimedOut + key list of those missing
//
// A key list is a sequence of (length:u32, bytes). Keys are at most kMaxKeyBytes, values (and key
// lists) at most kMaxValueBytes. kGet and kWait are parked by the server until they can be
// answered or their deadline passes, so the reply on a connection always belongs to the request
// just sent. Anything else (unknown op, oversized lengths, a body that does not fit its op, a
// negative timeout, a connection closed mid-frame) is malformed: the server closes that one
// connection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::bootstrap {

inline constexpr size_t kMaxKeyBytes = size_t{4} << 10;
inline constexpr size_t kMaxValueBytes = size_t{64} << 20;
inline constexpr size_t kRequestHeaderBytes = 1 + 4 + 4 + 8;
inline constexpr size_t kReplyHeaderBytes = 1 + 4;

enum class Op : uint8_t { kSet = 1, kGet, kTryGet, kAdd, kRemove, kWait };
enum class Status : uint8_t { kOk = 0, kNotFound, kTimedOut, kError };

std::string_view to_string(Op op);

struct RequestHeader {
  Op op;
  uint32_t key_bytes;
  uint32_t value_bytes;
  int64_t timeout_ms;

  size_t frame_bytes() const { return kRequestHeaderBytes + key_bytes + value_bytes; }
};

struct ReplyHeader {
  Status status;
  uint32_t value_bytes;
};

// Appends one encoded request / reply to `out`.
void append_request(std::string& out, Op op, std::string_view key, std::string_view value,
                    int64_t timeout_ms);
void append_reply(std::string& out, Status status, std::string_view value);

// Decodes and validates a header (kRequestHeaderBytes / kReplyHeaderBytes at `p`); nullopt with
// the reason in *error when it is malformed.
std::optional<RequestHeader> parse_request_header(const char* p, std::string* error);
std::optional<ReplyHeader> parse_reply_header(const char* p, std::string* error);

std::string encode_key_list(const std::vector<std::string>& keys);
// nullopt when truncated or when a key exceeds kMaxKeyBytes.
std::optional<std::vector<std::string>> decode_key_list(std::string_view bytes);

// Strict decimal int64 ("-12", no spaces, no '+', no overflow); the counters of add().
std::optional<int64_t> parse_int64(std::string_view text);

}  // namespace chorus::bootstrap
