#include "transport/ucx/ucx_transport.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "chorus/communicator.h"
#include "chorus/config.h"
#include "chorus/error.h"
#include "chorus/kernels/cpu.h"
#include "chorus/log.h"
#include "chorus/timeout.h"

namespace chorus::transport {
namespace {

const IntKnob kSleepUs{"CHORUS_UCX_SLEEP_US", 2000,
                       "longest single event-fd sleep of a rank waiting for UCX peers (us)"};
const DoubleKnob kCloseTimeout{"CHORUS_UCX_CLOSE_TIMEOUT", 5.0,
                               "seconds a closing UCX communicator waits for its last sends to "
                               "be flushed to peers"};

// Tag = sender rank (24 bits) | message number in this direction (39 bits) | part (header 0,
// payload 1). Matched exactly: a receive takes precisely the message it expects.
constexpr int kRankShift = 40;
constexpr uint64_t kNumberMask = (uint64_t{1} << 39) - 1;
constexpr ucp_tag_t kFullMask = ~ucp_tag_t{0};
ucp_tag_t tag_of(int sender, uint64_t number, int part) {
  return (static_cast<uint64_t>(sender) << kRankShift) | ((number & kNumberMask) << 1) |
         static_cast<uint64_t>(part);
}

struct WireHeader {
  OpStamp stamp;
  uint64_t bytes = 0;
};
static_assert(sizeof(WireHeader) == 32);

std::string hex(const void* data, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(2 * n, '0');
  const auto* b = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[b[i] >> 4];
    s[2 * i + 1] = kDigits[b[i] & 15];
  }
  return s;
}
std::vector<uint8_t> unhex(const std::string& s) {
  auto v = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  std::vector<uint8_t> out(s.size() / 2);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<uint8_t>(v(s[2 * i]) << 4 | v(s[2 * i + 1]));
  return out;
}

void check_ucs(ucs_status_t status, const char* what, int rank) {
  if (status != UCS_OK)
    throw Error(ErrorKind::kTransport,
                detail::concat(what, " failed: ", ucs_status_string(status),
                               " (UCX_TLS / UCX_NET_DEVICES may exclude every usable transport)"),
                rank);
}

}  // namespace

// One peer. At most one send and one receive are in flight (the Exchange hands a link only the
// oldest unfinished request of each direction); each is a header message plus a payload message.
class UcxLink : public Link {
 public:
  UcxLink(UcxTransport& t, int peer, ucp_ep_h ep) : t_(t), peer_(peer), ep_(ep) {}
  ~UcxLink() override {
    for (void** req : {&send_req_[0], &send_req_[1]}) release(*req);
    for (void** req : {&recv_req_[0], &recv_req_[1]}) {
      if (*req != nullptr) ucp_request_cancel(t_.worker(), *req);
      release(*req);
    }
  }

  // This link's part of a request (Request::state): its step (0: not posted, 1: posted, 2: the
  // header of a receive checked) and the progress calls a send has had.
  struct Progress {
    uint8_t phase = 0;
    uint64_t calls = 0;
  };
  static Progress& state(Request& r) { return r.state<Progress>(); }

  bool progress_send(Request& r) override {
    if (state(r).phase == 0) {
      send_hdr_ = WireHeader{r.stamp, r.bytes};
      const uint64_t n = sent_++;
      send_req_[0] = post_send(&send_hdr_, sizeof send_hdr_, tag_of(t_.rank(), n, 0));
      send_req_[1] = post_send(r.src, r.bytes, tag_of(t_.rank(), n, 1));
      state(r).phase = 1;
    } else if (send_req_[0] != nullptr || send_req_[1] != nullptr) {
      t_.progress_worker();
    }
    const bool done = send_finished(send_req_[0]) & send_finished(send_req_[1]);
    if (!done) return state(r).calls++ == 0;  // moved when posted
    r.done = true;
    return true;
  }

