// The device seam on a GPU: tensors onto the device and back bit for bit (every dtype, strided
// and converted on the way), per-device memory statistics, Module::to, ops refusing mixed
// devices; and, where no device can be used, the refusal with its reason.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "chorus/tensor/nn.h"
#include "chorus/tensor/ops.h"
#include "gpu_tensor_test.h"

namespace chorus::tensor {
namespace {

using testing::GpuTensorTest;

std::string refusal_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    return e.message();
  }
  return "(no InvalidArgument)";
}

// A CPU tensor of `shape` with distinct values that every dtype holds exactly (small integers
// and halves), so that a round trip can be compared exactly.
Tensor pattern(const Shape& shape, DataType dtype) {
  std::vector<double> v(static_cast<size_t>(numel_of(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i % 97) * 0.5 - 20;
  if (dtype == DataType::kU8 || dtype == DataType::kI8 || dtype == DataType::kI32 ||
      dtype == DataType::kI64)
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i % 100);
  return Tensor::from_vector(v, shape, dtype);
}

// Runs where no GPU can be used: the CUDA build on a machine without a driver or device, or a
// build without GPU support. The refusal names the device and the reason.
TEST(TensorGpuNoDevice, ToAGpuIsRefusedWithTheReason) {
  const Device gpu = testing::test_device();
  const std::string reason = device_unavailable_reason(gpu);
  if (reason.empty()) GTEST_SKIP() << to_string(gpu) << " is usable here";
  // "cuda:0: no device: ..." (no driver, no device, no GPU support) or, in a HIP build, "cuda:0:
  // this chorus was built for HIP, not for CUDA".
  EXPECT_EQ(reason.rfind(to_string(gpu) + ": ", 0), 0u) << reason;
  const Tensor x = Tensor::ones({3});
  EXPECT_EQ(refusal_of([&] { (void)x.to(gpu); }), reason);
  EXPECT_EQ(refusal_of([&] { (void)Tensor::zeros({3}, DataType::kF32, gpu); }), reason);
  EXPECT_EQ(refusal_of([&] { (void)memory_stats(gpu); }), reason);
  nn::Linear layer(2, 2);
  EXPECT_EQ(refusal_of([&] { layer.to(gpu); }), reason);
  EXPECT_TRUE(layer.weight.device().is_cpu());
  std::printf("refused as it must be: %s\n", reason.c_str());
}

using TensorGpuSeam = GpuTensorTest;

TEST_F(TensorGpuSeam, EveryDtypeRoundTripsBitForBit) {
  for (DataType dt : {DataType::kF32, DataType::kF64, DataType::kBF16, DataType::kF16,
                      DataType::kI8, DataType::kU8, DataType::kI32, DataType::kI64})
    for (const Shape& shape : {Shape{}, Shape{0}, Shape{1}, Shape{7}, Shape{3, 1001}}) {
      const Tensor host = pattern(shape, dt);
      const Tensor dev = host.to(device_);
      EXPECT_EQ(dev.device(), device_);
      EXPECT_EQ(dev.dtype(), dt);
      EXPECT_EQ(dev.shape(), shape);
      EXPECT_EQ(dev.to(Device::cpu()).to_vector(), host.to_vector())
          << to_string(dt) << " " << to_string(shape);
      EXPECT_EQ(dev.to_vector(), host.to_vector());  // to_vector() reads a device tensor too
    }
}

TEST_F(TensorGpuSeam, StridedAndConvertingCopiesAcrossDevices) {
  const Tensor host = pattern({6, 5}, DataType::kF32);
  const Tensor t = host.transpose(0, 1);  // strided source
  const Tensor dev = t.to(device_);
  EXPECT_TRUE(dev.is_contiguous());
  EXPECT_EQ(dev.to_vector(), t.to_vector());
  // copy_ converts on the CPU side: f32 -> bf16 on the device, and back to f64 on the host.
  Tensor dev16 = Tensor::empty({5, 6}, DataType::kBF16, device_);
  dev16.copy_(t);
  Tensor back = Tensor::empty({5, 6}, DataType::kF64);
  back.copy_(dev16);
  EXPECT_EQ(back.to_vector(), t.to(DataType::kBF16).to_vector());
  // Into a strided host view.
  Tensor host_out = Tensor::zeros({6, 5});
  host_out.transpose(0, 1).copy_(dev);
  EXPECT_EQ(host_out.to_vector(), host.to_vector());
}

TEST_F(TensorGpuSeam, MemoryStatsCountTheDevicesBytes) {
  const MemoryStats before = memory_stats(device_);
  const int64_t cpu_before = memory_stats().current_bytes;
  {
    const Tensor t = Tensor::zeros({1 << 20}, DataType::kF32, device_);
    EXPECT_EQ(memory_stats(device_).current_bytes, before.current_bytes + (4 << 20));
    EXPECT_GE(memory_stats(device_).peak_bytes, before.current_bytes + (4 << 20));
    EXPECT_EQ(memory_stats().current_bytes, cpu_before);  // nothing on the host
    EXPECT_EQ(t.to_vector(), std::vector<double>(1 << 20, 0.0));
  }
  EXPECT_EQ(memory_stats(device_).current_bytes, before.current_bytes);
  reset_peak_memory(device_);
  EXPECT_EQ(memory_stats(device_).peak_bytes, before.current_bytes);
}

TEST_F(TensorGpuSeam, ModuleToMovesEveryParameterAndBack) {
  nn::GPT model({.vocab = 32, .context = 8, .layers = 2, .heads = 2, .width = 16});
  model.init(7);
  std::vector<std::vector<double>> before;
  for (const auto& [name, p] : model.named_parameters()) before.push_back(p.to_vector());
  model.to(device_);
  size_t i = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    EXPECT_EQ(p.device(), device_) << name;
    EXPECT_TRUE(p.requires_grad()) << name;
    EXPECT_EQ(p.to_vector(), before[i++]) << name;
  }
  model.to(Device::cpu());
  i = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    EXPECT_TRUE(p.device().is_cpu()) << name;
    EXPECT_EQ(p.to_vector(), before[i++]) << name;
  }
}

