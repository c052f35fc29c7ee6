// validate(): a schedule run on paper before it runs on ranks.
//
// The simulation steps every stage through its list. A forward costs 1, a backward
// `backward_cost`, communication nothing but waiting: a Send and its Recv complete together, when
// the later of the two has been posted (rendezvous: the strictest rule, so a schedule that
// passes here also runs with asynchronous sends); a Send next to a Recv in a list is posted as
// one. Data dependencies are checked, not waited for: a forward whose input this stage has not
// received yet is an error in the schedule, not a wait. When no stage can move and some are not
// done, every blocked stage and what it waits for is named.
#include <algorithm>
#include <array>
#include <deque>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "chorus/error.h"
#include "chorus/parallel/pipeline.h"

namespace chorus::parallel {
namespace {

bool is_send(PipelineOp op) {
  return op == PipelineOp::kSendActivation || op == PipelineOp::kSendGrad ||
         op == PipelineOp::kSendTiedGrad;
}
bool is_recv(PipelineOp op) {
  return op == PipelineOp::kRecvActivation || op == PipelineOp::kRecvGrad ||
         op == PipelineOp::kRecvTiedGrad;
}
bool is_comm(PipelineOp op) { return is_send(op) || is_recv(op); }

// What a transfer carries: (kind, micro, boundary), where the boundary of activations and
// gradients is the virtual stage on the sending side of the forward direction.
using Key = std::tuple<int, int, int>;

std::string describe(int stage, const PipelineAction& a) {
  std::ostringstream os;
  os << "stage " << stage << " " << to_string(a.op) << "(micro " << a.micro;
  os << ", chunk " << a.chunk;
  os << ")";
  return os.str();
}

struct Sim {
  const PipelineSchedule& s;
  double backward_cost;
  int V;
  int virtual_stage(int stage, int chunk) const { return chunk * s.stages + stage; }
  int stage_of(int k) const { return k % s.stages; }

  // (kind, micro, boundary) and the peer stage of a communication action.
  std::pair<Key, int> transfer(int stage, const PipelineAction& a) const {
    const int k = virtual_stage(stage, a.chunk);
    switch (a.op) {
      case PipelineOp::kSendActivation:
        return {{0, a.micro, k}, stage_of(k + 1)};
      case PipelineOp::kRecvActivation:
        return {{0, a.micro, k - 1}, stage_of(k - 1)};
      case PipelineOp::kSendGrad:
        return {{1, a.micro, k - 1}, stage_of(k - 1)};
      case PipelineOp::kRecvGrad:
        return {{1, a.micro, k}, stage_of(k + 1)};
      case PipelineOp::kSendTiedGrad:
        return {{2, a.micro, 0}, 0};
      case PipelineOp::kRecvTiedGrad:
        return {{2, a.micro, 0}, stage_of(V - 1)};
      default:
        return {{-1, 0, 0}, -1};
    }
  }