  // The header of the next message is received on its own; its payload waits for the receive
  // that takes it (progress_recv posts it then, into that receive's buffer).
  bool peek(OpStamp& stamp) override {
    if (!peeking_) {
      hdr_len_ = 0;
      recv_req_[0] =
          post_recv(&recv_hdr_, sizeof recv_hdr_, tag_of(peer_, received_, 0), &hdr_len_);
      peeking_ = true;
    } else {
      t_.progress_worker();
    }
    if (!recv_finished(recv_req_[0], &hdr_len_, nullptr)) return false;
    check_header_length();
    stamp = recv_hdr_.stamp;
    return true;
  }

  bool progress_recv(Request& r, Request* forward_into) override {
    (void)forward_into;  // the forward is sent once the receive is done
    bool moved = false;
    if (state(r).phase == 0) {
      const uint64_t n = received_++;
      std::byte* into = r.dst;
      if (r.kind == Request::Kind::kRecvReduce) {
        if (staging_.size() < r.bytes) staging_.resize(r.bytes);
        into = staging_.data();
      }
      data_len_ = 0;
      data_status_ = UCS_OK;
      // peek() posted the header already (and may have received it): the payload only.
      if (!peeking_) {
        hdr_len_ = 0;
        recv_req_[0] = post_recv(&recv_hdr_, sizeof recv_hdr_, tag_of(peer_, n, 0), &hdr_len_);
      }
      peeking_ = false;
      recv_req_[1] = post_recv(into, r.bytes, tag_of(peer_, n, 1), &data_len_);
      state(r).phase = 1;
      moved = true;
    } else {
      t_.progress_worker();
    }
    if (state(r).phase == 1 && recv_finished(recv_req_[0], &hdr_len_, nullptr)) {
      check_header(r);
      state(r).phase = 2;
      moved = true;
    }
    if (!recv_finished(recv_req_[1], &data_len_, &data_status_) || state(r).phase != 2)
      return moved;
    if (data_status_ != UCS_OK) t_.throw_peer_error(peer_, data_status_, "a receive");
    if (r.kind == Request::Kind::kRecvReduce)
      kernels::reduce(r.dtype, r.op, r.dst, r.local, staging_.data(),
                      r.bytes / dtype_size(r.dtype));
    r.done = true;
    return true;
  }

  // The operation failed (a bad header, UcxTransport::abandon). Cancels the receives: UCX ends
  // those it has not matched yet at once. One it has matched (a rendezvous under way) runs on, so
  // its request is kept for abandon() to wait for: freeing it would let UCX write into the
  // caller's buffer after the failed call returned.
  void cancel_receives() {
    for (void* req : recv_req_)
      if (req != nullptr && ucp_request_check_status(req) == UCS_INPROGRESS)
        ucp_request_cancel(t_.worker(), req);
  }
  // Frees the requests that have ended; returns whether some are still under way (a receive UCX
  // had matched, a send still reading its buffer).
  bool settle() {
    bool busy = false;
    for (void** req : {&recv_req_[0], &recv_req_[1], &send_req_[0], &send_req_[1]}) {
      if (*req == nullptr) continue;
      if (ucp_request_check_status(*req) == UCS_INPROGRESS)
        busy = true;
      else
        release(*req);
    }
    return busy;
  }

