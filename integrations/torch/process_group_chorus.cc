#include "process_group_chorus.h"

#include <cstdlib>

#include "c10d_store.h"
#include "chorus/error.h"

namespace chorus::torch {
namespace {

using ::c10d::OpType;
using WorkPtr = c10::intrusive_ptr<::c10d::Work>;
using Works = std::vector<chorus::Work>;

std::chrono::milliseconds group_timeout(std::chrono::milliseconds timeout) {
  // torch's default says nothing about this job; CHORUS_TIMEOUT, when set, does.
  if (timeout == kProcessGroupDefaultTimeout && std::getenv("CHORUS_TIMEOUT") != nullptr)
    return std::chrono::milliseconds(0);
  return timeout;
}

int check_root(int64_t root, int size, const std::string& call) {
  CHORUS_ARG_CHECK(root >= 0 && root < size, call, ": root rank ", root, " is out of range [0, ",
                   size, ")");
  return static_cast<int>(root);
}

// Split sizes of an all-to-all as element counts per peer: `splits` rows of t (empty = equal).
std::vector<size_t> split_counts(const at::Tensor& t, const std::vector<int64_t>& splits, int size,
                                 const std::string& call, const char* what) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const int64_t row = rows == 0 ? 0 : t.numel() / rows;
  std::vector<size_t> counts(static_cast<size_t>(size));
  if (splits.empty()) {
    CHORUS_ARG_CHECK(rows % size == 0, call, ": ", what, " has ", rows,
                     " rows, which do not split evenly over ", size, " ranks");
    for (auto& c : counts) c = static_cast<size_t>(rows / size * row);
    return counts;
  }
  CHORUS_ARG_CHECK(splits.size() == static_cast<size_t>(size), call, ": ", what,
                   " split sizes have ", splits.size(), " entries for ", size, " ranks");
  int64_t total = 0;
  for (size_t i = 0; i < splits.size(); ++i) {
    CHORUS_ARG_CHECK(splits[i] >= 0, call, ": ", what, " split size ", i, " is negative");
    counts[i] = static_cast<size_t>(splits[i] * row);
    total += splits[i];
  }
  CHORUS_ARG_CHECK(total == rows, call, ": ", what, " split sizes add up to ", total,
                   " rows but it has ", rows);
  return counts;
}

// The all-to-all with per-peer blocks, as size - 1 exchange steps: at step k every rank sends its
// block for rank + k and receives the block of rank - k, so each step's sends and receives pair
// up on all ranks at once. A rank's own block is copied locally (send to self is not chorus's).
// `send[i]` / `recv[i]`: the block for / from rank i, in elements of `dtype`.
Works exchange_blocks(Communicator& c, const std::vector<const std::byte*>& send,
                      const std::vector<size_t>& send_counts, const std::vector<std::byte*>& recv,
                      const std::vector<size_t>& recv_counts, DataType dtype) {
  const int n = c.size(), r = c.rank();
  Works works;
  for (int k = 1; k < n; ++k) {
    const auto to = static_cast<size_t>((r + k) % n), from = static_cast<size_t>((r - k + n) % n);
    works.push_back(c.send_recv_async(send[to], send_counts[to], static_cast<int>(to), recv[from],
                                      recv_counts[from], static_cast<int>(from), dtype));
  }
  return works;
}

}  // namespace

// ---- set-up ------------------------------------------------------------------------------------

ProcessGroupChorus::ProcessGroupChorus(const c10::intrusive_ptr<::c10d::Store>& store, int rank,
                                       int size, std::chrono::milliseconds timeout)
    : ::c10d::ProcessGroup(rank, size),
      store_(std::make_shared<C10dStore>(store)),
      timeout_(group_timeout(timeout)) {
  CommOptions options;
  options.timeout = timeout_;
  comm_.emplace(rank, size, store_, options);
}

ProcessGroupChorus::~ProcessGroupChorus() {
  issue_held();
  {
    std::lock_guard lock(issue_mu_);
    stopping_ = true;
  }
  held_cv_.notify_all();
  if (hold_back_thread_.joinable()) hold_back_thread_.join();
  // The communicator finishes every queued operation before it goes; then nothing touches the
  // tensors of in_flight_, and the completer's Works are all done.
  comm_.reset();
  completer_.reset();
  in_flight_.clear();
}

// ---- plumbing ----------------------------------------------------------------------------------

void ProcessGroupChorus::set_call_timeout(std::chrono::milliseconds timeout) {
  const std::chrono::milliseconds want =
      timeout.count() > 0 ? timeout : std::chrono::milliseconds(0);
  if (want == call_timeout_) return;
  comm_->set_timeout(want);
  call_timeout_ = want;
}

