// The manifest's JSON: written by hand, read by a small recursive-descent parser that knows
// only what JSON the writer produces needs (objects, arrays, strings, numbers).
#include "checkpoint/manifest.h"

#include <cctype>
#include <charconv>
#include <cstdio>
#include <memory>
#include <sstream>

#include "chorus/error.h"

namespace chorus::parallel {

uint64_t fnv1a(const void* data, size_t bytes, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

namespace {

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string hex(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// ---- reading ------------------------------------------------------------------------------

struct Value {
  enum Kind { kNumber, kString, kArray, kObject } kind = kNumber;
  std::string text;  // number (as written) or string
  std::vector<Value> items;
  std::vector<std::pair<std::string, Value>> fields;

  const Value& at(const std::string& key, const std::string& where) const {
    for (const auto& [k, v] : fields)
      if (k == key) return v;
    throw InvalidArgument(where + ": the manifest has no \"" + key + "\"");
  }
  int64_t integer(const std::string& where) const {
    int64_t x = 0;
    const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
    CHORUS_ARG_CHECK(kind == kNumber && ec == std::errc() && p == text.data() + text.size(), where,
                     ": expected an integer, got '", text, "'");
    return x;
  }
  double number(const std::string& where) const {
    CHORUS_ARG_CHECK(kind == kNumber, where, ": expected a number");
    try {
      return std::stod(text);
    } catch (const std::exception&) {
      throw InvalidArgument(where + ": malformed number '" + text + "'");
    }
  }
};

class Parser {
 public:
  Parser(const std::string& s, std::string where) : s_(s), where_(std::move(where)) {}
  Value parse() {
    Value v = value();
    skip();
    if (i_ != s_.size()) fail("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    throw InvalidArgument(where_ + ": malformed manifest (" + what + " at byte " +
                          std::to_string(i_) + ")");
  }
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  char peek() {
    skip();
    if (i_ >= s_.size()) fail("unexpected end");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      if (s_[i_] == '\\' && i_ + 1 < s_.size()) ++i_;
      out += s_[i_++];
    }
    if (i_ >= s_.size()) fail("unterminated string");
    ++i_;
    return out;
  }
  Value value() {
    Value v;
    const char c = peek();
    if (c == '{') {
      v.kind = Value::kObject;
      ++i_;
      if (peek() == '}') {
        ++i_;
        return v;
      }
      while (true) {
        std::string key = string();
        expect(':');
        v.fields.emplace_back(std::move(key), value());
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Value::kArray;
      ++i_;
      if (peek() == ']') {
        ++i_;
        return v;
      }
      while (true) {
        v.items.push_back(value());
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Value::kString;
      v.text = string();
      return v;
    }
    const size_t start = i_;
    while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '-' ||
                              s_[i_] == '+' || s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E'))
      ++i_;
    if (start == i_) fail("unexpected character");
    v.text = s_.substr(start, i_ - start);
    return v;
  }

  const std::string& s_;
  std::string where_;
  size_t i_ = 0;
};

FileInfo file_from(const Value& v, const std::string& where) {
  FileInfo f;
  f.file = v.at("file", where).text;
  f.bytes = static_cast<uint64_t>(v.at("bytes", where).integer(where));
  for (const Value& e : v.at("entries", where).items) {
    Entry x;
    x.name = e.at("name", where).text;
    x.kind = e.at("kind", where).text;
    const auto dt = parse_dtype(e.at("dtype", where).text);
    CHORUS_ARG_CHECK(dt.has_value(), where, ": unknown dtype '", e.at("dtype", where).text, "'");
    x.dtype = *dt;
    for (const Value& d : e.at("shape", where).items) x.shape.push_back(d.integer(where));
    for (const Value& r : e.at("runs", where).items) {
      CHORUS_ARG_CHECK(r.items.size() == 2, where, ": a run of ", x.name,
                       " is not [begin, length]");
      x.runs.emplace_back(r.items[0].integer(where), r.items[1].integer(where));
    }
    x.offset = static_cast<uint64_t>(e.at("offset", where).integer(where));
    x.bytes = static_cast<uint64_t>(e.at("bytes", where).integer(where));
    x.fnv = std::stoull(e.at("fnv", where).text, nullptr, 16);
    f.entries.push_back(std::move(x));
  }
  return f;
}

}  // namespace

std::string to_json(const FileInfo& f) {
  std::ostringstream os;
  os << "{\"file\": " << quoted(f.file) << ", \"bytes\": " << f.bytes << ", \"entries\": [";
  for (size_t i = 0; i < f.entries.size(); ++i) {
    const Entry& e = f.entries[i];
    os << (i ? ",\n    " : "\n    ") << "{\"name\": " << quoted(e.name)
       << ", \"kind\": " << quoted(e.kind)
       << ", \"dtype\": " << quoted(std::string(to_string(e.dtype))) << ", \"shape\": [";
    for (size_t d = 0; d < e.shape.size(); ++d) os << (d ? ", " : "") << e.shape[d];
    os << "], \"runs\": [";
    for (size_t r = 0; r < e.runs.size(); ++r)
      os << (r ? ", " : "") << "[" << e.runs[r].first << ", " << e.runs[r].second << "]";
    os << "], \"offset\": " << e.offset << ", \"bytes\": " << e.bytes << ", \"fnv\": \""
       << hex(e.fnv) << "\"}";
  }
  os << "]}";
  return os.str();
}

std::string to_json(const Manifest& m) {
  std::ostringstream os;
  os.precision(17);
  os << "{\"format\": \"chorus-checkpoint\", \"version\": 1, \"step\": " << m.step
     << ", \"mesh\": " << quoted(m.mesh) << ",\n \"model\": {";
  size_t i = 0;
  for (const auto& [k, v] : m.model) os << (i++ ? ", " : "") << quoted(k) << ": " << v;
  os << "},\n \"scalars\": {";
  i = 0;
  for (const auto& [k, v] : m.scalars) os << (i++ ? ", " : "") << quoted(k) << ": " << v;
  os << "},\n \"files\": [";
  for (size_t f = 0; f < m.files.size(); ++f) os << (f ? ",\n  " : "\n  ") << to_json(m.files[f]);
  os << "]}\n";
  return os.str();
}

FileInfo parse_file_info(const std::string& text, const std::string& where) {
  return file_from(Parser(text, where).parse(), where);
}

Manifest parse_manifest(const std::string& text, const std::string& where) {
  const Value v = Parser(text, where).parse();
  CHORUS_ARG_CHECK(v.kind == Value::kObject && v.at("format", where).text == "chorus-checkpoint",
                   where, ": not a chorus checkpoint manifest");
  CHORUS_ARG_CHECK(v.at("version", where).integer(where) == 1, where, ": manifest version ",
                   v.at("version", where).text, " (this build reads version 1)");
  Manifest m;
  m.step = v.at("step", where).integer(where);
  m.mesh = v.at("mesh", where).text;
  for (const auto& [k, x] : v.at("model", where).fields) m.model[k] = x.integer(where);
  for (const auto& [k, x] : v.at("scalars", where).fields) m.scalars[k] = x.number(where);
  for (const Value& f : v.at("files", where).items) m.files.push_back(file_from(f, where));
  return m;
}

}  // namespace chorus::parallel