 private:
  void* post_send(const void* buf, size_t len, ucp_tag_t tag) {
    ucp_request_param_t param{};
    ucs_status_ptr_t s = ucp_tag_send_nbx(ep_, buf, len, tag, &param);
    if (UCS_PTR_IS_ERR(s)) t_.throw_peer_error(peer_, UCS_PTR_STATUS(s), "a send");
    return s;  // null: completed at once
  }
  void* post_recv(void* buf, size_t len, ucp_tag_t tag, size_t* length) {
    // Always a request (no immediate completion): its length is read when it completes.
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    ucs_status_ptr_t s = ucp_tag_recv_nbx(t_.worker(), buf, len, tag, kFullMask, &param);
    if (UCS_PTR_IS_ERR(s)) t_.throw_peer_error(peer_, UCS_PTR_STATUS(s), "a receive");
    *length = 0;
    return s;
  }
  bool send_finished(void*& req) {
    if (req == nullptr) return true;
    const ucs_status_t st = ucp_request_check_status(req);
    if (st == UCS_INPROGRESS) return false;
    release(req);
    if (st != UCS_OK) t_.throw_peer_error(peer_, st, "a send");
    return true;
  }
  // A truncated payload (the peer sent more than expected) is reported through the header.
  bool recv_finished(void*& req, size_t* length, ucs_status_t* status) {
    if (req == nullptr) return true;
    ucp_tag_recv_info_t info{};
    const ucs_status_t st = ucp_tag_recv_request_test(req, &info);
    if (st == UCS_INPROGRESS) return false;
    release(req);
    *length = info.length;
    if (status != nullptr) {
      *status = st;
    } else if (st != UCS_OK) {
      t_.throw_peer_error(peer_, st, "a receive");
    }
    return true;
  }
  void release(void*& req) {
    if (req != nullptr) ucp_request_free(req);
    req = nullptr;
  }
  void check_header_length() const {
    if (hdr_len_ != sizeof(WireHeader))
      throw Error(ErrorKind::kTransport,
                  detail::concat("rank ", peer_, " sent a ", hdr_len_,
                                 "-byte message header "
                                 "(expected ",
                                 sizeof(WireHeader),
                                 "): not a chorus peer of the "
                                 "same version?"),
                  -1, {}, -1, peer_);
  }
  void check_header(const Request& r) {
    check_header_length();
    if (!(recv_hdr_.stamp == r.stamp)) {
      cancel_receives();
      throw StampMismatch{peer_, recv_hdr_.stamp, r.stamp};
    }
    if (recv_hdr_.bytes != r.bytes) {
      cancel_receives();
      throw Error(ErrorKind::kMismatch,
                  detail::concat("rank ", peer_, " sent a ", recv_hdr_.bytes,
                                 "-byte message where "
                                 "this rank expected ",
                                 r.bytes,
                                 " bytes (the ranks called different "
                                 "collectives, counts or types)"),
                  -1, {}, -1, peer_);
    }
  }
  UcxTransport& t_;
  int peer_;
  ucp_ep_h ep_;
  uint64_t sent_ = 0, received_ = 0;  // message numbers per direction
  bool peeking_ = false;  // peek() posted the header of message received_ (recv_req_[0])
  WireHeader send_hdr_, recv_hdr_;
  void* send_req_[2] = {nullptr, nullptr};
  void* recv_req_[2] = {nullptr, nullptr};
  size_t hdr_len_ = 0, data_len_ = 0;
  ucs_status_t data_status_ = UCS_OK;
  std::vector<std::byte> staging_;  // receive-reduce: the incoming operand lands here
};

void UcxTransport::on_endpoint_error(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* a = static_cast<ErrorArg*>(arg);
  a->transport->endpoint_failed(a->peer, status);
}