c10::intrusive_ptr<WorkChorus> ProcessGroupChorus::make_work(OpType type, const std::string& call,
                                                             Staging staging,
                                                             std::vector<at::Tensor> outputs,
                                                             int source_rank) {
  auto work = c10::make_intrusive<WorkChorus>(rank_, type, call, std::move(staging),
                                              std::move(outputs), source_rank);
  work->on_future = [weak =
                         std::weak_ptr<Completer>(completer_)](c10::intrusive_ptr<WorkChorus> w) {
    if (auto completer = weak.lock())
      completer->add(std::move(w));
    else
      w->settle();  // the group is gone, and with it every operation
  };
  return work;
}

c10::intrusive_ptr<WorkChorus> ProcessGroupChorus::run(OpType type, const std::string& call,
                                                       std::chrono::milliseconds timeout,
                                                       Staging staging,
                                                       std::vector<at::Tensor> outputs,
                                                       const Issue& issue, int source_rank) {
  auto work = make_work(type, call, std::move(staging), std::move(outputs), source_rank);
  std::lock_guard lock(issue_mu_);
  TORCH_CHECK(!coalescing_, "chorus backend: ", call,
              " inside a batch: only isend and irecv can be batched (batch_isend_irecv)");
  issue_pending();
  set_call_timeout(timeout);
  work->attach(issue(*comm_));
  while (!in_flight_.empty() && in_flight_.front()->chorus_done()) in_flight_.pop_front();
  in_flight_.push_back(work);
  return work;
}

// ---- collectives -------------------------------------------------------------------------------

WorkPtr ProcessGroupChorus::broadcast(std::vector<at::Tensor>& tensors,
                                      const ::c10d::BroadcastOptions& opts) {
  const std::string call = "broadcast";
  const at::Tensor& t = single(tensors, call, "tensor");
  CHORUS_ARG_CHECK(opts.rootTensor == 0, call, ": rootTensor ", opts.rootTensor, " (one tensor)");
  const int root = check_root(opts.rootRank, size_, call);
  Staging s;
  const Elements e = movable(s.in_out(t));
  return run(OpType::BROADCAST, call, opts.timeout, std::move(s), {t}, [&](Communicator& c) {
    return Works{c.broadcast_async(e.data, e.data, e.count, e.dtype, root)};
  });
}

WorkPtr ProcessGroupChorus::allreduce(std::vector<at::Tensor>& tensors,
                                      const ::c10d::AllreduceOptions& opts) {
  const std::string call = "allreduce";
  const at::Tensor& t = single(tensors, call, "tensor");
  const ReduceOp op = reduce_op(opts.reduceOp, call);
  Staging s;
  const Elements e = reducible(s.in_out(t), call, opts.reduceOp);
  return run(OpType::ALLREDUCE, call, opts.timeout, std::move(s), {t}, [&](Communicator& c) {
    return Works{c.all_reduce_async(e.data, e.data, e.count, e.dtype, op)};
  });
}

WorkPtr ProcessGroupChorus::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                const ::c10d::AllreduceCoalescedOptions& opts) {
  const std::string call = "allreduce_coalesced";
  CHORUS_ARG_CHECK(!tensors.empty(), call, ": no tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    check_tensor(tensors[i], call, "tensor");
    CHORUS_ARG_CHECK(tensors[i].scalar_type() == tensors[0].scalar_type(), call, ": tensor ", i,
                     " has dtype ", tensors[i].scalar_type(), " but tensor 0 has ",
                     tensors[0].scalar_type());
  }
  const ReduceOp op = reduce_op(opts.reduceOp, call);
  Staging s;
  const Elements e = reducible(s.packed_in_out(tensors), call, opts.reduceOp);
  return run(OpType::ALLREDUCE_COALESCED, call, opts.timeout, std::move(s), tensors,
             [&](Communicator& c) {
               return Works{c.all_reduce_async(e.data, e.data, e.count, e.dtype, op)};
             });
}

WorkPtr ProcessGroupChorus::reduce(std::vector<at::Tensor>& tensors,
                                   const ::c10d::ReduceOptions& opts) {
  const std::string call = "reduce";
  const at::Tensor& t = single(tensors, call, "tensor");
  CHORUS_ARG_CHECK(opts.rootTensor == 0, call, ": rootTensor ", opts.rootTensor, " (one tensor)");
  const int root = check_root(opts.rootRank, size_, call);
  const ReduceOp op = reduce_op(opts.reduceOp, call);
  Staging s;
  const Elements e = reducible(s.in_out(t), call, opts.reduceOp);
  void* recv = rank_ == root ? e.data : nullptr;
  return run(OpType::REDUCE, call, opts.timeout, std::move(s), {t}, [&](Communicator& c) {
    return Works{c.reduce_async(e.data, recv, e.count, e.dtype, op, root)};
  });
}

