// The wire form of a Topology: a magic word and a version, then every field in declaration
// order; integers little-endian with fixed widths, strings and arrays length-prefixed (u32).
#include <bit>
#include <cstring>

#include "chorus/error.h"
#include "chorus/topo/serialize.h"

namespace chorus::topo {
namespace {

constexpr uint32_t kMagic = 0x4f504f54;  // "TOPO"
constexpr uint32_t kVersion = 1;
static_assert(std::endian::native == std::endian::little, "the wire form assumes little-endian");

class Writer {
 public:
  template <class T>
  void put(T value) {
    out_.append(reinterpret_cast<const char*>(&value), sizeof value);
  }
  void put(const std::string& s) {
    put(static_cast<uint32_t>(s.size()));
    out_ += s;
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <class T>
  T get() {
    need(sizeof(T));
    T value;
    std::memcpy(&value, in_.data() + pos_, sizeof value);
    pos_ += sizeof value;
    return value;
  }
  std::string get_string() {
    const uint32_t n = get<uint32_t>();
    need(n);
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  // A count of elements, each at least `min_bytes` long: bounds allocations by the input size.
  uint32_t get_count(size_t min_bytes) {
    const uint32_t n = get<uint32_t>();
    CHORUS_ARG_CHECK(n <= (in_.size() - pos_) / min_bytes, "serialised topology: count ", n,
                     " exceeds the remaining ", in_.size() - pos_, " bytes");
    return n;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  void need(size_t n) const {
    CHORUS_ARG_CHECK(n <= in_.size() - pos_, "serialised topology truncated at byte ", pos_, " of ",
                     in_.size());
  }
  std::string_view in_;
  size_t pos_ = 0;
};

}  // namespace

std::string serialize(const Topology& t) {
  Writer w;
  w.put(kMagic);
  w.put(kVersion);
  w.put(t.hostname);
  w.put(t.gpu_link_name);
  w.put(static_cast<uint32_t>(t.nodes.size()));
  for (const Node& n : t.nodes) {
    w.put(static_cast<uint8_t>(n.kind));
    w.put(static_cast<int32_t>(n.parent));
    w.put(n.name);
    w.put(n.detail);
    w.put(n.pci_bus_id);
    w.put(n.cpus);
    w.put(n.memory_bytes);
    w.put(static_cast<int32_t>(n.os_index));
  }
  w.put(static_cast<uint32_t>(t.cores.size()));
  for (const Core& c : t.cores) {
    w.put(static_cast<int32_t>(c.numa));
    w.put(static_cast<uint32_t>(c.pus.size()));
    for (int pu : c.pus) w.put(static_cast<int32_t>(pu));
  }
  w.put(static_cast<uint32_t>(t.caches.size()));
  for (const CacheLevel& c : t.caches) {
    w.put(c.name);
    w.put(c.bytes);
    w.put(static_cast<int32_t>(c.count));
  }
  w.put(static_cast<uint32_t>(t.gpu_links.size()));
  for (const GpuLink& l : t.gpu_links) {
    w.put(static_cast<int32_t>(l.a));
    w.put(static_cast<int32_t>(l.b));
    w.put(l.gbps);
  }
  return w.take();
}

Topology deserialize(std::string_view bytes) {
  Reader r(bytes);
  CHORUS_ARG_CHECK(r.get<uint32_t>() == kMagic, "not a serialised topology");
  const uint32_t version = r.get<uint32_t>();
  CHORUS_ARG_CHECK(version == kVersion, "serialised topology of version ", version,
                   "; this build reads version ", kVersion, " (mixed chorus versions in one job?)");
  Topology t;
  t.hostname = r.get_string();
  t.gpu_link_name = r.get_string();
  t.nodes.resize(r.get_count(1 + 4 + 4 * 4 + 8 + 4));
  for (Node& n : t.nodes) {
    const uint8_t kind = r.get<uint8_t>();
    CHORUS_ARG_CHECK(kind <= static_cast<uint8_t>(NodeKind::kNic),
                     "serialised topology: node kind ", int{kind});
    n.kind = static_cast<NodeKind>(kind);
    n.parent = r.get<int32_t>();
    n.name = r.get_string();
    n.detail = r.get_string();
    n.pci_bus_id = r.get_string();
    n.cpus = r.get_string();
    n.memory_bytes = r.get<uint64_t>();
    n.os_index = r.get<int32_t>();
  }
  t.cores.resize(r.get_count(8));
  for (Core& c : t.cores) {
    c.numa = r.get<int32_t>();
    c.pus.resize(r.get_count(4));
    for (int& pu : c.pus) pu = r.get<int32_t>();
  }
  t.caches.resize(r.get_count(4 + 8 + 4));
  for (CacheLevel& c : t.caches) {
    c.name = r.get_string();
    c.bytes = r.get<uint64_t>();
    c.count = r.get<int32_t>();
  }
  t.gpu_links.resize(r.get_count(16));
  for (GpuLink& l : t.gpu_links) {
    l.a = r.get<int32_t>();
    l.b = r.get<int32_t>();
    l.gbps = r.get<double>();
  }
  CHORUS_ARG_CHECK(r.done(), "serialised topology has trailing bytes");
  t.validate();
  return t;
}

}  // namespace chorus::topo