UcxTransport::UcxTransport(int rank, int world_size, std::span<const int> peers, Store& store,
                           std::chrono::milliseconds timeout)
    : rank_(rank),
      world_size_(world_size),
      store_(store),
      peers_(peers.begin(), peers.end()),
      hosts_(world_size),
      ep_status_(world_size, UCS_OK),
      left_(world_size),
      left_seen_(world_size) {
  fix_capabilities({});
  h_.ep_status = &ep_status_;
  sleep_cap_ns_ = std::max<long>(1000, static_cast<long>(kSleepUs.get()) * 1000);
  h_.close_timeout = std::chrono::milliseconds(static_cast<int64_t>(kCloseTimeout.get() * 1000));
  ucp_config_t* config = nullptr;
  check_ucs(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read", rank);
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.estimated_num_eps = peers_.size();
  const ucs_status_t init = ucp_init(&params, config, &h_.context);
  ucp_config_release(config);
  check_ucs(init, "ucp_init", rank);

  // The communicator runs one operation at a time, but not always on the same thread.
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  check_ucs(ucp_worker_create(h_.context, &wp, &h_.worker), "ucp_worker_create", rank);
  worker_ = h_.worker;
  check_ucs(ucp_worker_get_efd(worker_, &efd_), "ucp_worker_get_efd", rank);
  h_.wake_fd.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!h_.wake_fd) throw_system_error("eventfd", errno);

  ucp_address_t* address = nullptr;
  size_t address_len = 0;
  check_ucs(ucp_worker_get_address(worker_, &address, &address_len), "ucp_worker_get_address",
            rank);
  store.set("ucx/addr/" + std::to_string(rank), hex(address, address_len));
  ucp_worker_release_address(worker_, address);

  h_.eps.assign(world_size, nullptr);
  for (int p : peers_) {
    std::string addr;
    try {
      addr = store.get("ucx/addr/" + std::to_string(p), timeout);
    } catch (const Timeout&) {
      throw Timeout(
          detail::concat("rank ", p, " did not publish its UCX address within ",
                         describe_timeout(timeout), " (CHORUS_TIMEOUT sets the deadline)"),
          rank, "connect", -1, p);
    }
    // "host/<rank>" is "<host id>\n<place>" (transport/factory.cc); errors name the host.
    hosts_[p] = store.try_get("host/" + std::to_string(p)).value_or("?");
    hosts_[p].resize(std::min(hosts_[p].size(), hosts_[p].find('\n')));
    const std::vector<uint8_t> bytes = unhex(addr);
    err_args_.push_back(std::make_unique<ErrorArg>(ErrorArg{this, p}));
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(bytes.data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = on_endpoint_error;
    ep.err_handler.arg = err_args_.back().get();
    const ucs_status_t s = ucp_ep_create(worker_, &ep, &h_.eps[p]);
    if (s != UCS_OK)
      throw Error(ErrorKind::kTransport,
                  detail::concat("cannot open a UCX endpoint to rank ", p, " (host ", hosts_[p],
                                 "): ", ucs_status_string(s)),
                  rank, "connect", -1, p);
  }
  links_.resize(world_size);
  for (int p : peers_) links_[p] = std::make_unique<UcxLink>(*this, p, h_.eps[p]);
  CHORUS_INFO(kLogUcx, "ucx: rank ", rank, " connected to ", peers_.size(), " peers");
}

UcxTransport::~UcxTransport() { links_.clear(); }

UcxTransport::Handles::~Handles() {
  if (worker != nullptr) {
    // Flush-close every healthy endpoint (what was sent reaches the peer), force-close failed
    // ones; bounded, since a peer may be gone.
    std::vector<void*> pending;
    for (size_t p = 0; p < eps.size(); ++p) {
      if (eps[p] == nullptr) continue;
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = (*ep_status)[p] == UCS_OK ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
      ucs_status_ptr_t s = ucp_ep_close_nbx(eps[p], &param);
      if (s != nullptr && !UCS_PTR_IS_ERR(s)) pending.push_back(s);
    }
    const auto deadline = std::chrono::steady_clock::now() + close_timeout;
    while (!pending.empty() && std::chrono::steady_clock::now() < deadline) {
      ucp_worker_progress(worker);
      std::erase_if(pending, [](void* req) {
        if (ucp_request_check_status(req) == UCS_INPROGRESS) return false;
        ucp_request_free(req);
        return true;
      });
    }
    for (void* req : pending) ucp_request_free(req);
    ucp_worker_destroy(worker);
  }
  if (context != nullptr) ucp_cleanup(context);
}

Link& UcxTransport::link(int peer) {
  CHORUS_CHECK(peer >= 0 && peer < world_size_ && links_[peer] != nullptr, "no UCX link to rank ",
               peer);
  return *links_[peer];
}

void UcxTransport::progress_worker() {
  for (int i = 0; i < 4 && ucp_worker_progress(worker_) != 0; ++i) {
  }
}

bool UcxTransport::arm_worker() {
  if (!can_arm_) return true;
  const ucs_status_t s = ucp_worker_arm(worker_);
  if (s == UCS_OK) return true;
  if (s == UCS_ERR_BUSY) return false;
  CHORUS_WARN(kLogUcx, "ucx: ucp_worker_arm failed (", ucs_status_string(s),
              "); waiting rank polls every 50 us instead of sleeping on the event fd");
  can_arm_ = false;
  return true;
}

void UcxTransport::wait_events(long max_ns) {
  // The worker was armed just before (sleep()): an arrival from now on signals the event fd.
  // CHORUS_UCX_SLEEP_US bounds one sleep all the same (the Exchange checks its peers between).
  max_ns = std::min(max_ns, sleep_cap_ns_);
  if (!can_arm_) max_ns = std::min(max_ns, 50'000L);
  pollfd fds[2] = {{efd_, POLLIN, 0}, {h_.wake_fd.get(), POLLIN, 0}};
  const timespec ts{max_ns / 1'000'000'000L, max_ns % 1'000'000'000L};
  if (::ppoll(fds, 2, &ts, nullptr) > 0 && (fds[1].revents & POLLIN) != 0) {
    uint64_t v = 0;
    [[maybe_unused]] ssize_t n = ::read(h_.wake_fd.get(), &v, sizeof v);
  }
}

void UcxTransport::wake() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(h_.wake_fd.get(), &one, sizeof one);
}

void UcxTransport::abandon() {
  // Cancelled receives that UCX had not matched end at once. One it had matched (a rendezvous
  // under way) and a send still reading its buffer end when their transfer does or their
  // endpoint fails; they get up to a second (the peers are failing too, or gone), then the
  // endpoints are force-closed, which fails what still runs on them.
  for (auto& l : links_)
    if (l != nullptr) l->cancel_receives();
  auto settle = [&](std::chrono::steady_clock::duration limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      bool busy = false;
      for (auto& l : links_)
        if (l != nullptr && l->settle()) busy = true;
      if (!busy) return true;
      if (std::chrono::steady_clock::now() >= deadline) return false;
      ucp_worker_progress(worker_);
    }
  };
  using std::chrono::steady_clock;
  if (settle(std::min<steady_clock::duration>(h_.close_timeout, std::chrono::seconds(1)))) return;
  std::vector<void*> closing;
  for (int p : peers_) {
    if (h_.eps[p] == nullptr) continue;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t s = ucp_ep_close_nbx(h_.eps[p], &param);
    if (s != nullptr && !UCS_PTR_IS_ERR(s)) closing.push_back(s);
    h_.eps[p] = nullptr;
    if (ep_status_[p] == UCS_OK) ep_status_[p] = UCS_ERR_CANCELED;
  }
  const bool settled = settle(std::chrono::seconds(1));
  for (void* req : closing) {
    while (ucp_request_check_status(req) == UCS_INPROGRESS && ucp_worker_progress(worker_) != 0) {
    }
    ucp_request_free(req);
  }
  if (!settled)
    CHORUS_WARN(kLogUcx, "ucx: rank ", rank_,
                ": transfers of the failed operation did not end "
                "after its endpoints were closed");
}

