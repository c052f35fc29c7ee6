// Internal: the collectives of the parallel layer on the tensor engine's memory, in the engine's
// order. Every strategy (DDP, ZeRO, tensor and pipeline parallelism, checks) issues its
// collectives on tensors through this one place.
//
// On the CPU the engine's results are in memory when an op returns, and these are the
// Communicator's plain asynchronous calls. A GPU's kernels run later, in issue order, on the
// engine's compute stream (chorus/tensor/device.h), so a collective on device tensors must start
// after the kernels that wrote its inputs and end before the kernels that read its outputs. It
// uses the Communicator's stream-ordered forms, in one of two orders:
//   kInline   on the compute stream itself: the collective starts after the kernels queued so
//             far, and kernels queued afterwards wait for it on the device (the host does not
//             wait: tensor parallelism's reductions, ZeRO's gathers needed at once).
//   kOverlap  on a communication stream (one per device per process) that first waits, through
//             an event, for the compute stream's work so far: later kernels run beside the
//             collective (backward beside DDP's and ZeRO's bucket reductions, compute beside
//             pipeline transfers). Its results are read only after complete() (a host wait),
//             and its buffers must live until then, as on the CPU.
// complete(work) is what a strategy calls where its results are needed: it waits for the work on
// the CPU and for kOverlap; for kInline on a GPU it returns at once (the device orders it), and a
// failure then breaks the communicator, so that the next collective reports it.
//
// A communicator works with one device (chorus/communicator.h), so a strategy's tensors all live
// on one device: common_device() finds it or refuses a mix, naming two tensors.
#pragma once

#include <memory>
#include <string_view>

#include "chorus/communicator.h"
#include "chorus/tensor/nn.h"
#include "chorus/tensor/tensor.h"

namespace chorus::parallel {

enum class CommOrder { kInline, kOverlap };

// The device every tensor of `tensors` lives on (the CPU for none); InvalidArgument naming `who`
// and two tensors on different devices.
tensor::Device common_device(const tensor::nn::NamedTensors& tensors, std::string_view who);

class TensorComm {
 public:
  TensorComm(Communicator& group, tensor::Device device, CommOrder order);
  ~TensorComm();
  TensorComm(TensorComm&&) noexcept;
  TensorComm& operator=(TensorComm&&) noexcept;

  // The Communicator's calls (its argument rules), ordered as above.
  Work all_reduce_async(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op);
  Work reduce_async(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                    int root);
  Work reduce_scatter_async(const void* send, void* recv, size_t recv_count, DataType dtype,
                            ReduceOp op);
  Work all_gather_async(const void* send, void* recv, size_t send_count, DataType dtype);
  Work broadcast_async(const void* send, void* recv, size_t count, DataType dtype, int root);
  Work all_to_all_async(const void* send, void* recv, size_t count, DataType dtype);
  Work send_async(const void* send, size_t count, DataType dtype, int peer);
  Work recv_async(void* recv, size_t count, DataType dtype, int peer);
  Work send_recv_async(const void* send, size_t send_count, int send_peer, void* recv,
                       size_t recv_count, int recv_peer, DataType dtype);

  // Where the results of `work` (issued by this) are needed: see above.
  void complete(Work& work) const;

  // Blocking forms: on the CPU the Communicator's blocking calls (which run on the calling thread
  // when nothing is queued); on a GPU the call above and complete().
  void all_reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op);
  void all_gather(const void* send, void* recv, size_t send_count, DataType dtype);
  void broadcast(const void* send, void* recv, size_t count, DataType dtype, int root);
  void send(const void* send, size_t count, DataType dtype, int peer);
  void recv(void* recv, size_t count, DataType dtype, int peer);

 private:
  struct Streams;
  bool on_gpu() const { return !device_.is_cpu(); }
  // The stream of the next call: the compute stream (kInline) or the communication stream after
  // it waits for the compute stream (kOverlap). Only on a GPU.
  gpu::Stream next_stream();

  Communicator* group_;
  tensor::Device device_;
  CommOrder order_;
  std::unique_ptr<Streams> streams_;  // GPU only
};

}  // namespace chorus::parallel