  void check_action(int stage, const PipelineAction& a) const {
    const std::string what = describe(stage, a);
    CHORUS_ARG_CHECK(a.micro >= 0 && a.micro < s.micro_batches, "pipeline schedule ", s.name, ": ",
                     what, ": micro-batch outside [0, ", s.micro_batches, ")");
    CHORUS_ARG_CHECK(a.chunk >= 0 && a.chunk < s.chunks, "pipeline schedule ", s.name, ": ", what,
                     ": chunk outside [0, ", s.chunks, ")");
    const int k = virtual_stage(stage, a.chunk);
    const bool ok = (a.op != PipelineOp::kRecvActivation && a.op != PipelineOp::kSendGrad) || k > 0;
    const bool ok2 =
        (a.op != PipelineOp::kSendActivation && a.op != PipelineOp::kRecvGrad) || k < V - 1;
    const bool tied = s.tied_embedding && s.stages > 1;
    const bool ok3 = (a.op != PipelineOp::kSendTiedGrad || (k == V - 1 && tied)) &&
                     (a.op != PipelineOp::kRecvTiedGrad || (k == 0 && tied));
    CHORUS_ARG_CHECK(ok && ok2 && ok3, "pipeline schedule ", s.name, ": ", what,
                     " has no peer (virtual stage ", k, " of ", V, ")");
  }
};

// Static checks: every (micro, chunk) forwarded and backwarded once, in that order, on every
// stage, and every action in range with a peer.
void check_lists(const Sim& sim) {
  const PipelineSchedule& s = sim.s;
  for (int st = 0; st < s.stages; ++st) {
    const auto& list = s.actions[static_cast<size_t>(st)];
    std::map<std::pair<int, int>, int> fwd, bwd;
    for (const PipelineAction& a : list) {
      sim.check_action(st, a);
      if (a.op == PipelineOp::kForward) ++fwd[std::make_pair(a.micro, a.chunk)];
      if (a.op == PipelineOp::kBackward) {
        const bool forwarded = fwd.count(std::make_pair(a.micro, a.chunk)) == 1;
        CHORUS_ARG_CHECK(forwarded, "pipeline schedule ", s.name, ": ", describe(st, a),
                         " comes before its forward");
        ++bwd[std::make_pair(a.micro, a.chunk)];
      }
    }
    for (int m = 0; m < s.micro_batches; ++m)
      for (int c = 0; c < s.chunks; ++c) {
        const int nf = fwd[std::make_pair(m, c)], nb = bwd[std::make_pair(m, c)];
        CHORUS_ARG_CHECK(nf == 1 && nb == 1, "pipeline schedule ", s.name, ": stage ", st,
                         " runs micro-batch ", m, " of chunk ", c, " ", nf, " times forward and ",
                         nb, " times backward (once each expected)");
      }
  }
}

// The simulation. A communication action is a *part*; the parts of one group on one channel
// (activations, gradients, tied gradients) form one queue entry when they are one send and one
// receive (the engine's send_recv), else one entry each. Every rank has an in-order queue per
// channel. A part is matched when the entry holding it and the entry holding its peer's matching
// part are both at the heads of their queues; an entry leaves its queue when all its parts are
// matched. A group blocks its stage until all its receives are matched.
class Simulation {
 public:
  explicit Simulation(const Sim& sim)
      : sim_(sim),
        s_(sim.s),
        p_(sim.s.stages),
        queues_(static_cast<size_t>(p_)),
        pc_(static_cast<size_t>(p_), 0),
        clock_(static_cast<size_t>(p_), 0.0),
        live_(static_cast<size_t>(p_), 0),
        inbox_(static_cast<size_t>(p_)),
        waits_for_(static_cast<size_t>(p_), nullptr) {
    out_.peak_activations.assign(static_cast<size_t>(p_), 0);
    out_.timeline.resize(static_cast<size_t>(p_));
    for (const auto& l : s_.actions) total_actions_ += l.size();
  }

  PipelineSimulation run() {
    while (true) {
      bool moved = match();
      for (int st = 0; st < p_; ++st) moved = advance(st) || moved;
      if (finished()) break;
      if (!moved) fail_stuck();
    }
    for (double c : clock_) out_.makespan = std::max(out_.makespan, c);
    out_.bubble = out_.makespan > 0 ? 1.0 - busy_ / (static_cast<double>(p_) * out_.makespan) : 0.0;
    return std::move(out_);
  }

 private:
  struct Part {
    PipelineAction action;
    int stage = 0;
    bool send = false;
    Key key;
    int peer = 0;
    double posted = 0;
    double matched_at = -1;  // < 0: not yet
  };
  struct Entry {
    std::vector<Part*> parts;
  };

  static int channel(PipelineOp op) {
    return op == PipelineOp::kSendActivation || op == PipelineOp::kRecvActivation ? 0
           : op == PipelineOp::kSendGrad || op == PipelineOp::kRecvGrad           ? 1
                                                                                  : 2;
  }

  // Posts the communication actions [begin, end) of stage st's list as one group.
  void post_group(int st, size_t begin, size_t end) {
    const auto& list = s_.actions[static_cast<size_t>(st)];
    std::array<std::vector<Part*>, 3> by_channel;
    for (size_t i = begin; i < end; ++i) {
      const PipelineAction& a = list[i];
      const auto [key, peer] = sim_.transfer(st, a);
      parts_.push_back({a, st, is_send(a.op), key, peer, clock_[static_cast<size_t>(st)], -1});
      by_channel[static_cast<size_t>(channel(a.op))].push_back(&parts_.back());
      if (!is_send(a.op))
        inbox_[static_cast<size_t>(st)][std::make_tuple(static_cast<int>(a.op), a.micro, a.chunk)] =
            &parts_.back();
    }
    for (int c = 0; c < 3; ++c) {
      auto& ps = by_channel[static_cast<size_t>(c)];
      auto& queue = queues_[static_cast<size_t>(st)][static_cast<size_t>(c)];
      if (ps.size() == 2 && ps[0]->send != ps[1]->send) {  // one send_recv
        entries_.push_back({{ps[0], ps[1]}});
        queue.push_back(&entries_.back());
        continue;
      }
      for (Part* part : ps) {
        entries_.push_back({{part}});
        queue.push_back(&entries_.back());
      }
    }
  }