WorkPtr ProcessGroupChorus::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                      std::vector<at::Tensor>& inputs,
                                      const ::c10d::AllgatherOptions& opts) {
  const std::string call = "allgather";
  const at::Tensor& in = single(inputs, call, "input");
  CHORUS_ARG_CHECK(outputs.size() == 1, call, ": expected one output list, got ", outputs.size());
  std::vector<at::Tensor>& outs = outputs[0];
  CHORUS_ARG_CHECK(outs.size() == static_cast<size_t>(size_), call, ": the output list has ",
                   outs.size(), " tensors for ", size_, " ranks");
  for (size_t i = 0; i < outs.size(); ++i)
    check_like(outs[i], in.scalar_type(), in.numel(), call, "output " + std::to_string(i));
  Staging s;
  const Elements src = movable(s.input(in));
  const Elements dst = movable(s.packed_output(outs));
  return run(OpType::ALLGATHER, call, opts.timeout, std::move(s), outs, [&](Communicator& c) {
    return Works{c.all_gather_async(src.data, dst.data, src.count, src.dtype)};
  });
}

WorkPtr ProcessGroupChorus::_allgather_base(at::Tensor& output, at::Tensor& input,
                                            const ::c10d::AllgatherOptions& opts) {
  const std::string call = "_allgather_base";
  check_tensor(input, call, "input");
  check_like(output, input.scalar_type(), input.numel() * size_, call, "output");
  Staging s;
  const Elements src = movable(s.input(input));
  const Elements dst = movable(s.output(output));
  return run(OpType::_ALLGATHER_BASE, call, opts.timeout, std::move(s), {output},
             [&](Communicator& c) {
               return Works{c.all_gather_async(src.data, dst.data, src.count, src.dtype)};
             });
}

// One all_gather over a flat buffer: this rank's inputs packed one after the other are its
// block, and rank r's block unpacks into output list r.
WorkPtr ProcessGroupChorus::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                std::vector<at::Tensor>& inputs,
                                                const ::c10d::AllgatherOptions& opts) {
  const std::string call = "allgather_coalesced";
  CHORUS_ARG_CHECK(!inputs.empty(), call, ": no input tensors");
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_tensor(inputs[i], call, "input");
    CHORUS_ARG_CHECK(inputs[i].scalar_type() == inputs[0].scalar_type(), call, ": input ", i,
                     " has dtype ", inputs[i].scalar_type(), " but input 0 has ",
                     inputs[0].scalar_type());
  }
  CHORUS_ARG_CHECK(outputs.size() == static_cast<size_t>(size_), call, ": ", outputs.size(),
                   " output lists for ", size_, " ranks");
  std::vector<at::Tensor> flat;  // rank-major: what the gathered buffer unpacks into
  for (size_t r = 0; r < outputs.size(); ++r) {
    CHORUS_ARG_CHECK(outputs[r].size() == inputs.size(), call, ": output list ", r, " has ",
                     outputs[r].size(), " tensors for ", inputs.size(), " inputs");
    for (size_t i = 0; i < inputs.size(); ++i) {
      check_like(outputs[r][i], inputs[0].scalar_type(), inputs[i].numel(), call,
                 "output " + std::to_string(r) + "/" + std::to_string(i));
      flat.push_back(outputs[r][i]);
    }
  }
  Staging s;
  const Elements src = movable(s.packed_input(inputs));
  const Elements dst = movable(s.packed_output(flat));
  return run(OpType::ALLGATHER_COALESCED, call, opts.timeout, std::move(s), flat,
             [&](Communicator& c) {
               return Works{c.all_gather_async(src.data, dst.data, src.count, src.dtype)};
             });
}

