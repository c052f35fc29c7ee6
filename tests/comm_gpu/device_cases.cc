#include "device_cases.h"

#include <cstring>
#include <functional>
#include <sstream>
#include <vector>

#include "reference.h"

namespace chorus::testing {
namespace {

constexpr std::byte kFill{0xA5};
constexpr size_t kGuard = DeviceArena::kGuard;

// Arbitrary-but-unique data for data-movement collectives (as tests/comm uses).
int64_t payload(DataType dtype, int source, size_t index, int salt) {
  return input_value(dtype, ReduceOp::kMax, source, index, salt);
}

bool is_reducing(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduceScatter || c == Collective::kReduce;
}

// A rank's two buffers, A and B (elements), and where send and recv point into them. The
// layouts are those of tests/comm/collective_cases.cc, NCCL's in-place layouts included.
struct Place {
  int buffer = -1;  // 0: A, 1: B, -1: null
  size_t offset = 0;
};
struct Layout {
  size_t a = 0, b = 0;
  Place send, recv;
};

Layout layout(const DeviceCase& k, int r, int n) {
  const size_t c = k.count, nc = static_cast<size_t>(n) * c, rc = static_cast<size_t>(r) * c;
  const bool root = r == k.root, ip = k.in_place;
  Layout l;
  switch (k.coll) {
    case Collective::kAllReduce:
    case Collective::kBroadcast:
      l = {c, c, {0, 0}, ip ? Place{0, 0} : Place{1, 0}};
      break;
    case Collective::kReduce:
      l = {c, c, {0, 0}, !root ? Place{} : ip ? Place{0, 0} : Place{1, 0}};
      break;
    case Collective::kReduceScatter:
      l = {nc, c, {0, 0}, ip ? Place{0, rc} : Place{1, 0}};
      break;
    case Collective::kAllGather:
      l = {c, nc, ip ? Place{1, rc} : Place{0, 0}, {1, 0}};
      break;
    case Collective::kGather:
      l = {c, nc, ip && root ? Place{1, rc} : Place{0, 0}, root ? Place{1, 0} : Place{}};
      break;
    case Collective::kScatter:
      l = {nc, c, root ? Place{0, 0} : Place{}, ip && root ? Place{0, rc} : Place{1, 0}};
      break;
    case Collective::kAllToAll:
      l = {nc, nc, {0, 0}, {1, 0}};
      break;
    case Collective::kSendRecv:
      l = {c, c, {0, 0}, {1, 0}};
      break;
    case Collective::kSend:
    case Collective::kRecv:
      l = {c, c, r % 2 == 0 ? Place{0, 0} : Place{}, r % 2 == 1 ? Place{1, 0} : Place{}};
      break;
    default:
      break;
  }
  return l;
}

// A buffer as the host sees it: guard | data | guard, all kFill to start with.
struct Image {
  explicit Image(size_t data_bytes) : bytes(kGuard + data_bytes + kGuard, kFill) {}
  std::byte* data() { return bytes.data() + kGuard; }
  bool guards_intact() const {
    for (size_t i = 0; i < kGuard; ++i)
      if (bytes[i] != kFill || bytes[bytes.size() - 1 - i] != kFill) return false;
    return true;
  }
  std::vector<std::byte> bytes;
};

// Issues the call of `k` on the given pointers.
Work issue(Communicator& comm, const DeviceCase& k, const void* send, void* recv, gpu::Stream s) {
  const int n = comm.size(), r = comm.rank();
  const size_t c = k.count;
  const DataType t = k.dtype;
  const bool on_stream = k.issue == Issue::kStream;
  const bool blocking = k.issue == Issue::kBlocking;
  // The three forms of each call: stream-ordered, plain blocking, plain async.
#define CHORUS_CALL(name, ...)                               \
  do {                                                       \
    if (on_stream) return comm.name##_async(__VA_ARGS__, s); \
    if (blocking) {                                          \
      comm.name(__VA_ARGS__);                                \
      return Work();                                         \
    }                                                        \
    return comm.name##_async(__VA_ARGS__);                   \
  } while (0)
  switch (k.coll) {
    case Collective::kAllReduce:
      CHORUS_CALL(all_reduce, send, recv, c, t, k.op);
    case Collective::kReduceScatter:
      CHORUS_CALL(reduce_scatter, send, recv, c, t, k.op);
    case Collective::kAllGather:
      CHORUS_CALL(all_gather, send, recv, c, t);
    case Collective::kBroadcast:
      CHORUS_CALL(broadcast, send, recv, c, t, k.root);
    case Collective::kReduce:
      CHORUS_CALL(reduce, send, recv, c, t, k.op, k.root);
    case Collective::kGather:
      CHORUS_CALL(gather, send, recv, c, t, k.root);
    case Collective::kScatter:
      CHORUS_CALL(scatter, send, recv, c, t, k.root);
    case Collective::kAllToAll:
      CHORUS_CALL(all_to_all, send, recv, c, t);
    case Collective::kSendRecv:
      CHORUS_CALL(send_recv, send, c, (r + 1) % n, recv, c, (r + n - 1) % n, t);
    case Collective::kSend:
    case Collective::kRecv:
      if (r % 2 == 0) CHORUS_CALL(send, send, c, t, r + 1);
      CHORUS_CALL(recv, recv, c, t, r - 1);
    default:
      ADD_FAILURE() << "no such case " << k.describe();
      return Work();
  }
#undef CHORUS_CALL
}

// The output this rank must check: its region, element count and exact values.
struct Expected {
  Place where;
  size_t count = 0;
  std::function<double(size_t)> value;
};

Expected expected(const DeviceCase& k, const Layout& l, int r, int n) {
  const size_t c = k.count, nc = static_cast<size_t>(n) * c;
  const DataType t = k.dtype;
  const int s = k.salt;
  const auto reduced = [=](size_t base) {
    return [=](size_t i) { return expected_reduction(t, k.op, n, base + i, s); };
  };
  const auto from = [=](int source) {
    return [=](size_t i) { return static_cast<double>(payload(t, source, i, s)); };
  };
  const auto blocks = [=](size_t i) {
    return static_cast<double>(payload(t, static_cast<int>(i / c), i % c, s));
  };
  switch (k.coll) {
    case Collective::kAllReduce:
      return {l.recv, c, reduced(0)};
    case Collective::kReduceScatter:
      return {l.recv, c, reduced(static_cast<size_t>(r) * c)};
    case Collective::kAllGather:
      return {l.recv, nc, blocks};
    case Collective::kBroadcast:
      return {l.recv, c, from(k.root)};
    case Collective::kReduce:
      if (r == k.root) return {l.recv, c, reduced(0)};
      return {l.send, c,
              [=](size_t i) { return static_cast<double>(input_value(t, k.op, r, i, s)); }};
    case Collective::kGather:
      if (r == k.root) return {l.recv, nc, blocks};
      return {};
    case Collective::kScatter:
      return {l.recv, c, from(r)};
    case Collective::kAllToAll:
      return {l.recv, nc, [=](size_t i) {
                return static_cast<double>(payload(t, static_cast<int>(i / c) * n + r, i % c, s));
              }};
    case Collective::kSendRecv:
      return {l.recv, c, from((r + n - 1) % n)};
    case Collective::kSend:
    case Collective::kRecv:
      if (r % 2 == 1) return {l.recv, c, from(r - 1)};
      return {l.send, c, from(r)};  // the sender's buffer stays as it was
    default:
      return {};
  }
}

// Writes this rank's inputs into the host images.
void fill(const DeviceCase& k, const Layout& l, int r, int n, std::byte* a, std::byte* b) {
  const size_t c = k.count, nc = static_cast<size_t>(n) * c;
  const DataType t = k.dtype;
  std::byte* base[2] = {a, b};
  const auto at = [&](Place p) { return base[p.buffer] + p.offset * dtype_size(t); };
  if (is_reducing(k.coll)) {
    const size_t elems = k.coll == Collective::kReduceScatter ? nc : c;
    fill_inputs(t, k.op, r, at(l.send), elems, 0, k.salt);
    return;
  }
  switch (k.coll) {
    case Collective::kBroadcast:
      for (size_t i = 0; i < c; ++i)
        store(t, at(l.send), i, r == k.root ? payload(t, r, i, k.salt) : 0);
      break;
    case Collective::kScatter:
      if (r != k.root) break;
      for (size_t i = 0; i < nc; ++i)
        store(t, at(l.send), i, payload(t, static_cast<int>(i / c), i % c, k.salt));
      break;
    case Collective::kAllToAll:
      for (size_t i = 0; i < nc; ++i)
        store(t, at(l.send), i, payload(t, r * n + static_cast<int>(i / c), i % c, k.salt));
      break;
    case Collective::kRecv:
    case Collective::kSend:
      if (r % 2 == 1) break;
      [[fallthrough]];
    default:  // all_gather, gather, send_recv: this rank's block
      for (size_t i = 0; i < c; ++i) store(t, at(l.send), i, payload(t, r, i, k.salt));
      break;
  }
}

}  // namespace

std::string DeviceCase::describe() const {
  std::ostringstream os;
  os << to_string(coll) << "[dtype=" << to_string(dtype) << " op=" << to_string(op)
     << " count=" << count << (in_place ? " in-place" : " out-of-place") << " root=" << root
     << (issue == Issue::kStream     ? " stream"
         : issue == Issue::kBlocking ? " blocking"
                                     : " async")
     << (host_memory ? " host-memory" : " device-memory") << "]";
  return os.str();
}

size_t arena_bytes_for(size_t count, DataType dtype, int world) {
  // Two buffers of at most world x count elements, with guards and alignment.
  return 2 * (static_cast<size_t>(world) * count * dtype_size(dtype) + 4 * kGuard + 512);
}

void run_device_case(Communicator& comm, const DeviceCase& k, DeviceArena& arena,
                     gpu::Stream stream) {
  const int n = comm.size(), r = comm.rank();
  const size_t es = dtype_size(k.dtype);
  const Layout l = layout(k, r, n);
  Image host_a(l.a * es), host_b(l.b * es);
  fill(k, l, r, n, host_a.data(), host_b.data());

  // The buffers the call gets: device pieces (guards included) or the host images themselves.
  std::byte* dev[2] = {nullptr, nullptr};
  if (!k.host_memory) {
    arena.reset();
    Image* images[2] = {&host_a, &host_b};
    for (int i = 0; i < 2; ++i) {
      dev[i] = arena.take(images[i]->bytes.size() - 2 * kGuard);
      gpu::memcpy_async(dev[i] - kGuard, images[i]->bytes.data(), images[i]->bytes.size(), stream);
    }
    // Plain calls use the default stream: the inputs must be in place before they are issued.
    if (k.issue != Issue::kStream) gpu::stream_synchronize(stream);
  }
  std::byte* base[2] = {k.host_memory ? host_a.data() : dev[0],
                        k.host_memory ? host_b.data() : dev[1]};
  const auto ptr = [&](Place p) -> std::byte* {
    return p.buffer < 0 ? nullptr : base[p.buffer] + p.offset * es;
  };
  try {
    issue(comm, k, ptr(l.send), ptr(l.recv), stream).wait();
  } catch (const std::exception& e) {
    ADD_FAILURE() << k.describe() << " rank " << r << ": " << e.what();
    return;
  }
  if (!k.host_memory) {
    Image* images[2] = {&host_a, &host_b};
    for (int i = 0; i < 2; ++i)
      gpu::memcpy_async(images[i]->bytes.data(), dev[i] - kGuard, images[i]->bytes.size(), stream);
    gpu::stream_synchronize(stream);
  }
  const Expected want = expected(k, l, r, n);
  if (want.count > 0) {
    std::byte* buffers[2] = {host_a.data(), host_b.data()};
    const Mismatch m = compare(k.dtype, buffers[want.where.buffer] + want.where.offset * es,
                               want.count, want.value);
    EXPECT_EQ(m.count, 0u) << k.describe() << " rank " << r << ": first wrong element " << m.first
                           << " = " << m.got << ", expected " << m.want;
  }
  EXPECT_TRUE(host_a.guards_intact() && host_b.guards_intact())
      << k.describe() << " rank " << r << " wrote outside its buffers";
}

}  // namespace chorus::testing
