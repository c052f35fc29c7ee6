#include "common/tensor_comm.h"

#include <map>
#include <mutex>
#include <optional>

#include "chorus/error.h"
#include "chorus/tensor/device.h"

namespace chorus::parallel {

using tensor::Device;

Device common_device(const tensor::nn::NamedTensors& tensors, std::string_view who) {
  if (tensors.empty()) return Device::cpu();
  const Device d = tensors.front().second.device();
  for (const auto& [name, t] : tensors)
    CHORUS_ARG_CHECK(t.device() == d, who, ": '", tensors.front().first, "' is on ",
                     tensor::to_string(d), " but '", name, "' on ", tensor::to_string(t.device()),
                     " (one device per rank: Module::to(device) moves them all)");
  return d;
}

namespace {

// The communication stream of a GPU device, one per process, made on first use and kept until
// the process exits (streams of a device that outlive every communicator cost nothing).
gpu::Stream communication_stream(Device device) {
  static std::mutex mu;
  static auto* streams = new std::map<std::pair<int, int>, gpu::OwnedStream>;
  const std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(static_cast<int>(device.type), device.index);
  auto it = streams->find(key);
  if (it == streams->end()) {
    gpu::DeviceGuard on(device.index);
    it = streams->emplace(key, gpu::OwnedStream(/*non_blocking=*/true)).first;
  }
  return it->second.get();
}

}  // namespace

struct TensorComm::Streams {
  gpu::Stream compute;
  gpu::Stream comm;                        // kOverlap
  std::optional<gpu::Event> compute_done;  // kOverlap
};

TensorComm::TensorComm(Communicator& group, Device device, CommOrder order)
    : group_(&group), device_(device), order_(order) {
  if (device.is_cpu()) return;
  streams_ = std::make_unique<Streams>();
  streams_->compute = tensor::compute_stream(device);  // refuses a device this process lacks
  if (order == CommOrder::kInline) return;
  streams_->comm = communication_stream(device);
  gpu::DeviceGuard on(device.index);
  streams_->compute_done.emplace();
}

TensorComm::~TensorComm() = default;
TensorComm::TensorComm(TensorComm&&) noexcept = default;
TensorComm& TensorComm::operator=(TensorComm&&) noexcept = default;

gpu::Stream TensorComm::next_stream() {
  Streams& s = *streams_;
  if (order_ == CommOrder::kInline) return s.compute;
  gpu::DeviceGuard on(device_.index);
  s.compute_done->record(s.compute);
  gpu::stream_wait(s.comm, *s.compute_done);
  return s.comm;
}

void TensorComm::complete(Work& work) const {
  if (on_gpu() && order_ == CommOrder::kInline) return;
  work.wait();
}

Work TensorComm::all_reduce_async(const void* send, void* recv, size_t count, DataType dtype,
                                  ReduceOp op) {
  if (!on_gpu()) return group_->all_reduce_async(send, recv, count, dtype, op);
  return group_->all_reduce_async(send, recv, count, dtype, op, next_stream());
}

Work TensorComm::reduce_async(const void* send, void* recv, size_t count, DataType dtype,
                              ReduceOp op, int root) {
  if (!on_gpu()) return group_->reduce_async(send, recv, count, dtype, op, root);
  return group_->reduce_async(send, recv, count, dtype, op, root, next_stream());
}

Work TensorComm::reduce_scatter_async(const void* send, void* recv, size_t recv_count,
                                      DataType dtype, ReduceOp op) {
  if (!on_gpu()) return group_->reduce_scatter_async(send, recv, recv_count, dtype, op);
  return group_->reduce_scatter_async(send, recv, recv_count, dtype, op, next_stream());
}

Work TensorComm::all_gather_async(const void* send, void* recv, size_t send_count, DataType dtype) {
  if (!on_gpu()) return group_->all_gather_async(send, recv, send_count, dtype);
  return group_->all_gather_async(send, recv, send_count, dtype, next_stream());
}

Work TensorComm::broadcast_async(const void* send, void* recv, size_t count, DataType dtype,
                                 int root) {
  if (!on_gpu()) return group_->broadcast_async(send, recv, count, dtype, root);
  return group_->broadcast_async(send, recv, count, dtype, root, next_stream());
}

Work TensorComm::all_to_all_async(const void* send, void* recv, size_t count, DataType dtype) {
  if (!on_gpu()) return group_->all_to_all_async(send, recv, count, dtype);
  return group_->all_to_all_async(send, recv, count, dtype, next_stream());
}

Work TensorComm::send_async(const void* send, size_t count, DataType dtype, int peer) {
  if (!on_gpu()) return group_->send_async(send, count, dtype, peer);
  return group_->send_async(send, count, dtype, peer, next_stream());
}

Work TensorComm::recv_async(void* recv, size_t count, DataType dtype, int peer) {
  if (!on_gpu()) return group_->recv_async(recv, count, dtype, peer);
  return group_->recv_async(recv, count, dtype, peer, next_stream());
}

Work TensorComm::send_recv_async(const void* send, size_t send_count, int send_peer, void* recv,
                                 size_t recv_count, int recv_peer, DataType dtype) {
  if (!on_gpu())
    return group_->send_recv_async(send, send_count, send_peer, recv, recv_count, recv_peer, dtype);
  return group_->send_recv_async(send, send_count, send_peer, recv, recv_count, recv_peer, dtype,
                                 next_stream());
}

void TensorComm::all_reduce(const void* send, void* recv, size_t count, DataType dtype,
                            ReduceOp op) {
  if (!on_gpu()) return group_->all_reduce(send, recv, count, dtype, op);
  Work w = all_reduce_async(send, recv, count, dtype, op);
  complete(w);
}

void TensorComm::all_gather(const void* send, void* recv, size_t send_count, DataType dtype) {
  if (!on_gpu()) return group_->all_gather(send, recv, send_count, dtype);
  Work w = all_gather_async(send, recv, send_count, dtype);
  complete(w);
}

void TensorComm::broadcast(const void* send, void* recv, size_t count, DataType dtype, int root) {
  if (!on_gpu()) return group_->broadcast(send, recv, count, dtype, root);
  Work w = broadcast_async(send, recv, count, dtype, root);
  complete(w);
}

void TensorComm::send(const void* send, size_t count, DataType dtype, int peer) {
  if (!on_gpu()) return group_->send(send, count, dtype, peer);
  Work w = send_async(send, count, dtype, peer);
  complete(w);
}

void TensorComm::recv(void* recv, size_t count, DataType dtype, int peer) {
  if (!on_gpu()) {
    group_->recv(recv, count, dtype, peer);
    return;
  }
  Work w = recv_async(recv, count, dtype, peer);
  complete(w);
}

}  // namespace chorus::parallel