  // Matches every part whose peer part sits at the head of the peer's queue; entries whose parts
  // are all matched leave their queues. Returns whether anything changed.
  bool match() {
    bool changed = false;
    for (int st = 0; st < p_; ++st)
      for (int c = 0; c < 3; ++c) {
        auto& q = queues_[static_cast<size_t>(st)][static_cast<size_t>(c)];
        if (q.empty()) continue;
        for (Part* part : q.front()->parts) {
          if (part->matched_at >= 0) continue;
          auto& pq = queues_[static_cast<size_t>(part->peer)][static_cast<size_t>(c)];
          if (pq.empty()) continue;
          for (Part* other : pq.front()->parts) {
            if (other->matched_at >= 0 || other->send == part->send || other->key != part->key)
              continue;
            CHORUS_ARG_CHECK(other->peer == st, "pipeline schedule ", s_.name, ": ",
                             describe(st, part->action), " meets ",
                             describe(part->peer, other->action), " sent elsewhere");
            part->matched_at = other->matched_at = std::max(part->posted, other->posted);
            changed = true;
          }
        }
      }
    for (int st = 0; st < p_; ++st)
      for (auto& q : queues_[static_cast<size_t>(st)])
        while (!q.empty() && std::all_of(q.front()->parts.begin(), q.front()->parts.end(),
                                         [](const Part* x) { return x->matched_at >= 0; })) {
          q.pop_front();
          changed = true;
        }
    return changed;
  }

  // The received part compute step `a` of stage st still waits for (nullptr: none), and the time
  // its inputs arrived. What a step needs must have been posted before it, else the schedule is
  // wrong.
  const Part* needs(int st, const PipelineAction& a, double* ready) const {
    const int k = sim_.virtual_stage(st, a.chunk);
    std::vector<PipelineOp> needs;
    if (a.op == PipelineOp::kForward && k > 0) needs.push_back(PipelineOp::kRecvActivation);
    if (a.op == PipelineOp::kBackward && k < sim_.V - 1) needs.push_back(PipelineOp::kRecvGrad);
    if (a.op == PipelineOp::kBackward && k == 0 && s_.tied_embedding && p_ > 1)
      needs.push_back(PipelineOp::kRecvTiedGrad);
    const Part* missing = nullptr;
    for (PipelineOp need : needs) {
      const auto& box = inbox_[static_cast<size_t>(st)];
      auto it = box.find(std::make_tuple(static_cast<int>(need), a.micro, a.chunk));
      CHORUS_ARG_CHECK(it != box.end(), "pipeline schedule ", s_.name, ": ", describe(st, a),
                       need == PipelineOp::kRecvActivation ? " runs before its input is received"
                       : need == PipelineOp::kRecvGrad
                           ? " runs before its output's gradient is received"
                           : " runs before the lm_head's embedding gradient of its "
                             "micro-batch is received");
      if (it->second->matched_at < 0)
        missing = it->second;
      else
        *ready = std::max(*ready, it->second->matched_at);
    }
    return missing;
  }

  // Runs stage st's list as far as it can: posts communication groups, runs compute steps whose
  // inputs have arrived. Returns whether it moved.
  bool advance(int st) {
    const auto& list = s_.actions[static_cast<size_t>(st)];
    size_t& i = pc_[static_cast<size_t>(st)];
    waits_for_[static_cast<size_t>(st)] = nullptr;
    bool moved = false;
    while (i < list.size()) {
      const PipelineAction& a = list[i];
      if (is_comm(a.op)) {
        size_t end = i;
        while (end < list.size() && is_comm(list[end].op)) ++end;
        post_group(st, i, end);
        executed_ += end - i;
        i = end;
        moved = true;
        continue;
      }
      double ready = clock_[static_cast<size_t>(st)];
      if (const Part* missing = needs(st, a, &ready)) {
        waits_for_[static_cast<size_t>(st)] = missing;
        break;
      }
      const double cost = a.op == PipelineOp::kForward ? 1.0 : sim_.backward_cost;
      clock_[static_cast<size_t>(st)] = ready + cost;
      busy_ += cost;
      out_.timeline[static_cast<size_t>(st)].push_back({a, ready, ready + cost});
      int& l = live_[static_cast<size_t>(st)];
      int& peak = out_.peak_activations[static_cast<size_t>(st)];
      if (a.op == PipelineOp::kForward)
        peak = std::max(peak, ++l);
      else
        --l;
      ++executed_;
      ++i;
      moved = true;
    }
    return moved;
  }

  bool finished() const {
    if (executed_ != total_actions_) return false;
    for (const auto& stage : queues_)
      for (const auto& q : stage)
        if (!q.empty()) return false;
    return true;
  }