WorkPtr ProcessGroupChorus::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                   std::vector<at::Tensor>& inputs,
                                   const ::c10d::GatherOptions& opts) {
  const std::string call = "gather";
  const at::Tensor& in = single(inputs, call, "input");
  const int root = check_root(opts.rootRank, size_, call);
  Staging s;
  const Elements src = movable(s.input(in));
  void* recv = nullptr;
  std::vector<at::Tensor> result;
  if (rank_ == root) {
    CHORUS_ARG_CHECK(outputs.size() == 1 && outputs[0].size() == static_cast<size_t>(size_), call,
                     ": the root needs one list of ", size_, " output tensors");
    for (size_t i = 0; i < outputs[0].size(); ++i)
      check_like(outputs[0][i], in.scalar_type(), in.numel(), call, "output " + std::to_string(i));
    recv = s.packed_output(outputs[0]).data_ptr();
    result = outputs[0];
  }
  return run(OpType::GATHER, call, opts.timeout, std::move(s), result, [&](Communicator& c) {
    return Works{c.gather_async(src.data, recv, src.count, src.dtype, root)};
  });
}

WorkPtr ProcessGroupChorus::scatter(std::vector<at::Tensor>& outputs,
                                    std::vector<std::vector<at::Tensor>>& inputs,
                                    const ::c10d::ScatterOptions& opts) {
  const std::string call = "scatter";
  const at::Tensor& out = single(outputs, call, "output");
  const int root = check_root(opts.rootRank, size_, call);
  Staging s;
  const void* send = nullptr;
  if (rank_ == root) {
    CHORUS_ARG_CHECK(inputs.size() == 1 && inputs[0].size() == static_cast<size_t>(size_), call,
                     ": the root needs one list of ", size_, " input tensors");
    for (size_t i = 0; i < inputs[0].size(); ++i)
      check_like(inputs[0][i], out.scalar_type(), out.numel(), call, "input " + std::to_string(i));
    send = s.packed_input(inputs[0]).data_ptr();
  }
  const Elements dst = movable(s.output(out));
  return run(OpType::SCATTER, call, opts.timeout, std::move(s), {out}, [&](Communicator& c) {
    return Works{c.scatter_async(send, dst.data, dst.count, dst.dtype, root)};
  });
}

WorkPtr ProcessGroupChorus::reduce_scatter(std::vector<at::Tensor>& outputs,
                                           std::vector<std::vector<at::Tensor>>& inputs,
                                           const ::c10d::ReduceScatterOptions& opts) {
  const std::string call = "reduce_scatter";
  const at::Tensor& out = single(outputs, call, "output");
  CHORUS_ARG_CHECK(inputs.size() == 1 && inputs[0].size() == static_cast<size_t>(size_), call,
                   ": expected one list of ", size_, " input tensors");
  for (size_t i = 0; i < inputs[0].size(); ++i)
    check_like(inputs[0][i], out.scalar_type(), out.numel(), call, "input " + std::to_string(i));
  const ReduceOp op = reduce_op(opts.reduceOp, call);
  Staging s;
  const void* send = s.packed_input(inputs[0]).data_ptr();
  const Elements dst = reducible(s.output(out), call, opts.reduceOp);
  return run(OpType::REDUCE_SCATTER, call, opts.timeout, std::move(s), {out}, [&](Communicator& c) {
    return Works{c.reduce_scatter_async(send, dst.data, dst.count, dst.dtype, op)};
  });
}

WorkPtr ProcessGroupChorus::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                 const ::c10d::ReduceScatterOptions& opts) {
  const std::string call = "_reduce_scatter_base";
  check_tensor(output, call, "output");
  check_like(input, output.scalar_type(), output.numel() * size_, call, "input");
  const ReduceOp op = reduce_op(opts.reduceOp, call);
  Staging s;
  const void* send = s.input(input).data_ptr();
  const Elements dst = reducible(s.output(output), call, opts.reduceOp);
  return run(OpType::_REDUCE_SCATTER_BASE, call, opts.timeout, std::move(s), {output},
             [&](Communicator& c) {
               return Works{c.reduce_scatter_async(send, dst.data, dst.count, dst.dtype, op)};
             });
}