TEST_F(TensorGpuSeam, OpsRefuseMixedDevicesNamingBoth) {
  const Tensor a = Tensor::ones({4, 3});
  const Tensor b = Tensor::ones({4, 3}).to(device_);
  const std::string dev = to_string(device_);
  EXPECT_EQ(refusal_of([&] { (void)add(a, b); }),
            "add: first operand is on cpu but second operand is on " + dev +
                " (an op's tensors must be on one device: move them with to())");
  const Tensor w = Tensor::ones({2, 3}).to(device_);
  EXPECT_NE(refusal_of([&] {
              (void)linear(a, w);
            }).find("linear: input is on cpu but weight is on " + dev),
            std::string::npos);
  nn::Linear layer(3, 2);
  layer.to(device_);
  EXPECT_NE(refusal_of([&] { (void)layer.forward(a); }).find("input is on cpu"), std::string::npos);
}

// Work of one's own on another stream, ordered after the engine's with an event on its compute
// stream, sees the engine's results.
TEST_F(TensorGpuSeam, TheComputeStreamOrdersOtherWork) {
  const int64_t n = int64_t{1} << 22;
  const Tensor y = scale(Tensor::ones({n}).to(device_), 3.0);  // queued, not waited for
  const gpu::Stream engine = compute_stream(device_);
  EXPECT_NE(engine.native, nullptr);
  gpu::DeviceGuard on(device_.index);
  gpu::OwnedStream other;
  gpu::Event done;
  done.record(engine);
  gpu::stream_wait(other, done);
  std::vector<float> host(static_cast<size_t>(n));
  gpu::memcpy_async(host.data(), y.data_ptr(), y.nbytes(), other);
  gpu::stream_synchronize(other);
  for (float v : host) ASSERT_EQ(v, 3.0f);
  synchronize(device_);
}

TEST_F(TensorGpuSeam, GradientsFlowBackAcrossTo) {
  Tensor x = pattern({5}, DataType::kF32).set_requires_grad(true);
  const Tensor y = x.to(device_);
  EXPECT_TRUE(y.requires_grad());
  y.backward(Tensor::ones({5}).to(device_));
  ASSERT_TRUE(x.grad().defined());
  EXPECT_TRUE(x.grad().device().is_cpu());
  EXPECT_EQ(x.grad().to_vector(), std::vector<double>(5, 1.0));
}

}  // namespace
}  // namespace chorus::tensor
