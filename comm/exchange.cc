#include "exchange.h"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "chorus/communicator.h"
#include "chorus/config.h"
#include "chorus/error.h"
#include "chorus/timeout.h"

namespace chorus {

constexpr std::chrono::steady_clock::time_point kDeadlineNotSet =
    std::chrono::steady_clock::time_point::min();

void Exchange::begin(const char* op_name, int64_t seq, const char* algorithm,
                     std::chrono::milliseconds timeout, const transport::OpStamp& stamp,
                     bool fifo_only) {
  CHORUS_CHECK_EQ(pending_, 0u, "requests left over from the previous operation");
  CHORUS_CHECK(matches_.empty(), "receives left unmatched by the previous operation");
  // Every set-aside of the previous operation arrived (nothing was pending); its request goes.
  for (SetAside& s : set_aside_) s.arrived = true;
  requests_.clear();
  op_name_ = op_name;
  seq_ = seq;
  algorithm_ = algorithm;
  step_ = "";
  timeout_ = timeout;
  deadline_ = kDeadlineNotSet;
  stamp_ = stamp;
  if (fifo_only != fifo_only_) transport_.set_single_copy(!fifo_only);
  fifo_only_ = fifo_only;
  fanned_out_ = false;
  const size_t bytes = stamp.count * dtype_size(static_cast<DataType>(stamp.dtype));
  yield_ns_ = bytes >= policy_.yield_from_bytes ? policy_.yield_ns : 0;
  if (static_cast<Collective>(stamp.coll) != Collective::kSend) {
    history_[history_count_++ % history_.size()] = stamp;
  }
  monitor_.check_alarm();
  monitor_.publish_current(stamp);
}

Exchange::RequestId Exchange::post(transport::Request r) {
  const RequestId id = requests_.size();
  r.stamp = stamp_;
  requests_.push_back(r);
  transport::Request& req = requests_.back();
  if (req.bytes == 0) {  // both sides know the size: nothing travels
    req.done = true;
    return id;
  }
  queue(req);
  return id;
}

void Exchange::queue(transport::Request& req) {
  CHORUS_CHECK(req.peer != rank_, "request to self");
  const bool send = req.kind == transport::Request::Kind::kSend;
  // A small send with nothing ahead of it goes out now: the peer may be waiting for it, and the
  // rest of the posting (and the first pass of the wait) is then off its critical path.
  if (send && req.after == nullptr && req.bytes <= kEagerPostBytes && send_q_[req.peer].empty() &&
      link(req.peer).progress_send(req) && req.done)
    return;
  auto& q = send ? send_q_[req.peer] : recv_q_[req.peer];
  if (send_q_[req.peer].empty() && recv_q_[req.peer].empty()) active_.push_back(req.peer);
  q.push_back(&req);
  ++pending_;
}

// ---- point-to-point
// ------------------------------------------------------------------------------

Exchange::RequestId Exchange::post_p2p_send(int peer, const void* src, size_t bytes, int tag,
                                            bool assist) {
  transport::Request r = send_request(peer, src, bytes, assist);
  r.stamp = stamp_;
  r.stamp.seq = p2p_sent_[static_cast<size_t>(peer)]++;
  r.stamp.count = bytes;
  r.stamp.root = tag;
  const RequestId id = requests_.size();
  requests_.push_back(r);
  queue(requests_.back());
  return id;
}

Exchange::RequestId Exchange::post_p2p_recv(int peer, void* dst, size_t bytes, int tag) {
  transport::Request r;
  r.kind = transport::Request::Kind::kRecv;
  r.peer = peer;
  r.dst = static_cast<std::byte*>(dst);
  r.bytes = bytes;
  r.stamp = stamp_;
  const RequestId id = requests_.size();
  requests_.push_back(r);
  ++pending_;  // until it is bound to a message and that is received
  matches_.push_back({id, peer, tag, set_aside_.end()});
  match();
  return id;
}

bool Exchange::match() {
  using transport::OpStamp;
  bool moved = false;
  for (SetAside& s : set_aside_)
    if (!s.arrived && requests_[s.request].done) s.arrived = true;
  const int n = static_cast<int>(links_.size());
  for (size_t i = 0; i < matches_.size();) {
    Match& m = matches_[i];
    transport::Request& r = requests_[m.request];
    const bool any = m.peer == kAnySource;
    // First what was set aside: the oldest message of the tag from the peer (any peer).
    if (m.from == set_aside_.end())
      for (auto it = set_aside_.begin(); it != set_aside_.end(); ++it)
        if (!it->claimed && it->tag == m.tag && (any || it->peer == m.peer)) {
          it->claimed = true;
          m.from = it;
          break;
        }
    if (m.from != set_aside_.end()) {
      if (!m.from->arrived) {
        ++i;
        continue;
      }
      SetAside& s = *m.from;
      if (s.data.size() != r.bytes)
        throw Mismatch(
            detail::concat("rank ", s.peer, " sent a ", s.data.size(), "-byte message with tag ",
                           s.tag, " where this rank ", "receives ", r.bytes, " bytes"),
            rank_, op_name_, seq_, s.peer);
      if (r.bytes > 0) std::memcpy(r.dst, s.data.data(), r.bytes);
      r.peer = s.peer;
      r.done = true;
      --pending_;
      set_aside_.erase(m.from);
      matches_.erase(matches_.begin() + static_cast<std::ptrdiff_t>(i));
      moved = true;
      continue;
    }
    // Then the next message of each peer it may come from, with nothing received from it now.
    bool bound = false;
    for (int k = 0; k < (any ? n : 1) && !bound; ++k) {
      const int p = any ? (next_any_ + k) % n : m.peer;
      if (p == rank_ || !recv_q_[static_cast<size_t>(p)].empty()) continue;
      OpStamp next;
      if (!link(p).peek(next)) continue;
      const uint64_t expected = p2p_received_[static_cast<size_t>(p)];
      const bool p2p =
          static_cast<Collective>(next.coll) == Collective::kSend && next.seq == expected;
      if (!p2p && any) continue;  // that peer is in a later operation already
      if (!p2p || next.root == m.tag) {
        // Its message (or, from a rank in another operation, what the link reports as a
        // mismatch): received straight into the buffer.
        r.peer = p;
        r.stamp.seq = p2p_received_[static_cast<size_t>(p)]++;
        r.stamp.count = r.bytes;
        r.stamp.root = m.tag;
        --pending_;  // queue() counts it again
        queue(r);
        bound = true;
        if (any) next_any_ = (p + 1) % n;
        break;
      }
      // Another tag: set aside, received into memory of its own.
      SetAside& s = set_aside_.emplace_back();
      s.peer = p;
      s.tag = next.root;
      s.data.resize(next.count);
      transport::Request a;
      a.kind = transport::Request::Kind::kRecv;
      a.peer = p;
      a.dst = s.data.data();
      a.bytes = next.count;
      a.stamp = next;
      s.request = requests_.size();
      requests_.push_back(a);
      p2p_received_[static_cast<size_t>(p)]++;
      queue(requests_.back());
      moved = true;
    }
    if (bound) {
      matches_.erase(matches_.begin() + static_cast<std::ptrdiff_t>(i));
      moved = true;
    } else {
      ++i;
    }
  }
  return moved;
}

const std::vector<int>& Exchange::awaited() {
  if (matches_.empty()) return active_;
  awaited_ = active_;
  for (const Match& m : matches_)
    for (int p = 0; p < static_cast<int>(links_.size()); ++p)
      if (p != rank_ && (m.peer == kAnySource || m.peer == p) &&
          std::find(awaited_.begin(), awaited_.end(), p) == awaited_.end())
        awaited_.push_back(p);
  return awaited_;
}

transport::Request Exchange::send_request(int peer, const void* src, size_t bytes,
                                          bool assist) const {
  transport::Request r;
  r.kind = transport::Request::Kind::kSend;
  if (assist) r.facts = transport::Request::kSenderIdle;
  r.peer = peer;
  r.src = static_cast<const std::byte*>(src);
  r.bytes = bytes;
  return r;
}

Exchange::RequestId Exchange::post_send(int peer, const void* src, size_t bytes, bool assist) {
  return post(send_request(peer, src, bytes, assist));
}

Exchange::RequestId Exchange::post_recv(int peer, void* dst, size_t bytes, bool stream) {
  transport::Request r;
  r.kind = transport::Request::Kind::kRecv;
  r.peer = peer;
  r.dst = static_cast<std::byte*>(dst);
  r.bytes = bytes;
  if (stream) r.facts = transport::Request::kNotReadAgain;
  return post(r);
}

Exchange::RequestId Exchange::post_recv_reduce(int peer, void* dst, const void* local, size_t count,
                                               DataType dtype, ReduceOp op, bool stream) {
  transport::Request r;
  r.kind = transport::Request::Kind::kRecvReduce;
  r.peer = peer;
  r.dst = static_cast<std::byte*>(dst);
  r.local = static_cast<const std::byte*>(local);
  r.bytes = count * dtype_size(dtype);
  r.dtype = dtype;
  r.op = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  if (stream) r.facts = transport::Request::kNotReadAgain;
  return post(r);
}

Exchange::RequestId Exchange::post_forward(RequestId from, int peer) {
  CHORUS_CHECK(
      from + 1 == requests_.size() && requests_[from].kind != transport::Request::Kind::kSend,
      "post_forward must follow the receive it forwards");
  transport::Request& recv = requests_[from];
  transport::Request r;
  r.kind = transport::Request::Kind::kSend;
  r.peer = peer;
  r.src = recv.dst;
  r.bytes = recv.bytes;
  if (!recv.done) r.after = &recv;
  const RequestId id = post(r);
  if (!recv.done) recv.forward = &requests_[id];
  return id;
}

void Exchange::post_fan_out(const void* src, size_t bytes, void* copy_to, bool stream) {
  CHORUS_CHECK(fans_out(), "fan-out over the ", transport_.name(), " transport");
  CHORUS_CHECK(!fanned_out_, "a second fan-out in one operation");
  fanned_out_ = true;
  for (int p = 0; p < static_cast<int>(links_.size()); ++p) {
    if (p == rank_) continue;
    transport::Request r;
    r.kind = transport::Request::Kind::kSend;
    r.facts = transport::Request::kShared;
    if (stream) r.facts |= transport::Request::kNotReadAgain;
    r.peer = p;
    r.src = static_cast<const std::byte*>(src);
    r.dst = static_cast<std::byte*>(copy_to);
    r.bytes = bytes;
    post(r);
  }
}

Exchange::RequestId Exchange::post_fan_in(int peer, void* dst, size_t bytes, bool stream) {
  CHORUS_CHECK(fans_out(), "fan-out over the ", transport_.name(), " transport");
  transport::Request r;
  r.kind = transport::Request::Kind::kRecv;
  r.facts = transport::Request::kShared;
  if (stream) r.facts |= transport::Request::kNotReadAgain;
  r.peer = peer;
  r.dst = static_cast<std::byte*>(dst);
  r.bytes = bytes;
  return post(r);
}

bool Exchange::progress() {
  bool moved = !matches_.empty() && match();
  for (size_t i = 0; i < active_.size();) {
    const int peer = active_[i];
    auto& link = this->link(peer);
    for (auto* q : {&send_q_[peer], &recv_q_[peer]}) {
      while (!q->empty()) {
        transport::Request& r = *q->front();
        if (!r.done) {
          if (r.kind == transport::Request::Kind::kSend) {
            // A forward waits for its receive, unless that receive's link has sent it already.
            if (r.after != nullptr && !r.after->done) break;
            moved |= link.progress_send(r);
          } else {
            transport::Request* forward_into = nullptr;
            if (r.forward != nullptr) {
              // Forwards that a receive before this one finished leave the queue first.
              auto& fq = send_q_[r.forward->peer];
              while (!fq.empty() && fq.front()->done) {
                fq.pop_front();
                --pending_;
              }
              if (!r.forward->done && !fq.empty() && fq.front() == r.forward)
                forward_into = r.forward;
            }
            moved |= link.progress_recv(r, forward_into);
          }
        }
        if (!r.done) break;
        q->pop_front();
        --pending_;
      }
    }
    if (send_q_[peer].empty() && recv_q_[peer].empty()) {
      active_[i] = active_.back();
      active_.pop_back();
    } else {
      ++i;
    }
  }
  return moved;
}

template <class Done>
void Exchange::wait_until(Done&& done) try {
  int idle = 0;
  std::chrono::steady_clock::time_point yield_start{};
  for (;;) {
    if (progress()) idle = 0;
    if (done()) return;
    ++idle;
    if (idle <= policy_.spin_passes) {
      transport::cpu_relax();
      continue;
    }
    if (idle == policy_.spin_passes + 1 && yield_ns_ > 0)
      yield_start = std::chrono::steady_clock::now();
    if (idle <= policy_.spin_passes + policy_.yield_passes) {
      sched_yield();
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    // The deadline starts when the operation first has to wait this long (a clock read per
    // operation is measurable at small sizes; the spin before is bounded).
    if (deadline_ == kDeadlineNotSet) deadline_ = now + timeout_;
    if (now >= deadline_) throw_timeout();
    if (now - last_check_ >= std::chrono::milliseconds(20)) {
      last_check_ = now;
      if (on_sleep()) continue;
    }
    // A large operation's yield budget (WaitPolicy::yield_ns), checked like a sleep: the
    // deadline, an abort and failed peers end it.
    if (yield_ns_ > 0 && now - yield_start < std::chrono::nanoseconds(yield_ns_)) {
      sched_yield();
      continue;
    }
    const long left_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(deadline_ - now).count();
    const uint32_t token = waiter_.arm();
    if (progress() || done()) {
      waiter_.disarm();
      idle = 0;
      continue;
    }
    waiter_.sleep(token, std::min(policy_.sleep_ns, left_ns), awaited());
  }
} catch (const transport::StampMismatch& m) {
  throw_mismatch(m);
}

// Names both calls. When the peer is still in an operation this rank has already finished (its
// messages for it arrive now), the message quotes what this rank called at that number.
void Exchange::throw_mismatch(const transport::StampMismatch& m) const {
  using transport::describe;
  std::string text = detail::concat("rank ", m.peer, " called ", describe(m.theirs));
  const bool p2p = static_cast<Collective>(m.mine.coll) == Collective::kSend;
  const transport::OpStamp* earlier = nullptr;
  if (!p2p && m.theirs.seq < m.mine.seq)
    for (uint64_t k = history_count_ > history_.size() ? history_count_ - history_.size() : 0;
         k < history_count_; ++k)
      if (history_[k % history_.size()].seq == m.theirs.seq)
        earlier = &history_[k % history_.size()];
  if (earlier != nullptr)
    text += detail::concat(" where this rank called ", describe(*earlier), " (this rank is now in ",
                           describe(m.mine), ")");
  else
    text += detail::concat(" while this rank called ", describe(m.mine));
  // The same call with another algorithm: forced on some ranks only, or chosen by another kind
  // of memory's constants.
  transport::OpStamp same_algo = m.theirs;
  same_algo.algo = m.mine.algo;
  const char* why = same_algo == m.mine
                        ? "; the same call with another algorithm: every rank must force the same "
                          "one (CHORUS_ALGO, set_algorithm) and pass the same kind of memory "
                          "(calls on device buffers that move by IPC are chosen by that path's "
                          "own constants, docs/GPU.md)"
                        : "; every rank must issue the same collectives in the same order";
  throw Mismatch(text + why, rank_, op_name_, seq_, m.peer);
}

bool Exchange::on_sleep() {
  if (abort_ != nullptr && abort_->load(std::memory_order_acquire))
    throw Error(ErrorKind::kPeerFailure, "the communicator was aborted", rank_, op_name_, seq_);
  const std::vector<int>& peers = awaited();
  if (waiting_ != nullptr) {
    std::lock_guard lock(waiting_->mu);
    waiting_->peers = peers;
    waiting_->step = step_;
  }
  const std::vector<int> gone = monitor_.check_peers(peers, stamp_);
  if (gone.empty()) return false;
  // Their status was read first, so one more pass sees every message they sent before ending.
  const bool moved = progress();
  for (int p : gone)
    if (!send_q_[p].empty() || !recv_q_[p].empty())
      throw PeerFailure(monitor_.why_gone(p), rank_, op_name_, seq_, p);
  // A receive waits in vain when its peer is gone, or, from any source, when every peer is.
  for (const Match& m : matches_) {
    if (m.from != set_aside_.end()) continue;
    const bool from_gone = m.peer == kAnySource
                               ? gone.size() + 1 >= links_.size()
                               : std::find(gone.begin(), gone.end(), m.peer) != gone.end();
    if (from_gone) {
      const int p = m.peer == kAnySource ? gone.front() : m.peer;
      throw PeerFailure(monitor_.why_gone(p), rank_, op_name_, seq_, p);
    }
  }
  return moved;
}

void Exchange::exchange_small(int to, const std::byte* src, size_t src_stride, int from,
                              std::byte* inbox, size_t inbox_stride, size_t bytes) try {
  const int n = static_cast<int>(links_.size());
  CHORUS_CHECK_EQ(pending_, 0u, "exchange_small with requests pending");
  auto in = [&](int set, int p) { return p != rank_ && (set == kAllPeers || set == p); };
  auto source = [&](int p) { return src + static_cast<size_t>(p) * src_stride; };
  auto target = [&](int p) { return inbox + static_cast<size_t>(p) * inbox_stride; };
  // The fast path lasts while every send went out at once; `missing` then holds the peers whose
  // message is still to come (up to 64 ranks).
  const bool try_fast = bytes > 0 && bytes <= kEagerPostBytes && n <= 64;
  bool fast = try_fast;
  for (int p = 0; p < n; ++p) {
    if (!in(to, p)) continue;
    if (!try_fast || !link(p).send_now(source(p), bytes, stamp_)) {
      fast = false;
      post_send(p, source(p), bytes);
    }
  }
  if (try_fast)
    for (int p = 0; p < n; ++p)
      if (in(to, p)) link(p).notify();
  uint64_t missing = 0;
  if (fast) {
    for (int p = 0; p < n; ++p)
      if (in(from, p)) missing |= uint64_t{1} << p;
    for (int pass = 0; missing != 0; ++pass) {
      for (uint64_t m = missing; m != 0; m &= m - 1) {
        const int p = __builtin_ctzll(m);
        if (link(p).recv_now(target(p), bytes, stamp_)) missing &= ~(uint64_t{1} << p);
      }
      if (missing == 0 || pass >= policy_.spin_passes) break;
      transport::cpu_relax();
    }
    if (missing == 0) return;
  }
  for (int p = 0; p < n; ++p)
    if (in(from, p) && (!fast || (missing >> p & 1))) post_recv(p, target(p), bytes);
  wait_all();
} catch (const transport::StampMismatch& m) {
  throw_mismatch(m);
}

void Exchange::fan_small(const void* src, void* copy_to, int from, std::byte* inbox,
                         size_t inbox_stride, size_t bytes) try {
  const int n = static_cast<int>(links_.size());
  CHORUS_CHECK_EQ(pending_, 0u, "fan_small with requests pending");
  if (bytes == 0) return;  // nothing travels (as a posted fan-out of no bytes)
  auto in = [&](int p) { return p != rank_ && (from == kAllPeers || from == p); };
  auto target = [&](int p) { return inbox + static_cast<size_t>(p) * inbox_stride; };
  const bool try_fast = bytes <= kFanSmallBytes && n <= 64;
  bool fast = try_fast;
  if (src != nullptr) {
    if (try_fast && transport_.fan_send_now(src, bytes, copy_to, stamp_)) {
      CHORUS_CHECK(!fanned_out_, "a second fan-out in one operation");
      fanned_out_ = true;
      for (int p = 0; p < n; ++p)
        if (p != rank_) link(p).notify();
    } else {
      fast = false;
      post_fan_out(src, bytes, copy_to);
    }
  }
  uint64_t missing = 0;
  if (try_fast) {
    for (int p = 0; p < n; ++p)
      if (in(p)) missing |= uint64_t{1} << p;
    for (int pass = 0; missing != 0; ++pass) {
      for (uint64_t m = missing; m != 0; m &= m - 1) {
        const int p = __builtin_ctzll(m);
        if (link(p).fan_recv_now(target(p), bytes, stamp_)) missing &= ~(uint64_t{1} << p);
      }
      if (missing == 0 || pass >= policy_.spin_passes) break;
      // Our own fan-out, when it waits for room, moves on while we wait for the others'.
      if (!fast) poke();
      transport::cpu_relax();
    }
    if (missing == 0 && fast) return;
  }
  for (int p = 0; p < n; ++p)
    if (in(p) && (!try_fast || (missing >> p & 1))) post_fan_in(p, target(p), bytes);
  wait_all();
} catch (const transport::StampMismatch& m) {
  throw_mismatch(m);
}

void Exchange::put(int peer, const void* src, uint64_t remote, size_t bytes) {
  CHORUS_CHECK(puts(), "put over the ", transport_.name(), " transport");
  link(peer).put(src, remote, bytes);
}

void Exchange::wait(RequestId id) {
  wait_until([&] { return requests_[id].done; });
}

void Exchange::poke() try { progress(); } catch (const transport::StampMismatch& m) {
  throw_mismatch(m);
}

void Exchange::wait_all() {
  wait_until([&] { return pending_ == 0; });
}

void Exchange::throw_timeout() const {
  std::string waiting;
  for (int peer : active_) {
    if (!waiting.empty()) waiting += ", ";
    waiting += "rank " + std::to_string(peer);
    const bool s = !send_q_[peer].empty(), r = !recv_q_[peer].empty();
    waiting += s && r ? " (send+recv)" : s ? " (send)" : " (recv)";
  }
  for (const Match& m : matches_) {
    if (!waiting.empty()) waiting += ", ";
    waiting += m.peer == kAnySource ? std::string("any rank") : "rank " + std::to_string(m.peer);
    waiting += detail::concat(" (recv, tag ", m.tag, ")");
  }
  throw Timeout(detail::concat("not complete after ", describe_timeout(timeout_), " in ",
                               algorithm_, " algorithm, step '", step_, "'; still waiting for ",
                               waiting, " (set CHORUS_TIMEOUT to change the deadline)"),
                rank_, op_name_, seq_,
                !active_.empty()                                           ? active_.front()
                : !matches_.empty() && matches_.front().peer != kAnySource ? matches_.front().peer
                                                                           : -1);
}

}  // namespace chorus