WorkPtr ProcessGroupChorus::alltoall_base(at::Tensor& output, at::Tensor& input,
                                          std::vector<int64_t>& output_split_sizes,
                                          std::vector<int64_t>& input_split_sizes,
                                          const ::c10d::AllToAllOptions& opts) {
  const std::string call = "alltoall_base";
  check_tensor(input, call, "input");
  check_tensor(output, call, "output");
  CHORUS_ARG_CHECK(output.scalar_type() == input.scalar_type(), call, ": output has dtype ",
                   output.scalar_type(), " but input has ", input.scalar_type());
  Staging s;
  const at::Tensor src = s.input(input);
  const at::Tensor dst = s.output(output);
  if (output_split_sizes.empty() && input_split_sizes.empty()) {
    CHORUS_ARG_CHECK(input.numel() % size_ == 0 && output.numel() == input.numel(), call,
                     ": equal splits need input and output of one size divisible by ", size_,
                     " (input ", input.numel(), ", output ", output.numel(), " elements)");
    const Elements in = movable(src), out = movable(dst);
    return run(OpType::ALLTOALL_BASE, call, opts.timeout, std::move(s), {output},
               [&](Communicator& c) {
                 return Works{c.all_to_all_async(in.data, out.data, in.count / size_, in.dtype)};
               });
  }
  const std::vector<size_t> send_counts =
      split_counts(input, input_split_sizes, size_, call, "input");
  const std::vector<size_t> recv_counts =
      split_counts(output, output_split_sizes, size_, call, "output");
  const Elements in = movable(src), out = movable(dst);
  // movable() may count bytes (types chorus lacks): scale the element counts alike.
  const size_t scale = input.numel() == 0 ? 1 : in.count / static_cast<size_t>(input.numel());
  const size_t es = dtype_size(in.dtype);
  std::vector<const std::byte*> send(static_cast<size_t>(size_));
  std::vector<std::byte*> recv(static_cast<size_t>(size_));
  std::vector<size_t> sc(send.size()), rc(recv.size());
  size_t so = 0, ro = 0;
  for (size_t i = 0; i < send.size(); ++i) {
    sc[i] = send_counts[i] * scale;
    rc[i] = recv_counts[i] * scale;
    send[i] = static_cast<const std::byte*>(in.data) + so * es;
    recv[i] = static_cast<std::byte*>(out.data) + ro * es;
    if (static_cast<int>(i) == rank_) {
      CHORUS_ARG_CHECK(sc[i] == rc[i], call, ": this rank sends itself ", send_counts[i],
                       " elements but expects ", recv_counts[i]);
      s.local_copy(dst.view({-1}).narrow(0, static_cast<int64_t>(ro / scale),
                                         static_cast<int64_t>(recv_counts[i])),
                   src.view({-1}).narrow(0, static_cast<int64_t>(so / scale),
                                         static_cast<int64_t>(send_counts[i])));
    }
    so += sc[i];
    ro += rc[i];
  }
  return run(OpType::ALLTOALL_BASE, call, opts.timeout, std::move(s), {output},
             [&](Communicator& c) { return exchange_blocks(c, send, sc, recv, rc, in.dtype); });
}

WorkPtr ProcessGroupChorus::alltoall(std::vector<at::Tensor>& outputs,
                                     std::vector<at::Tensor>& inputs,
                                     const ::c10d::AllToAllOptions& opts) {
  const std::string call = "alltoall";
  const auto n = static_cast<size_t>(size_);
  CHORUS_ARG_CHECK(inputs.size() == n && outputs.size() == n, call, ": expected ", n,
                   " input and output tensors, got ", inputs.size(), " and ", outputs.size());
  Staging s;
  std::vector<const std::byte*> send(n);
  std::vector<std::byte*> recv(n);
  std::vector<size_t> sc(n), rc(n);
  DataType dtype = DataType::kU8;
  for (size_t i = 0; i < n; ++i) {
    check_tensor(inputs[i], call, "input");
    check_tensor(outputs[i], call, "output");
    CHORUS_ARG_CHECK(inputs[i].scalar_type() == inputs[0].scalar_type() &&
                         outputs[i].scalar_type() == inputs[0].scalar_type(),
                     call, ": every input and output tensor must have dtype ",
                     inputs[0].scalar_type());
    const at::Tensor src = s.input(inputs[i]);
    const at::Tensor dst = s.output(outputs[i]);
    const Elements in = movable(src), out = movable(dst);
    dtype = in.dtype;
    send[i] = static_cast<const std::byte*>(in.data);
    recv[i] = static_cast<std::byte*>(out.data);
    sc[i] = in.count;
    rc[i] = out.count;
    if (static_cast<int>(i) == rank_) {
      CHORUS_ARG_CHECK(sc[i] == rc[i], call, ": this rank sends itself ", inputs[i].numel(),
                       " elements but expects ", outputs[i].numel());
      s.local_copy(dst, src);
    }
  }
  return run(OpType::ALLTOALL, call, opts.timeout, std::move(s), outputs,
             [&](Communicator& c) { return exchange_blocks(c, send, sc, recv, rc, dtype); });
}

WorkPtr ProcessGroupChorus::barrier(const ::c10d::BarrierOptions& opts) {
  return run(OpType::BARRIER, "barrier", opts.timeout, Staging(), {},
             [](Communicator& c) { return Works{c.barrier_async()}; });
}

}  // namespace chorus::torch
