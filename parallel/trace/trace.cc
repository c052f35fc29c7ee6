// Tracer: events recorded per rank, collectives read from flight recorders, one Chrome trace
// JSON written by rank 0 (trace.h).
#include "chorus/parallel/trace.h"

#include <time.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "chorus/error.h"
#include "chorus/tensor/autograd.h"
#include "common/gather_strings.h"
#include "common/pre_backward.h"

namespace chorus::parallel {

using tensor::Tensor;

struct Tracer::Impl {
  Communicator* world = nullptr;
  struct Event {
    std::string name, track, args;
    double start = 0, end = 0;
  };
  std::vector<Event> events;
  // Per communicator label: every recorder entry below `next` is handled, `emitted` those above.
  struct Cursor {
    uint64_t next = 0;
    std::set<uint64_t> emitted;
    bool started = false;
  };
  std::map<std::string, Cursor> cursors;
  std::vector<std::pair<tensor::nn::Module*, int>> hooks;
  std::vector<double> forward_start;             // per block
  std::vector<std::pair<double, size_t>> marks;  // (time, block) where a gradient reached
  uint64_t marks_backward = 0;                   // the backward the marks belong to

  void flush_marks() {
    std::sort(marks.begin(), marks.end());
    const double end = now_us();
    for (size_t k = 0; k < marks.size(); ++k)
      events.push_back({"backward h." + std::to_string(marks[k].second), "compute", "",
                        marks[k].first, k + 1 < marks.size() ? marks[k + 1].first : end});
    marks.clear();
  }
};

namespace {

std::string escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

Tracer::Tracer(Communicator& world) : impl_(std::make_unique<Impl>()) { impl_->world = &world; }

Tracer::~Tracer() {
  for (auto& [m, h] : impl_->hooks) m->remove_hook(h);
}

double Tracer::now_us() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
}

void Tracer::add(const std::string& name, const std::string& track, double start_us, double end_us,
                 const std::string& args) {
  impl_->events.push_back({name, track, args, start_us, std::max(start_us, end_us)});
}

Tracer::Span::Span(Tracer* t, std::string name, std::string track, std::string args)
    : tracer_(t),
      name_(std::move(name)),
      track_(std::move(track)),
      args_(std::move(args)),
      start_(now_us()) {}
Tracer::Span::Span(Span&& o) noexcept
    : tracer_(o.tracer_),
      name_(std::move(o.name_)),
      track_(std::move(o.track_)),
      args_(std::move(o.args_)),
      start_(o.start_) {
  o.tracer_ = nullptr;
}
Tracer::Span::~Span() {
  if (tracer_ != nullptr) tracer_->add(name_, track_, start_, now_us(), args_);
}
Tracer::Span Tracer::span(std::string name, std::string track, std::string args) {
  return Span(this, std::move(name), std::move(track), std::move(args));
}

void Tracer::instrument(tensor::nn::GPT& model) {
  Impl& t = *impl_;
  t.forward_start.assign(model.h.size(), 0.0);
  for (size_t i = 0; i < model.h.size(); ++i) {
    tensor::nn::Module* blk = model.h[i].get();
    Impl* self = &t;
    t.hooks.emplace_back(blk, blk->add_forward_pre_hook([self, i](const tensor::nn::Module&) {
      self->forward_start[i] = now_us();
    }));
    t.hooks.emplace_back(
        blk, blk->add_forward_hook([self, i](const tensor::nn::Module&, Tensor& out) {
          self->events.push_back(
              {"forward h." + std::to_string(i), "compute", "", self->forward_start[i], now_us()});
          if (!tensor::grad_enabled() || !out.requires_grad()) return;
          out = with_pre_backward(
              out,
              [self, i] {
                // The first mark of a backward queues the flush at its end.
                if (tensor::backward_id() != self->marks_backward) {
                  self->marks_backward = tensor::backward_id();
                  tensor::queue_backward_callback([self] { self->flush_marks(); });
                }
                self->marks.emplace_back(now_us(), i);
              },
              "trace_mark");
        }));
  }
}

void Tracer::collect(Communicator& comm, const std::string& label) {
  Impl& t = *impl_;
  const std::string json = comm.flight_recorder_json();
  // The communicator's identity (one per group: the dp groups of a mesh differ) from the header.
  static const std::regex comm_re("\"comm\": \"([^\"]*)\"");
  std::smatch id;
  const std::string group = std::regex_search(json, id, comm_re) ? id[1].str() : label;
  // One operation per line: {"seq": 12, "coll": "all_reduce", "count": 4096, "dtype": "float",
  // "op": "sum", "root": 0, "algorithm": "ring", "state": "done", "issued_us": ...,
  // "started_us": ..., "ended_us": ..., "record": 57}. Point-to-point operations have no
  // sequence number (0); the record number tells every operation apart.
  static const std::regex op_re(
      "\\{\"seq\": (-?[0-9]+), \"coll\": \"([a-z_]+)\", \"count\": ([0-9]+), \"dtype\": "
      "\"([a-z0-9]+)\", \"op\": \"([a-z]+)\", \"root\": (-?[0-9]+), \"algorithm\": \"([^\"]*)\", "
      "\"state\": \"([a-z]+)\", \"issued_us\": (-?[0-9]+), \"started_us\": (-?[0-9]+), "
      "\"ended_us\": (-?[0-9]+), \"record\": ([0-9]+)");
  Impl::Cursor& cur = t.cursors[label];
  uint64_t oldest = UINT64_MAX, next = cur.next, lowest_pending = UINT64_MAX;
  for (auto it = std::sregex_iterator(json.begin(), json.end(), op_re);
       it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    const uint64_t record = std::stoull(m[12].str());
    oldest = std::min(oldest, record);
    next = std::max(next, record + 1);
    if (record < cur.next || cur.emitted.count(record) != 0) continue;
    const std::string state = m[8].str();
    if (state != "done" && state != "failed") {
      lowest_pending = std::min(lowest_pending, record);
      continue;
    }
    cur.emitted.insert(record);
    const std::string coll = m[2].str();
    // Point-to-point: the peer instead of a sequence number (send_recv: the peer it sends to;
    // its count is what it sends).
    const bool p2p = coll == "send" || coll == "recv" || coll == "send_recv";
    const double issued = std::stod(m[9].str()), started = std::stod(m[10].str()),
                 ended = std::stod(m[11].str());
    std::ostringstream args;
    args << "\"comm\": \"" << label << "\", \"group\": \"" << escaped(group) << "\"";
    if (!p2p) args << ", \"seq\": " << m[1].str();
    args << ", \"count\": " << m[3].str() << ", \"dtype\": \"" << m[4].str() << "\"";
    if (p2p)
      args << ", \"peer\": " << m[6].str();
    else
      args << ", \"op\": \"" << m[5].str() << "\", \"algorithm\": \"" << m[7].str() << "\"";
    args << ", \"queued_us\": " << std::max(0.0, started - issued) << ", \"state\": \"" << state
         << "\"";
    t.events.push_back({coll + " " + m[3].str() + " " + m[4].str(), "comm " + label, args.str(),
                        started > 0 ? started : issued, ended});
  }
  // Operations the recorder overwrote before this call saw them.
  if (oldest != UINT64_MAX && oldest > cur.next && cur.started)
    t.events.push_back({"unrecorded: " + std::to_string(oldest - cur.next) + " operations",
                        "comm " + label, "", now_us(), now_us()});
  // Everything below the oldest unfinished operation is done with.
  cur.next = std::min(next, lowest_pending);
  for (auto it = cur.emitted.begin(); it != cur.emitted.end() && *it < cur.next;)
    it = cur.emitted.erase(it);
  cur.started = true;
}

void Tracer::skip(Communicator& comm, const std::string& label) {
  Impl& t = *impl_;
  const size_t before = t.events.size();
  collect(comm, label);
  t.events.resize(before);
}

void Tracer::write(const std::string& path) {
  Impl& t = *impl_;
  Communicator& world = *t.world;
  double origin = std::numeric_limits<double>::max();
  for (const auto& e : t.events) origin = std::min(origin, e.start);
  world.all_reduce(&origin, &origin, 1, DataType::kF64, ReduceOp::kMin);
  // This rank's events, with one metadata event naming it and each of its tracks.
  std::map<std::string, int> tid;
  for (const auto& e : t.events) tid.try_emplace(e.track, static_cast<int>(tid.size()));
  const int rank = world.rank();
  std::ostringstream os;
  os.precision(3);
  os << std::fixed;
  os << "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": " << rank
     << ", \"tid\": 0, \"args\": {\"name\": \"rank " << rank << "\"}}";
  for (const auto& [track, id] : tid)
    os << ",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": " << rank << ", \"tid\": " << id
       << ", \"args\": {\"name\": \"" << escaped(track) << "\"}}";
  for (const auto& e : t.events) {
    os << ",\n{\"ph\": \"X\", \"name\": \"" << escaped(e.name) << "\", \"pid\": " << rank
       << ", \"tid\": " << tid[e.track] << ", \"ts\": " << e.start - origin
       << ", \"dur\": " << e.end - e.start;
    if (!e.args.empty()) os << ", \"args\": {" << e.args << "}";
    os << "}";
  }
  const std::string mine = os.str();
  // Every rank's text, gathered on every rank (rank 0 writes).
  const std::vector<std::string> all = gather_strings(world, mine);
  std::string error;
  if (rank == 0) {
    std::ofstream out(path, std::ios::trunc);
    out << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
    for (size_t r = 0; r < all.size(); ++r) out << (r ? ",\n" : "") << all[r];
    out << "\n]}\n";
    out.flush();
    if (!out) error = "cannot write the trace " + path;
  }
  int32_t ok = error.empty() ? 1 : 0;
  world.broadcast(&ok, &ok, 1, DataType::kI32, 0);
  CHORUS_ARG_CHECK(ok == 1, "cannot write the trace ", path);
}

}  // namespace chorus::parallel
