// The device seam with the CPU as the only device: device names, the refusal of a GPU device this
// process cannot use (with its reason, never a crash, and nothing half moved), per-device memory
// statistics, to(device) and Module::to(device) on the CPU, the mixed-device rule, and the
// default of a backend that lacks a kernel. tests/tensor_gpu/ runs the same seam on a GPU.
#include <gtest/gtest.h>

#include <string>

#include "backend/backend.h"
#include "chorus/tensor/nn.h"
#include "chorus/tensor/ops.h"
#include "chorus/tensor/optim.h"
#include "chorus/tensor/tensor.h"
#include "ops/op_util.h"

namespace chorus::tensor {
namespace {

// The message of the InvalidArgument `fn` throws ("" and a test failure when it throws none).
template <class F>
std::string refusal(F&& fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    return e.message();
  }
  ADD_FAILURE() << "no InvalidArgument";
  return {};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Device, NamesRoundTrip) {
  EXPECT_EQ(Device("cpu"), Device::cpu());
  EXPECT_EQ(Device("cpu:0"), Device::cpu());
  EXPECT_EQ(Device("cuda"), Device::cuda(0));
  EXPECT_EQ(Device("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device("hip:1"), (Device{DeviceType::kHIP, 1}));
  for (const char* name : {"cpu", "cuda:0", "cuda:12", "hip:0"})
    EXPECT_EQ(to_string(Device(name)), name);
  EXPECT_NE(Device::cuda(0), Device::cuda(1));
  EXPECT_NE(Device::cuda(0), Device::cpu());
}

TEST(Device, BadNamesAreRefused) {
  for (const char* name :
       {"", "gpu", "gpu:0", "cuda:", "cuda:-1", "cuda:x", "cuda:1a", "cpu:1", "CUDA:0", "cuda:0:1"})
    EXPECT_THROW(Device{name}, InvalidArgument) << name;
  EXPECT_TRUE(contains(refusal([] { Device("tpu:0"); }), "expected cpu, cuda, cuda:N"));
}

TEST(Device, TheCpuIsAlwaysAvailable) {
  EXPECT_TRUE(device_available(Device::cpu()));
  EXPECT_EQ(device_unavailable_reason(Device::cpu()), "");
  EXPECT_EQ(device_count(DeviceType::kCPU), 1);
  EXPECT_FALSE(device_available(Device(DeviceType::kCPU, 2)));
  EXPECT_FALSE(device_available(Device(DeviceType::kCUDA, -1)));
}

// Without a usable GPU (this build without GPU support, or a CUDA build on a machine without a
// driver or a device), every way onto one is refused with the reason, and nothing moves.
TEST(Device, AGpuThisProcessCannotUseIsRefusedWithTheReason) {
  const Device gpu = Device::cuda(0);
  if (device_available(gpu)) GTEST_SKIP() << "cuda:0 is usable here (tensor_gpu_test covers it)";
  const std::string reason = device_unavailable_reason(gpu);
  EXPECT_TRUE(contains(reason, "cuda:0: ")) << reason;
  EXPECT_EQ(device_count(DeviceType::kCUDA), 0);

  const Tensor x = Tensor::from_vector(std::vector<double>{1, 2, 3}, {3});
  EXPECT_EQ(refusal([&] { (void)x.to("cuda:0"); }), reason);
  EXPECT_EQ(refusal([&] { (void)Tensor::empty({2}, DataType::kF32, gpu); }), reason);
  EXPECT_EQ(refusal([&] { (void)Tensor::zeros({0}, DataType::kF32, gpu); }), reason);
  EXPECT_EQ(refusal([&] { (void)memory_stats(gpu); }), reason);
  EXPECT_EQ(refusal([&] { empty_cache(gpu); }), reason);
  EXPECT_EQ(refusal([&] { (void)backend_for(gpu); }), reason);
  EXPECT_EQ(refusal([&] { (void)compute_stream(gpu); }), reason);
  EXPECT_EQ(refusal([&] { synchronize(gpu); }), reason);
  EXPECT_TRUE(contains(refusal([&] { (void)x.to("cuda:7"); }), "cuda:7: ")) << "index 7";
  EXPECT_TRUE(contains(refusal([&] { (void)x.to("hip:0"); }), "hip:0: "));

  // Module::to is all or nothing: the model stays on the CPU with its values and gradients.
  nn::GPT model({.vocab = 16, .context = 8, .layers = 1, .heads = 2, .width = 8});
  model.init(1);
  const std::vector<double> before = model.wte->weight.to_vector();
  Tensor& w = model.wte->weight;
  w.set_grad(Tensor::ones(w.shape()));
  EXPECT_EQ(refusal([&] { model.to(gpu); }), reason);
  for (const auto& [name, p] : model.named_parameters()) EXPECT_TRUE(p.device().is_cpu()) << name;
  EXPECT_EQ(model.wte->weight.to_vector(), before);
  EXPECT_TRUE(model.wte->weight.grad().defined());
}

TEST(Device, TheCpusStreamIsTheDefaultOne) {
  EXPECT_EQ(compute_stream(Device::cpu()).native, nullptr);
  synchronize(Device::cpu());  // nothing to wait for
}

TEST(Device, ToTheDeviceATensorIsOnIsItself) {
  Tensor x = Tensor::from_vector(std::vector<double>{1, 2, 3}, {3});
  EXPECT_EQ(x.to(Device::cpu()).impl(), x.impl());
  EXPECT_EQ(x.to("cpu").impl(), x.impl());
  EXPECT_TRUE(x.to("cpu").device().is_cpu());
}

TEST(Device, ModuleToTheCpuKeepsEverything) {
  nn::GPT model({.vocab = 16, .context = 8, .layers = 1, .heads = 2, .width = 8});
  model.init(3);
  Tensor& w = model.wte->weight;
  const auto impl = w.impl();
  const auto storage = w.storage();
  w.set_grad(Tensor::ones(w.shape()));
  model.to(Device::cpu());
  EXPECT_EQ(w.impl(), impl);
  EXPECT_EQ(w.storage(), storage);  // nothing copied
  EXPECT_TRUE(w.grad().defined());
}

TEST(Device, MemoryStatsArePerDevice) {
  EXPECT_EQ(memory_stats().current_bytes, memory_stats(Device::cpu()).current_bytes);
  const int64_t before = memory_stats(Device::cpu()).current_bytes;
  {
    const Tensor t = Tensor::empty({1000}, DataType::kF64, Device::cpu());
    EXPECT_EQ(memory_stats(Device::cpu()).current_bytes, before + 8000);
    reset_peak_memory(Device::cpu());
    EXPECT_EQ(memory_stats(Device::cpu()).peak_bytes, before + 8000);
  }
  EXPECT_EQ(memory_stats(Device::cpu()).current_bytes, before);
  EXPECT_EQ(memory_stats(Device::cpu()).peak_bytes, before + 8000);
}

// The rule every op applies to its operands; with the CPU as the only device, checked on the
// placements themselves (tensor_gpu_test runs real ops on cpu + cuda operands).
TEST(Device, MixedDevicesAreRefusedNamingTheOpAndBothDevices) {
  const Placement same[] = {{"input", Device::cpu()}, {"weight", Device::cpu()}};
  EXPECT_EQ(one_device("linear", same), Device::cpu());
  EXPECT_EQ(one_device("linear", {}), Device::cpu());
  const Placement gpus[] = {{"input", Device::cuda(0)}, {"weight", Device::cuda(0)}};
  EXPECT_EQ(one_device("linear", gpus), Device::cuda(0));

  const Placement mixed[] = {
      {"input", Device::cpu()}, {"weight", Device::cpu()}, {"bias", Device::cuda(1)}};
  const std::string msg = refusal([&] { one_device("linear", mixed); });
  EXPECT_TRUE(contains(msg, "linear: input is on cpu but bias is on cuda:1")) << msg;
  const Placement two_gpus[] = {{"a", Device::cuda(0)}, {"b", Device::cuda(1)}};
  EXPECT_TRUE(contains(refusal([&] { one_device("matmul", two_gpus); }),
                       "matmul: a is on cuda:0 but b is on cuda:1"));

  // Undefined operands (a linear without bias) take no part.
  const Tensor x = Tensor::zeros({2, 3}), w = Tensor::zeros({4, 3});
  EXPECT_EQ(same_device("linear", {{x, "input"}, {w, "weight"}, {Tensor(), "bias"}}),
            Device::cpu());
}

// A backend that does not override a kernel refuses it, naming the kernel and the device, instead
// of computing anything: how a device's backend grows kernel by kernel.
class MemoryOnlyBackend final : public Backend {
 public:
  MemoryOnlyBackend() : Backend(Device::cuda(5)) {}
  void* allocate(size_t) override { return nullptr; }
  void deallocate(void*, size_t) noexcept override {}
  MemoryStats memory_stats() override { return {}; }
  void empty_cache() override {}
  void reset_peak_memory() override {}
};

TEST(Device, AKernelABackendLacksIsRefusedNamingItAndTheDevice) {
  MemoryOnlyBackend backend;
  const Tensor t = Tensor::zeros({4});
  const std::string msg = refusal([&] { backend.gelu_forward(t, t); });
  EXPECT_TRUE(contains(msg, "gelu_forward is not implemented on cuda:5")) << msg;
  EXPECT_TRUE(contains(refusal([&] { backend.gemm({}); }), "gemm is not implemented on cuda:5"));
  EXPECT_TRUE(contains(refusal([&] { backend.adamw({}, {}); }), "adamw"));
  EXPECT_TRUE(contains(refusal([&] { backend.copy_to_host(nullptr, t); }), "copy_to_host"));
  EXPECT_EQ(t.to_vector(), std::vector<double>(4, 0.0));  // nothing was written
}

// Gradient buffers are made where each input lives, and the optimizer's state where each
// parameter lives: on the CPU here, through the same code a GPU takes.
TEST(Device, GradientsAndOptimizerStateLiveWithTheirTensors) {
  nn::Linear layer(3, 2);
  layer.init(5);
  const Tensor x = Tensor::ones({4, 3});
  sum(layer.forward(x)).backward();
  EXPECT_TRUE(layer.weight.grad().device().is_cpu());
  optim::AdamW opt(layer.named_parameters(), {.lr = 0.1});
  for (const auto& [name, t] : opt.state_dict()) EXPECT_TRUE(t.device().is_cpu()) << name;
  opt.step();
  EXPECT_EQ(opt.step_count(), 1);
}

}  // namespace
}  // namespace chorus::tensor
