// chorus_torch — ProcessGroupChorus, the torch.distributed backend "chorus": a c10d::ProcessGroup
// over one chorus::Communicator. Each call checks and stages its tensors (tensors.h), hands chorus
// the operation, and returns a WorkChorus over chorus's Work; nothing else happens here.
//
// Ordering: chorus runs a communicator's operations one at a time, in issue order, on its
// progress thread, and so do all calls on this group.
//
// Deferred point-to-point. A chorus send is done only once its receiver has taken the message,
// so two ranks that each isend to the other before they irecv would wait for each other. A send
// or receive is therefore held back for a moment: if the next call is one of the other kind, the
// two run together as one chorus send_recv (isend + irecv, in either order, is an exchange);
// any other call, a wait on its Work, or kHoldBack passing issues it alone. batch_isend_irecv
// holds the whole batch and pairs its k-th send with its k-th receive.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "chorus/communicator.h"
#include "work_chorus.h"

namespace chorus::torch {

class C10dStore;

class ProcessGroupChorus final : public ::c10d::ProcessGroup {
 public:
  // Sets up the communicator through `store` (every rank of the group calls this). `timeout`
  // becomes the communicator's (chorus::CommOptions::timeout), except torch's default of 30
  // minutes when CHORUS_TIMEOUT is set: then CHORUS_TIMEOUT applies.
  ProcessGroupChorus(const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout);
  ~ProcessGroupChorus() override;

  const std::string getBackendName() const override { return "chorus"; }
  Communicator& communicator() { return *comm_; }

  c10::intrusive_ptr<::c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                             const ::c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                             const ::c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const ::c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                          const ::c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                             std::vector<at::Tensor>& inputs,
                                             const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                   const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const ::c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const ::c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                           std::vector<std::vector<at::Tensor>>& inputs,
                                           const ::c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const ::c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const ::c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                                 std::vector<int64_t>& output_split_sizes,
                                                 std::vector<int64_t>& input_split_sizes,
                                                 const ::c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                            std::vector<at::Tensor>& inputs,
                                            const ::c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<::c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                        int tag) override;
  c10::intrusive_ptr<::c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                        int tag) override;
  c10::intrusive_ptr<::c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                                 int tag) override;
  c10::intrusive_ptr<::c10d::Work> barrier(const ::c10d::BarrierOptions& opts) override;
  // Through the group's store; names the ranks that did not arrive (monitored_barrier.cc).
  void monitoredBarrier(const ::c10d::BarrierOptions& opts, bool wait_all_ranks) override;

  // batch_isend_irecv: the sends and receives issued in between run at endCoalescing().
  void startCoalescing() override;
  void endCoalescing(std::vector<c10::intrusive_ptr<::c10d::Work>>& reqs) override;

 private:
  // How long a lone send or receive waits for a partner before it is issued alone: long enough
  // for the next line of Python, short against any transfer that matters.
  static constexpr std::chrono::microseconds kHoldBack{500};

  using Issue = std::function<std::vector<chorus::Work>(Communicator&)>;
  // Runs `issue` (which hands chorus the call's operations) under the issue lock with the call's
  // timeout, and wraps what it returns.
  c10::intrusive_ptr<WorkChorus> run(::c10d::OpType type, const std::string& call,
                                     std::chrono::milliseconds timeout, Staging staging,
                                     std::vector<at::Tensor> outputs, const Issue& issue,
                                     int source_rank = -1);
  c10::intrusive_ptr<WorkChorus> make_work(::c10d::OpType type, const std::string& call,
                                           Staging staging, std::vector<at::Tensor> outputs,
                                           int source_rank);
  // torch's per-call timeout (kUnsetTimeout: the group's) for the operations issued next.
  void set_call_timeout(std::chrono::milliseconds timeout);

  // A send or receive held back (see "Deferred point-to-point").
  struct Pending {
    c10::intrusive_ptr<WorkChorus> work;
    Elements elements;
    int peer;  // a receive's: kAnySource too
    int tag;
    bool is_send;
  };
  c10::intrusive_ptr<::c10d::Work> hold(Pending p);
  // Issues what is held back, pairing sends with receives (issue lock held).
  void issue_pending();
  void issue_held();  // takes the issue lock
  void hold_back_loop();

  std::shared_ptr<Completer> completer_ = std::make_shared<Completer>();
  std::mutex issue_mu_;  // one thread at a time issues (chorus's rule); guards what follows
  // Calls chorus may still be reading or writing: their tensors stay alive with them.
  std::deque<c10::intrusive_ptr<WorkChorus>> in_flight_;
  std::chrono::milliseconds call_timeout_{0};
  bool coalescing_ = false;
  std::vector<Pending> pending_;
  std::chrono::steady_clock::time_point held_since_;
  std::condition_variable held_cv_;
  bool stopping_ = false;
  std::thread hold_back_thread_;  // issues a lone send or receive after kHoldBack
  std::optional<Communicator> comm_;
  std::shared_ptr<C10dStore> store_;   // the group's, shared with the communicator
  std::chrono::milliseconds timeout_;  // the group's, as the communicator's
  uint64_t monitored_barriers_ = 0;    // monitoredBarrier calls so far
};

}  // namespace chorus::torch