void UcxTransport::endpoint_failed(int peer, ucs_status_t status) {
  if (peer >= 0 && peer < world_size_ && ep_status_[peer] == UCS_OK) {
    ep_status_[peer] = status;
    CHORUS_INFO(kLogUcx, "ucx: endpoint to rank ", peer, " failed: ", ucs_status_string(status));
  }
}

void UcxTransport::throw_peer_error(int peer, ucs_status_t status, const char* what) const {
  throw PeerFailure(detail::concat("rank ", peer, " (host ", hosts_[peer],
                                   ") is unreachable over "
                                   "UCX: ",
                                   what, " failed with '", ucs_status_string(status),
                                   "' (its process died, or the network between the hosts "
                                   "failed)"),
                    -1, {}, -1, peer);
}

// Reads every UCX peer's status notice; throws PeerFailure for a published failure.
void UcxTransport::read_statuses() {
  for (int p : peers_) {
    if (!left_[p].empty()) continue;
    const auto v = store_.try_get(status_key(p));
    if (!v) continue;
    if (v->rfind("left ", 0) == 0) {
      left_[p] = v->substr(5);
      left_seen_[p] = std::chrono::steady_clock::now();
    } else if (v->rfind("failed ", 0) == 0 && !failure_) {
      const size_t space = v->find(' ', 7);
      const int cause = std::atoi(v->c_str() + 7);
      const std::string text = space == std::string::npos ? "" : v->substr(space + 1);
      failure_rank_ = cause;
      failure_ = cause == p ? detail::concat("rank ", p, " failed: ", text)
                            : detail::concat("rank ", cause, " failed first (reported by rank ", p,
                                             "): ", text);
    }
  }
  check_alarm();
}

