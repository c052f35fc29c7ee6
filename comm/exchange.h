// chorus — the request engine algorithms talk to.
//
// An algorithm posts sends, receives and receive-reduces to peers and waits for some or all of
// them; the Exchange drives every pending request of every link while it waits, so posting a
// send and a receive and waiting for both can never deadlock on a full FIFO. Requests to one peer
// in one direction complete in posting order.
//
// Waiting spins briefly (not at all when ranks outnumber cores), yields, then sleeps on the
// rank's doorbell; every wait has a deadline and a timeout names the operation, the step and the
// peers still pending.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <deque>
#include <list>
#include <mutex>
#include <string>
#include <vector>

#include "chorus/types.h"
#include "transport/transport.h"
#include "wait_policy.h"

namespace chorus {

class Exchange {
 public:
  using RequestId = size_t;

  Exchange(transport::Transport& transport, int rank, int world_size, const WaitPolicy& policy)
      : transport_(transport),
        waiter_(transport.waiter()),
        monitor_(transport.monitor()),
        rank_(rank),
        links_(world_size, nullptr),
        send_q_(world_size),
        recv_q_(world_size),
        policy_(policy),
        p2p_sent_(world_size),
        p2p_received_(world_size) {}

  // Starts a new operation: forgets finished requests, sets the deadline, the names used in
  // error messages and the stamp every message of the operation carries. `fifo_only`: its sends
  // copy through the transport's buffers, never single copy (algo::Path::kFifo).
  void begin(const char* op_name, int64_t seq, const char* algorithm,
             std::chrono::milliseconds timeout, const transport::OpStamp& stamp,
             bool fifo_only = false);
  // Labels the current step for timeout messages (a static string).
  void step(const char* label) { step_ = label; }

  // Sends of at most this many bytes start inside post_send when nothing is queued ahead of them
  // for that peer.
  static constexpr size_t kEagerPostBytes = 4096;

  // `assist`: this rank waits for the send with nothing else to do; the receiver of a large
  // message it reads single copy may hand part of the copy back to this rank's wait
  // (transport::Request::kSenderIdle).
  RequestId post_send(int peer, const void* src, size_t bytes, bool assist = false);
  // `stream`: write dst with streaming stores (a large result the algorithm does not read again;
  // transport::Request::kNotReadAgain).
  RequestId post_recv(int peer, void* dst, size_t bytes, bool stream = false);
  // dst = local op incoming (count elements of dtype); dst may equal local.
  RequestId post_recv_reduce(int peer, void* dst, const void* local, size_t count, DataType dtype,
                             ReduceOp op, bool stream = false);
  // Sends on to `peer` what the receive `from` (the request posted just before) writes to its
  // dst, in the order of the sends to `peer`: NCCL's recvCopySend / recvReduceCopySend. The shared
  // memory transport writes each incoming piece straight into `peer`'s FIFO as well, so the result
  // is not read back; elsewhere the send starts once the receive is done.
  RequestId post_forward(RequestId from, int peer);

  // Point-to-point (the Communicator's send, recv and send_recv; only their operations post
  // these). Messages from one rank to another are numbered in the order sent and carry their
  // tag; a send goes out as posted. A receive is matched: it takes the oldest message from `peer`
  // (chorus::kAnySource: from any other rank) that carries `tag`. Messages ahead of it with other
  // tags are set aside into memory of the Exchange, in order, where later receives look first; so
  // the messages of one tag from one rank arrive in the order they were sent, whatever other tags
  // do. A receive whose tag is that of the next message takes it straight into its buffer like
  // any receive (a set-aside costs one copy more). A receive of another size than the message it
  // matches fails with chorus::Mismatch. Messages of no bytes travel too (so they match).
  RequestId post_p2p_send(int peer, const void* src, size_t bytes, int tag, bool assist = false);
  RequestId post_p2p_recv(int peer, void* dst, size_t bytes, int tag);
  // The rank whose message a finished point-to-point receive took.
  int source_of(RequestId id) const { return requests_[id].peer; }
  // Messages set aside and not received yet (tests).
  size_t set_aside() const { return set_aside_.size(); }

  // Fan-out (transport::Capabilities::fans_out, which is the same on every rank): the same `bytes`
  // at src to every peer, written once into this rank's shared buffer and copied out of it by each
  // peer; wait_all() waits for all of them to have it. Every peer receives it with post_fan_in(this
  // rank, ...), and must: a rank's shared buffer carries every message to every peer, in order.
  // At most one fan-out per operation (its sends join one message as the links reach them).
  bool fans_out() const { return transport_.capabilities().fans_out; }
  // `copy_to`: also copy the bytes there (this rank's own result), from the shared buffer as it is
  // written, with streaming stores if `stream`.
  void post_fan_out(const void* src, size_t bytes, void* copy_to = nullptr, bool stream = false);
  RequestId post_fan_in(int peer, void* dst, size_t bytes, bool stream = false);

