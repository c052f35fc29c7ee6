// ProcessGroupChorus's point-to-point calls: send, recv and batches (batch_isend_irecv), held
// back and paired into chorus send_recv operations (process_group_chorus.h, "Deferred
// point-to-point").
#include "chorus/error.h"
#include "process_group_chorus.h"

namespace chorus::torch {
namespace {

using ::c10d::OpType;
using WorkPtr = c10::intrusive_ptr<::c10d::Work>;

// The peer may be this rank: chorus queues a message to self until its receive takes it, which
// must come after the send (or with it, as the two of a batch or a held-back pair). Messages
// match by source, tag and order (chorus/communicator.h, "Point-to-point matching").
void check_peer(int peer, int size, int tag, const std::string& call) {
  CHORUS_ARG_CHECK(tag >= 0, call, ": tag ", tag, " is negative (tags are 0 or more)");
  CHORUS_ARG_CHECK(peer >= 0 && peer < size, call, ": rank ", peer, " is out of range [0, ", size,
                   ")");
}

}  // namespace

// ---- calls -------------------------------------------------------------------------------------

WorkPtr ProcessGroupChorus::send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) {
  const std::string call = "send";
  const at::Tensor& t = single(tensors, call, "tensor");
  check_peer(dst_rank, size_, tag, call);
  Staging s;
  const Elements e = movable(s.input(t));
  return hold({make_work(OpType::SEND, call, std::move(s), {t}, -1), e, dst_rank, tag, true});
}

WorkPtr ProcessGroupChorus::recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) {
  const std::string call = "recv";
  const at::Tensor& t = single(tensors, call, "tensor");
  check_peer(src_rank, size_, tag, call);
  Staging s;
  const Elements e = movable(s.output(t));
  return hold(
      {make_work(OpType::RECV, call, std::move(s), {t}, src_rank), e, src_rank, tag, false});
}

// recv without a source: chorus's receive from any other rank (kAnySource).
WorkPtr ProcessGroupChorus::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  const std::string call = "recv (any source)";
  const at::Tensor& t = single(tensors, call, "tensor");
  CHORUS_ARG_CHECK(tag >= 0, call, ": tag ", tag, " is negative (tags are 0 or more)");
  CHORUS_ARG_CHECK(size_ > 1, call, ": a group of one rank has no other rank to receive from");
  Staging s;
  const Elements e = movable(s.output(t));
  return hold(
      {make_work(OpType::RECVANYSOURCE, call, std::move(s), {t}, WorkChorus::kFromAnySource), e,
       kAnySource, tag, false});
}

void ProcessGroupChorus::startCoalescing() {
  std::lock_guard lock(issue_mu_);
  TORCH_CHECK(!coalescing_, "chorus backend: batches (batch_isend_irecv) do not nest");
  issue_pending();
  coalescing_ = true;
}

void ProcessGroupChorus::endCoalescing(std::vector<WorkPtr>&) {
  std::lock_guard lock(issue_mu_);
  coalescing_ = false;
  issue_pending();
}

// ---- holding back ------------------------------------------------------------------------------

c10::intrusive_ptr<::c10d::Work> ProcessGroupChorus::hold(Pending p) {
  p.work->issue_now = [this] { issue_held(); };  // the group outlives what it holds back
  c10::intrusive_ptr<::c10d::Work> work = p.work;
  std::unique_lock lock(issue_mu_);
  if (coalescing_) {
    pending_.push_back(std::move(p));
    return work;
  }
  // A send after a receive, or a receive after a send: an exchange.
  const bool partner = pending_.size() == 1 && pending_[0].is_send != p.is_send;
  if (!partner) issue_pending();
  pending_.push_back(std::move(p));
  if (partner) {
    issue_pending();
    return work;
  }
  held_since_ = std::chrono::steady_clock::now();
  if (!hold_back_thread_.joinable()) hold_back_thread_ = std::thread([this] { hold_back_loop(); });
  lock.unlock();
  held_cv_.notify_all();
  return work;
}

void ProcessGroupChorus::issue_held() {
  std::lock_guard lock(issue_mu_);
  if (!coalescing_) issue_pending();
}

void ProcessGroupChorus::hold_back_loop() {
  std::unique_lock lock(issue_mu_);
  while (!stopping_) {
    if (pending_.empty() || coalescing_) {
      held_cv_.wait(lock);
      continue;
    }
    const auto due = held_since_ + kHoldBack;
    if (std::chrono::steady_clock::now() < due) {
      held_cv_.wait_until(lock, due);
      continue;
    }
    issue_pending();
  }
}

void ProcessGroupChorus::issue_pending() {
  if (pending_.empty()) return;
  std::vector<Pending> pending = std::move(pending_);
  pending_.clear();
  std::vector<Pending*> sends, recvs;
  for (auto& p : pending) (p.is_send ? sends : recvs).push_back(&p);
  set_call_timeout(::c10d::kUnsetTimeout);
  // The k-th send and the k-th receive go together; the rest alone, in order.
  const size_t pairs = std::min(sends.size(), recvs.size());
  for (size_t k = 0; k < pairs; ++k) {
    Elements se = sends[k]->elements, re = recvs[k]->elements;
    if (se.dtype != re.dtype) {  // one type per send_recv: count both in bytes
      se = {se.data, se.count * dtype_size(se.dtype), DataType::kU8};
      re = {re.data, re.count * dtype_size(re.dtype), DataType::kU8};
    }
    try {
      chorus::Work w =
          comm_->send_recv_async(se.data, se.count, sends[k]->peer, re.data, re.count,
                                 recvs[k]->peer, se.dtype, sends[k]->tag, recvs[k]->tag);
      sends[k]->work->attach({w});
      recvs[k]->work->attach({w});
    } catch (...) {  // refused before it ran: each Work reports it, the others still go
      sends[k]->work->refuse(std::current_exception());
      recvs[k]->work->refuse(std::current_exception());
    }
  }
  for (auto& p : pending) {
    if (p.work->attached()) continue;
    const Elements& e = p.elements;
    try {
      p.work->attach({p.is_send ? comm_->send_async(e.data, e.count, e.dtype, p.peer, p.tag)
                                : comm_->recv_async(e.data, e.count, e.dtype, p.peer, p.tag)});
    } catch (...) {
      p.work->refuse(std::current_exception());
    }
  }
  for (auto& p : pending) in_flight_.push_back(p.work);
}

}  // namespace chorus::torch