void UcxTransport::check_alarm() {
  if (failure_) throw PeerFailure(*failure_, -1, {}, -1, failure_rank_);
}

std::vector<int> UcxTransport::check_peers(std::span<const int> waiting_for, const OpStamp& mine) {
  // Notices (failed / left) bump one counter: one store round trip when nothing changed.
  const int64_t changes = store_.add("ucx/changes", 0);
  if (changes != changes_seen_) {
    changes_seen_ = changes;
    read_statuses();
  }
  check_alarm();
  // Two ranks waiting to receive from each other in different collectives exchange no message:
  // a rank waiting this long publishes its stamp and compares those of the peers it waits for.
  const bool collective = static_cast<Collective>(mine.coll) != Collective::kSend;
  if (collective && !waiting_for.empty()) {
    if (!published_) {
      store_.set("ucx/current/" + std::to_string(rank_),
                 std::string(reinterpret_cast<const char*>(&current_), sizeof current_));
      published_ = true;
    }
    for (int p : waiting_for) {
      const auto v = store_.try_get("ucx/current/" + std::to_string(p));
      if (!v || v->size() != sizeof(OpStamp)) continue;
      OpStamp theirs;
      std::memcpy(&theirs, v->data(), sizeof theirs);
      if (theirs.seq == mine.seq && static_cast<Collective>(theirs.coll) != Collective::kSend &&
          !(theirs == mine))
        throw StampMismatch{p, theirs, mine};
    }
  }
  // A peer announces that it left before it closes its endpoints, and the close flushes what it
  // sent: its last messages may still be on the wire (megabytes in the socket buffers). It is
  // gone when its endpoint fails (the closed connection, normally soon after) or, failing that,
  // once its close has had all its time.
  std::vector<int> gone;
  const auto now = std::chrono::steady_clock::now();
  for (int p : waiting_for)
    if (ep_status_[p] != UCS_OK ||
        (!left_[p].empty() && now - left_seen_[p] > h_.close_timeout + std::chrono::seconds(1)))
      gone.push_back(p);
  return gone;
}

std::string UcxTransport::why_gone(int p) {
  if (left_[p].empty()) {
    try {
      read_statuses();
    } catch (const PeerFailure& e) {
      return e.what();
    }
  }
  if (!left_[p].empty())
    return detail::concat("rank ", p, " left the communicator after ", left_[p],
                          " operations while this rank still waits for it (did it stop calling "
                          "early, e.g. a shorter loop?)");
  return detail::concat("rank ", p, " (host ", hosts_[p], ") is gone: UCX reported '",
                        ucs_status_string(ep_status_[p]),
                        "' on its endpoint (its process died, "
                        "or the network between the hosts failed)");
}

void UcxTransport::announce_failure(int cause_rank, std::string_view text) {
  if (announced_) return;
  announced_ = true;
  try {
    store_.set(status_key(rank_), detail::concat("failed ", cause_rank, " ", text));
    store_.add("ucx/changes", 1);
  } catch (...) {
    // Best effort: the store may be gone too; peers then learn from their endpoints.
  }
}

void UcxTransport::announce_exit() {
  if (announced_) return;
  announced_ = true;
  try {
    store_.set(status_key(rank_), detail::concat("left ", ops_done_));
    store_.add("ucx/changes", 1);
  } catch (...) {
  }
}

bool UcxTransport::process_alive(int peer) {
  return peer < 0 || peer >= world_size_ || ep_status_[peer] == UCS_OK;
}

}  // namespace chorus::transport
