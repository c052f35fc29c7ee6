// chorus_torch — a c10d::Work over the chorus::Work handles of one process-group call.
//
// A call hands chorus one operation (the uneven all-to-all one per step); they complete in issue
// order. The Work completes once all of them have: whoever sees that first (wait(),
// isCompleted(), or the process group's completer for getFuture()) makes the staged copies back
// into the caller's tensors, marks the Work and its Future, and drops the staged buffers. Errors
// are chorus's own exceptions (chorus::PeerFailure, Timeout, Mismatch ...), rethrown unchanged.
//
// A send or receive may be issued after its Work is made (process_group_chorus.h, "Deferred
// point-to-point"): such a Work is attached to its operation later, and waiting on it first asks
// the group to issue it (`issue_now`).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "chorus/communicator.h"
#include "tensors.h"

namespace chorus::torch {

class WorkChorus final : public ::c10d::Work {
 public:
  // `outputs`: what result() and the Future return. `source_rank`: the peer of a recv,
  // kFromAnySource for a receive from any rank (chorus's Work says whose), else -1.
  static constexpr int kFromAnySource = -2;
  WorkChorus(int rank, ::c10d::OpType type, std::string call, Staging staging,
             std::vector<at::Tensor> outputs, int source_rank = -1);

  // Hands over the operations (once, from the issuing thread).
  void attach(std::vector<chorus::Work> works);
  // The call was refused when it was issued (chorus threw before anything ran, e.g. a receive
  // from self with nothing sent): attaches nothing and completes with `error`.
  void refuse(std::exception_ptr error);
  bool attached() const { return attached_.load(std::memory_order_acquire); }

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  int sourceRank() const override;
  // Host memory: nothing to order on a device stream.
  void synchronize() override {}
  // timeout 0 = until chorus's own deadline for the operation; otherwise throws after `timeout`
  // (the operation goes on).
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Blocks until every chorus operation has finished, then completes; never throws.
  void settle();
  // Whether chorus has finished with every buffer of this call (no completion work done).
  bool chorus_done() const;

  // Set by the process group. on_future: getFuture() hands this Work over to be settle()d
  // by someone, so that its Future completes. issue_now: issues a Work not yet attached.
  std::function<void(c10::intrusive_ptr<WorkChorus>)> on_future;
  std::function<void()> issue_now;

 private:
  void complete(std::exception_ptr error);
  void ensure_attached();

  const std::string call_;
  std::vector<chorus::Work> works_;  // written once, before attached_ is set
  std::atomic<bool> attached_{false};
  Staging staging_;
  std::vector<at::Tensor> outputs_;
  const int source_rank_;
  std::once_flag completed_once_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // guarded by mutex_ (the base class's)
};

// Completes the Futures that DDP and communication hooks wait on: one thread settles each Work
// handed to it, in order (the operations complete in issue order anyway).
class Completer {
 public:
  Completer() = default;
  ~Completer();  // settles what is queued, then stops
  Completer(const Completer&) = delete;
  Completer& operator=(const Completer&) = delete;

  void add(c10::intrusive_ptr<WorkChorus> work);

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<WorkChorus>> queue_;
  bool stopping_ = false;
  std::thread thread_;  // started by the first add()
};

}  // namespace chorus::torch
