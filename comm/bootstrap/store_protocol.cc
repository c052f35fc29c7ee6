#include "bootstrap/store_protocol.h"

#include <charconv>
#include <type_traits>

#include "chorus/error.h"

namespace chorus::bootstrap {
namespace {

template <class T>
void put(std::string& out, T v) {
  auto u = static_cast<std::make_unsigned_t<T>>(v);
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}

template <class T>
T get(const char* p) {
  std::make_unsigned_t<T> u = 0;
  for (size_t i = 0; i < sizeof(T); ++i)
    u |= static_cast<std::make_unsigned_t<T>>(static_cast<uint8_t>(p[i])) << (8 * i);
  return static_cast<T>(u);
}

}  // namespace

std::string_view to_string(Op op) {
  switch (op) {
    case Op::kSet:
      return "set";
    case Op::kGet:
      return "get";
    case Op::kTryGet:
      return "try_get";
    case Op::kAdd:
      return "add";
    case Op::kRemove:
      return "remove";
    case Op::kWait:
      return "wait";
  }
  return "unknown";
}

void append_request(std::string& out, Op op, std::string_view key, std::string_view value,
                    int64_t timeout_ms) {
  CHORUS_CHECK_LE(key.size(), kMaxKeyBytes);
  CHORUS_CHECK_LE(value.size(), kMaxValueBytes);
  out.reserve(out.size() + kRequestHeaderBytes + key.size() + value.size());
  put(out, static_cast<uint8_t>(op));
  put(out, static_cast<uint32_t>(key.size()));
  put(out, static_cast<uint32_t>(value.size()));
  put(out, timeout_ms);
  out.append(key);
  out.append(value);
}

void append_reply(std::string& out, Status status, std::string_view value) {
  CHORUS_CHECK_LE(value.size(), kMaxValueBytes);
  put(out, static_cast<uint8_t>(status));
  put(out, static_cast<uint32_t>(value.size()));
  out.append(value);
}

std::optional<RequestHeader> parse_request_header(const char* p, std::string* error) {
  RequestHeader h{static_cast<Op>(get<uint8_t>(p)), get<uint32_t>(p + 1), get<uint32_t>(p + 5),
                  get<int64_t>(p + 9)};
  auto op = static_cast<uint8_t>(h.op);
  if (op < static_cast<uint8_t>(Op::kSet) || op > static_cast<uint8_t>(Op::kWait)) {
    *error = detail::concat("unknown op ", static_cast<int>(op));
    return std::nullopt;
  }
  if (h.key_bytes > kMaxKeyBytes) {
    *error = detail::concat("key of ", h.key_bytes, " bytes (at most ", kMaxKeyBytes, ")");
    return std::nullopt;
  }
  if (h.value_bytes > kMaxValueBytes) {
    *error = detail::concat("value of ", h.value_bytes, " bytes (at most ", kMaxValueBytes, ")");
    return std::nullopt;
  }
  if (h.timeout_ms < 0) {
    *error = detail::concat("negative timeout ", h.timeout_ms);
    return std::nullopt;
  }
  const bool takes_value = h.op == Op::kSet || h.op == Op::kAdd || h.op == Op::kWait;
  if (!takes_value && h.value_bytes != 0) {
    *error = detail::concat(to_string(h.op), " with a ", h.value_bytes, "-byte value");
    return std::nullopt;
  }
  if (h.op == Op::kWait && h.key_bytes != 0) {
    *error = "wait with a key outside its key list";
    return std::nullopt;
  }
  return h;
}

std::optional<ReplyHeader> parse_reply_header(const char* p, std::string* error) {
  ReplyHeader h{static_cast<Status>(get<uint8_t>(p)), get<uint32_t>(p + 1)};
  if (static_cast<uint8_t>(h.status) > static_cast<uint8_t>(Status::kError)) {
    *error = detail::concat("unknown reply status ", static_cast<int>(h.status));
    return std::nullopt;
  }
  if (h.value_bytes > kMaxValueBytes) {
    *error = detail::concat("reply of ", h.value_bytes, " bytes");
    return std::nullopt;
  }
  return h;
}

std::string encode_key_list(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& key : keys) {
    CHORUS_CHECK_LE(key.size(), kMaxKeyBytes);
    put(out, static_cast<uint32_t>(key.size()));
    out.append(key);
  }
  return out;
}

std::optional<std::vector<std::string>> decode_key_list(std::string_view bytes) {
  std::vector<std::string> keys;
  while (!bytes.empty()) {
    if (bytes.size() < 4) return std::nullopt;
    uint32_t n = get<uint32_t>(bytes.data());
    bytes.remove_prefix(4);
    if (n > kMaxKeyBytes || n > bytes.size()) return std::nullopt;
    keys.emplace_back(bytes.substr(0, n));
    bytes.remove_prefix(n);
  }
  return keys;
}

std::optional<int64_t> parse_int64(std::string_view text) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

}  // namespace chorus::bootstrap