  // The one-shot pattern of the direct algorithms, one message of `bytes` per pair: this rank
  // sends src + p * src_stride to each peer p of `to` and receives from each peer p of `from`
  // into inbox + p * inbox_stride, and returns when all have gone and arrived. `to` and `from`
  // name one rank, kAllPeers (every rank but this one) or kNoPeer. Messages of up to
  // kEagerPostBytes skip the request queues where the link allows (Link::send_now): each goes
  // out whole at once, and arrivals are polled for directly while the wait policy spins.
  // Whatever that does not finish becomes posted requests, waited for as wait_all() does
  // (sleeping, deadline, failed peers); so does everything larger.
  static constexpr int kAllPeers = -1, kNoPeer = -2;
  void exchange_small(int to, const std::byte* src, size_t src_stride, int from, std::byte* inbox,
                      size_t inbox_stride, size_t bytes);
  // The same through the shared buffers (fans_out() must hold): when src is set, this rank
  // fans out `bytes` at src to every peer (and copies them to copy_to, when set); it receives
  // each peer p of `from` (one rank, kAllPeers or kNoPeer) into inbox + p * inbox_stride. Up to
  // kFanSmallBytes the message is written whole at once (Transport::fan_send_now) and arrivals
  // are polled for directly while the wait policy spins; the rest becomes posted requests.
  // Puts (transport::Capabilities::puts_to_all, the same on every rank; never on the FIFO path):
  // this rank writes `bytes` at src into a peer's memory at `remote`, an address the peer sent it,
  // one copy on this rank's core. The peer learns of it only from a message sent after.
  bool puts() const { return !fifo_only_ && transport_.capabilities().puts_to_all; }
  void put(int peer, const void* src, uint64_t remote, size_t bytes);

  static constexpr size_t kFanSmallBytes = 32 << 10;
  void fan_small(const void* src, void* copy_to, int from, std::byte* inbox, size_t inbox_stride,
                 size_t bytes);

  void wait(RequestId id);
  void wait_all();
  // One progress pass without waiting: starts what was posted (a single-copy send becomes
  // readable by its peer at once), so that local work (a rank's copy of its own block) can
  // overlap the peers' reads.
  void poke();
  bool done(RequestId id) const { return requests_[id].done; }

  // What a blocked wait is waiting for, published while it sleeps (read by flight-recorder dumps
  // from other threads).
  struct Waiting {
    std::mutex mu;
    std::vector<int> peers;
    std::string step;
  };
  void publish_waiting_to(Waiting* w) { waiting_ = w; }
  // Set from any thread to make waits fail promptly (Communicator::abort).
  void set_abort_flag(const std::atomic<bool>* flag) { abort_ = flag; }

 private:
  RequestId post(transport::Request r);
  // A send of `bytes` from `src` to `peer` with this exchange's path settings, not yet posted.
  transport::Request send_request(int peer, const void* src, size_t bytes, bool assist) const;
  // Puts a request on its peer's queue (eager small sends go out at once).
  void queue(transport::Request& req);
  // Binds point-to-point receives to messages (set aside, or next from a peer); returns whether
  // anything moved. Runs at the start of every progress pass while receives wait for a match.
  bool match();
  // The peers a wait waits for: those with queued requests, and those an unmatched receive may
  // take from.
  const std::vector<int>& awaited();
  transport::Link& link(int peer) {
    transport::Link* l = links_[static_cast<size_t>(peer)];
    return l != nullptr ? *l : *(links_[static_cast<size_t>(peer)] = &transport_.link(peer));
  }
  // One pass over every link with pending requests. Returns whether anything moved.
  bool progress();
  // Peer checks, abort, published waiting state; returns whether its extra progress pass moved.
  bool on_sleep();
  template <class Done>
  void wait_until(Done&& done);
  [[noreturn]] void throw_timeout() const;
  [[noreturn]] void throw_mismatch(const transport::StampMismatch& m) const;

  transport::Transport& transport_;
  transport::Waiter& waiter_;        // transport_.waiter()
  transport::PeerMonitor& monitor_;  // transport_.monitor()
  int rank_;
  std::vector<transport::Link*> links_;                  // transport_.link(p), looked up once
  std::deque<transport::Request> requests_;              // stable addresses
  std::vector<std::deque<transport::Request*>> send_q_;  // per peer, oldest first
  std::vector<std::deque<transport::Request*>> recv_q_;
  std::vector<int> active_;  // peers with anything queued
  size_t pending_ = 0;
  WaitPolicy policy_;
  std::chrono::steady_clock::time_point deadline_;
  std::chrono::milliseconds timeout_{0};
  transport::OpStamp stamp_;
  bool fifo_only_ = false;   // begin(): sends of this operation never go single copy
  bool fanned_out_ = false;  // post_fan_out() was called in this operation
  long yield_ns_ = 0;        // begin(): policy_.yield_ns if the operation is large enough
  // This rank's recent collectives (a ring: history_[k % size] is the k-th begun).
  std::array<transport::OpStamp, 64> history_{};
  uint64_t history_count_ = 0;
  std::vector<uint64_t> p2p_sent_, p2p_received_;  // per peer: send/recv message numbers
  // Messages taken out of the way of a receive of another tag, oldest first; `request` is the
  // receive that copies one in (valid in the operation that set it aside: every operation ends
  // with its set-asides arrived).
  struct SetAside {
    int peer, tag;
    std::vector<std::byte> data;
    RequestId request;
    bool arrived = false;
    bool claimed = false;  // a receive of this operation takes it once it has arrived
  };
  std::list<SetAside> set_aside_;
  // Receives of this operation not bound to a message yet (post_p2p_recv).
  struct Match {
    RequestId request;
    int peer, tag;
    std::list<SetAside>::iterator from;  // set_aside_.end(): none yet
  };
  std::vector<Match> matches_;
  std::vector<int> awaited_;
  int next_any_ = 0;  // where an any-source receive starts looking (round robin)
  std::chrono::steady_clock::time_point last_check_{};
  Waiting* waiting_ = nullptr;
  const std::atomic<bool>* abort_ = nullptr;
  const char* op_name_ = "";
  const char* algorithm_ = "";
  const char* step_ = "";
  int64_t seq_ = -1;
};

}  // namespace chorus