  // Nothing can move: names what every stage waits for.
  [[noreturn]] void fail_stuck() const {
    std::ostringstream os;
    bool deadlock = false;
    for (int st = 0; st < p_; ++st) {
      if (const Part* x = waits_for_[static_cast<size_t>(st)]) {
        os << " " << describe(st, s_.actions[static_cast<size_t>(st)][pc_[static_cast<size_t>(st)]])
           << " waits for " << describe(st, x->action) << " from stage " << x->peer << ";";
        deadlock = true;
      }
      for (const auto& q : queues_[static_cast<size_t>(st)])
        if (!q.empty())
          for (const Part* x : q.front()->parts)
            if (x->matched_at < 0)
              os << " " << describe(st, x->action) << " heads its queue unmatched;";
    }
    throw InvalidArgument("pipeline schedule " + s_.name +
                          (deadlock ? " deadlocks:" : ": unmatched communication:") + os.str());
  }

  const Sim& sim_;
  const PipelineSchedule& s_;
  const int p_;
  PipelineSimulation out_;
  std::deque<Part> parts_;  // stable addresses
  std::deque<Entry> entries_;
  std::vector<std::array<std::deque<Entry*>, 3>> queues_;
  std::vector<size_t> pc_;
  std::vector<double> clock_;
  std::vector<int> live_;
  // Posted receives of every stage, by (op, micro, chunk): what its compute steps wait for.
  std::vector<std::map<std::tuple<int, int, int>, Part*>> inbox_;
  std::vector<const Part*> waits_for_;  // for the deadlock message
  size_t executed_ = 0, total_actions_ = 0;
  double busy_ = 0;
};

}  // namespace

PipelineSimulation validate(const PipelineSchedule& s, double backward_cost) {
  CHORUS_ARG_CHECK(s.stages >= 1 && s.chunks >= 1 && s.micro_batches >= 1 &&
                       s.actions.size() == static_cast<size_t>(s.stages),
                   "pipeline schedule ", s.name, ": ", s.actions.size(), " action lists for ",
                   s.stages, " stages");
  const Sim sim{s, backward_cost, s.stages * s.chunks};
  check_lists(sim);
  return Simulation(sim).run();
}

double predicted_bubble(const PipelineSchedule& s) {
  const double p = s.stages, m = s.micro_batches, v = s.chunks;
  const double bubble = (p - 1) / v;
  return bubble / (m + bubble);
}

std::string timeline_text(const PipelineSchedule& s, const PipelineSimulation& sim) {
  std::ostringstream os;
  for (int st = 0; st < s.stages; ++st) {
    os << "stage " << st << ":";
    double t = 0;
    for (const auto& span : sim.timeline[static_cast<size_t>(st)]) {
      for (; t + 1e-9 < span.start; t += 1) os << " .";
      os << " " << (span.action.op == PipelineOp::kForward ? "F" : "B") << span.action.micro;
      if (s.chunks > 1) os << "'" << span.action.chunk;
      t = span.end;
    }
    os << "\n";
  }
  return os.str();
}

std::string timeline_svg(const PipelineSchedule& s, const PipelineSimulation& sim) {
  const double unit = 28, row = 30, left = 70, top = 30;
  const double width = left + sim.makespan * unit + 20, height = top + s.stages * row + 30;
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
     << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  os << "<text x=\"" << left << "\" y=\"18\" font-size=\"13\">" << s.name << ": " << s.stages
     << " stages, " << s.micro_batches << " micro-batches"
     << (s.chunks > 1 ? ", " + std::to_string(s.chunks) + " chunks" : std::string()) << "; bubble "
     << static_cast<int>(sim.bubble * 1000 + 0.5) / 10.0 << "%</text>\n";
  for (int st = 0; st < s.stages; ++st) {
    const double y = top + st * row;
    os << "<text x=\"4\" y=\"" << y + 19 << "\">stage " << st << "</text>\n";
    for (const auto& span : sim.timeline[static_cast<size_t>(st)]) {
      const bool f = span.action.op == PipelineOp::kForward;
      // Forwards blue, backwards green, lighter for later chunks.
      const int shade = 90 + 50 * span.action.chunk;
      os << "<rect x=\"" << left + span.start * unit << "\" y=\"" << y << "\" width=\""
         << (span.end - span.start) * unit - 1 << "\" height=\"" << row - 4 << "\" fill=\"rgb("
         << (f ? shade : 60) << "," << (f ? shade + 40 : shade + 60) << "," << (f ? 220 : shade)
         << ")\"/>\n";
      os << "<text x=\"" << left + span.start * unit + 4 << "\" y=\"" << y + 18 << "\">"
         << (f ? "F" : "B") << span.action.micro
         << (s.chunks > 1 ? "." + std::to_string(span.action.chunk) : std::string()) << "</text>\n";
    }
  }
  os << "</svg>\n";
  return os.str();
}

}  // namespace chorus::parallel
