// Every op of the GPT, forward and backward, on a CUDA device against the CPU engine on the same
// random inputs; the optimizer pieces (AdamW, gradient norm and clipping, loss scaling); a GPT
// step and ten AdamW steps. Every device allocation is poisoned (0xFF bytes, NaN) while these run,
// so an output element a kernel leaves unwritten fails the comparison.
//
// Tolerances, as max |gpu - cpu| over the tensor's largest |cpu| value (norm-wise relative):
//   f32, element-wise ops and casts          2e-6  (the device's tanh/exp against the CPU's)
//   f32, reductions, GEMMs (K <= 130) and the layers built on them   1e-5
//   f64                                       1e-12
//   autocast bf16 GEMMs                       1e-2
//   AdamW on f32 parameters                   0: the same operations in the same order, no FMA
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "chorus/tensor/amp.h"
#include "chorus/tensor/gemm.h"
#include "chorus/tensor/nn.h"
#include "chorus/tensor/ops.h"
#include "chorus/tensor/optim.h"
#include "chorus/tensor/random.h"
#include "gpu_tensor_test.h"

namespace chorus::tensor {
namespace {

constexpr double kElementwise = 2e-6, kReduction = 1e-5, kF64 = 1e-12, kBf16 = 1e-2;

class TensorGpuOps : public testing::DeviceComparisonTest {
 protected:
  void SetUp() override {
    testing::DeviceComparisonTest::SetUp();
    if (IsSkipped()) return;
    set_poison_allocations(true);
    set_allow_tf32(false);
  }
  void TearDown() override { set_poison_allocations(false); }
};

// What makes the comparisons catch unwritten output: a fresh allocation reads as NaN.
TEST_F(TensorGpuOps, AllocationsArePoisoned) {
  for (DataType dt : {DataType::kF32, DataType::kF64, DataType::kBF16, DataType::kF16})
    for (double v : Tensor::empty({7}, dt, device_).to_vector()) EXPECT_TRUE(std::isnan(v));
}

Tensor random(const Shape& shape, uint64_t stream, DataType dtype = DataType::kF32, double low = -1,
              double high = 1) {
  Tensor t = Tensor::empty(shape, dtype);
  fill_uniform_(t, {1234, stream}, low, high);
  return t;
}

Tensor random_indices(const Shape& shape, int64_t V, uint64_t stream,
                      DataType dtype = DataType::kI64) {
  std::vector<int64_t> v(static_cast<size_t>(numel_of(shape)));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<int64_t>(uniform_at({99, stream}, i) * float(V)) % V;
  return Tensor::from_vector(std::span<const int64_t>(v), shape, dtype);
}

// max |got - want| <= tol * max |want|, and nothing NaN (an unwritten, poisoned element).
void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = got.to_vector(), w = want.to_vector();
  double scale = 0, worst = 0;
  size_t worst_at = 0;
  for (double x : w) scale = std::max(scale, std::abs(x));
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_FALSE(std::isnan(g[i]) && !std::isnan(w[i]))
        << what << ": element " << i << " is NaN (left unwritten?)";
    const double d = std::abs(g[i] - w[i]);
    if (d > worst) {
      worst = d;
      worst_at = i;
    }
  }
  EXPECT_LE(worst, tol * std::max(scale, 1e-30))
      << what << ": element " << worst_at << " gpu " << g[worst_at] << " cpu " << w[worst_at]
      << " (largest |cpu| " << scale << ")";
}

// Runs `op` on the CPU inputs and on copies on the device (float inputs require grad), compares
// the outputs, then back-propagates the same random gradient through both and compares every
// input's gradient.
void check_op(const std::string& name, Device device,
              const std::function<Tensor(const std::vector<Tensor>&)>& op,
              const std::vector<Tensor>& inputs, double tol) {
  std::vector<Tensor> cpu, gpu;
  for (const Tensor& t : inputs) {
    Tensor c = t.clone().detach(), g = t.to(device).detach();
    if (is_floating(t.dtype())) {
      c.set_requires_grad(true);
      g.set_requires_grad(true);
    }
    cpu.push_back(c);
    gpu.push_back(g);
  }
  const Tensor want = op(cpu), got = op(gpu);
  EXPECT_EQ(got.device(), device) << name;
  expect_close(got, want, tol, detail::concat(name, " forward"));
  if (!want.requires_grad()) return;
  const Tensor dy = random(want.shape(), 777, want.dtype());
  want.backward(dy);
  got.backward(dy.to(device));
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!cpu[i].requires_grad()) continue;
    ASSERT_EQ(cpu[i].grad().defined(), gpu[i].grad().defined()) << name << " input " << i;
    if (!cpu[i].grad().defined()) continue;
    EXPECT_EQ(gpu[i].grad().device(), device);
    expect_close(gpu[i].grad(), cpu[i].grad(), tol, detail::concat(name, " gradient of input ", i));
  }
}

using Inputs = std::vector<Tensor>;

TEST_F(TensorGpuOps, ElementWise) {
  for (DataType dt : {DataType::kF32, DataType::kF64}) {
    const double tol = dt == DataType::kF32 ? kElementwise : kF64;
    const std::string t = detail::concat(" ", to_string(dt));
    const Tensor a = random({37, 29}, 1, dt), b = random({37, 29}, 2, dt);
    check_op(
        "add" + t, device_, [](const Inputs& x) { return add(x[0], x[1]); }, {a, b}, tol);
    check_op(
        "sub" + t, device_, [](const Inputs& x) { return sub(x[0], x[1]); }, {a, b}, tol);
    check_op(
        "mul" + t, device_, [](const Inputs& x) { return mul(x[0], x[1]); }, {a, b}, tol);
    check_op(
        "scale" + t, device_, [](const Inputs& x) { return scale(x[0], -0.37); }, {a}, tol);
    check_op(
        "add_bias" + t, device_, [](const Inputs& x) { return add_bias(x[0], x[1]); },
        {random({5, 7, 33}, 3, dt), random({33}, 4, dt)}, tol);
    check_op(
        "gelu" + t, device_, [](const Inputs& x) { return gelu(x[0]); },
        {random({1001}, 5, dt, -4, 4)}, tol);
    // The same tensor twice: its gradient collects both contributions.
    check_op(
        "mul self" + t, device_, [](const Inputs& x) { return mul(x[0], x[0]); }, {a}, tol);
    // The same mask as the CPU's (one Philox draw per element, wherever it runs): exact.
    check_op(
        "dropout" + t, device_,
        [](const Inputs& x) {
          return dropout(x[0], 0.3, {7, 11});
        },
        {random({1001}, 6, dt)}, 0.0);
  }
}

// A mixture of experts' routing ops (rows gathered, added back by index with repeats, scaled per
// row; the router's log-sum-exp), forward and backward, against the CPU.
TEST_F(TensorGpuOps, ExpertRouting) {
  for (DataType dt : {DataType::kF32, DataType::kF64}) {
    const double tol = dt == DataType::kF32 ? kElementwise : kF64;
    const std::string t = detail::concat(" ", to_string(dt));
    const Tensor idx = random_indices({23}, 9, 40);  // repeated rows among 9
    check_op(
        "gather_rows" + t, device_, [](const Inputs& x) { return gather_rows(x[0], x[1]); },
        {random({9, 13}, 41, dt), idx}, tol);
    check_op(
        "index_add_rows" + t, device_,
        [](const Inputs& x) { return index_add_rows(x[0], x[1], x[2]); },
        {random({9, 13}, 42, dt), idx, random({23, 13}, 43, dt)}, tol);
    check_op(
        "scale_rows" + t, device_, [](const Inputs& x) { return scale_rows(x[0], x[1]); },
        {random({23, 13}, 44, dt), random({23}, 45, dt)}, tol);
    check_op(
        "logsumexp" + t, device_, [](const Inputs& x) { return logsumexp(x[0]); },
        {random({31, 7}, 46, dt, -4, 4)}, tol);
  }
}

// SGD with momentum and weight decay over several steps tracks the CPU's.
TEST_F(TensorGpuOps, Sgd) {
  auto make = [&](Device dev) {
    nn::NamedTensors params;
    for (int i = 0; i < 3; ++i) {
      Tensor p = random(i % 2 ? Shape{129} : Shape{17, 31}, 80 + i).to(dev).detach();
      p.set_requires_grad(true);
      p.set_grad(random(p.shape(), 85 + i).to(dev));
      params.emplace_back(detail::concat("p", i), p);
    }
    return params;
  };
  for (const optim::SGDOptions& o :
       {optim::SGDOptions{.lr = 0.1},
        optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01}}) {
    nn::NamedTensors cpu = make(Device::cpu()), gpu = make(device_);
    optim::SGD cpu_opt(cpu, o), gpu_opt(gpu, o);
    for (int step = 0; step < 5; ++step) {
      cpu_opt.step();
      gpu_opt.step();
    }
    for (size_t i = 0; i < cpu.size(); ++i)
      expect_close(gpu[i].second, cpu[i].second, kElementwise,
                   detail::concat("sgd momentum ", o.momentum, " ", cpu[i].first));
  }
}

TEST_F(TensorGpuOps, Reductions) {
  for (DataType dt : {DataType::kF32, DataType::kF64}) {
    const double tol = dt == DataType::kF32 ? kReduction : kF64;
    const std::string t = detail::concat(" ", to_string(dt));
    check_op(
        "sum" + t, device_, [](const Inputs& x) { return sum(x[0]); }, {random({13, 17, 5}, 6, dt)},
        tol);
    check_op(
        "mean" + t, device_, [](const Inputs& x) { return mean(x[0]); }, {random({100003}, 7, dt)},
        tol);
  }
}

TEST_F(TensorGpuOps, ViewsCopiesAndCasts) {
  const Tensor x = random({6, 5, 7}, 8);
  check_op(
      "transpose + contiguous", device_,
      [](const Inputs& v) { return v[0].transpose(0, 2).contiguous(); }, {x}, kElementwise);
  check_op(
      "narrow + select", device_,
      [](const Inputs& v) { return scale(v[0].narrow(1, 1, 3).select(2, 4), 2.0); }, {x},
      kElementwise);
  for (DataType dt : {DataType::kBF16, DataType::kF16, DataType::kF64})
    check_op(
        detail::concat("cast to ", to_string(dt)), device_,
        [dt](const Inputs& v) { return v[0].to(dt).to(DataType::kF32); }, {x}, 0.0);
  // A fill with a value other than 0, strided.
  Tensor t = Tensor::zeros({4, 6}, DataType::kF32, device_);
  t.transpose(0, 1).narrow(0, 1, 2).fill_(2.5);
  Tensor want = Tensor::zeros({4, 6});
  want.transpose(0, 1).narrow(0, 1, 2).fill_(2.5);
  expect_close(t, want, 0.0, "strided fill");
}

TEST_F(TensorGpuOps, MatrixProducts) {
  for (DataType dt : {DataType::kF32, DataType::kF64}) {
    const double tol = dt == DataType::kF32 ? kReduction : kF64;
    const std::string t = detail::concat(" ", to_string(dt));
    check_op(
        "matmul batched" + t, device_, [](const Inputs& x) { return matmul(x[0], x[1]); },
        {random({3, 37, 29}, 9, dt), random({3, 29, 41}, 10, dt)}, tol);
    check_op(
        "matmul" + t, device_, [](const Inputs& x) { return matmul(x[0], x[1]); },
        {random({2, 5, 29}, 11, dt), random({29, 41}, 12, dt)}, tol);
    check_op(
        "linear" + t, device_, [](const Inputs& x) { return linear(x[0], x[1], x[2]); },
        {random({4, 9, 65}, 13, dt), random({33, 65}, 14, dt), random({33}, 15, dt)}, tol);
    check_op(
        "linear without bias" + t, device_, [](const Inputs& x) { return linear(x[0], x[1]); },
        {random({130, 64}, 16, dt), random({48, 64}, 17, dt)}, tol);
    check_op(
        "linear K = 0" + t, device_, [](const Inputs& x) { return linear(x[0], x[1]); },
        {random({3, 0}, 18, dt), random({5, 0}, 19, dt)}, tol);
  }
}

TEST_F(TensorGpuOps, AutocastProducts) {
  for (DataType lowp : {DataType::kBF16, DataType::kF16}) {
    const std::string t = detail::concat(" autocast ", to_string(lowp));
    check_op(
        "linear" + t, device_,
        [lowp](const Inputs& x) {
          AutocastGuard guard(lowp);
          return linear(x[0], x[1], x[2]);
        },
        {random({4, 9, 65}, 20), random({33, 65}, 21), random({33}, 22)}, kBf16);
    check_op(
        "matmul" + t, device_,
        [lowp](const Inputs& x) {
          AutocastGuard guard(lowp);
          return matmul(x[0], x[1]);
        },
        {random({3, 17, 29}, 23), random({3, 29, 11}, 24)}, kBf16);
  }
}

TEST_F(TensorGpuOps, GptLayers) {
  for (DataType dt : {DataType::kF32, DataType::kF64}) {
    const double tol = dt == DataType::kF32 ? kReduction : kF64;
    const std::string t = detail::concat(" ", to_string(dt));
    check_op(
        "layernorm" + t, device_, [](const Inputs& x) { return layernorm(x[0], x[1], x[2]); },
        {random({6, 7, 130}, 30, dt, -3, 5), random({130}, 31, dt), random({130}, 32, dt)}, tol);
    check_op(
        "softmax" + t, device_, [](const Inputs& x) { return softmax(x[0]); },
        {random({9, 300}, 33, dt, -6, 6)}, tol);
    // q, k, v as strided views of one (B, T, NH, HS) tensor each: the GEMMs take their strides.
    check_op(
        "causal_attention" + t, device_,
        [](const Inputs& x) {
          return causal_attention(x[0].transpose(1, 2), x[1].transpose(1, 2), x[2].transpose(1, 2));
        },
        {random({2, 17, 3, 8}, 34, dt), random({2, 17, 3, 8}, 35, dt),
         random({2, 17, 3, 8}, 36, dt)},
        tol);
    check_op(
        "causal_attention dense" + t, device_,
        [](const Inputs& x) { return causal_attention(x[0], x[1], x[2]); },
        {random({2, 3, 17, 8}, 37, dt), random({2, 3, 17, 8}, 38, dt),
         random({2, 3, 17, 8}, 39, dt)},
        tol);
    check_op(
        "causal_attention_qkv" + t, device_,
        [](const Inputs& x) { return causal_attention_qkv(x[0], 3); },
        {random({2, 17, 72}, 40, dt)}, tol);
    for (DataType idt : {DataType::kI64, DataType::kI32}) {
      const std::string i = detail::concat(t, " ", to_string(idt));
      check_op(
          "embedding" + i, device_, [](const Inputs& x) { return embedding(x[0], x[1]); },
          {random_indices({3, 11}, 50, 41, idt), random({50, 24}, 42, dt)}, tol);
      check_op(
          "cross_entropy" + i, device_, [](const Inputs& x) { return cross_entropy(x[0], x[1]); },
          {random({37, 101}, 43, dt, -5, 5), random_indices({37}, 101, 44, idt)}, tol);
    }
    check_op(
        "cross_entropy vocab shard" + t, device_,
        [](const Inputs& x) { return cross_entropy_vocab_parallel(x[0], x[1], 40, {}); },
        {random({37, 50}, 45, dt), random_indices({37}, 101, 46)}, tol);
  }
}

// Causal attention on the shapes that stress the fused kernels' tiles (cuda/flash.h: 32 rows and
// 32 keys a tile): T = 1, T inside one tile, at and around tile edges, many tiles; head sizes 1,
// odd, 64 and 128 (the two register bounds); several heads; strided q/k/v (the transposed views
// and the GPT's qkv layout). Inputs in [-3, 3] make peaked softmaxes, so a row's maximum moves
// between key tiles (the online softmax's rescaling). The long case (on a GPU only) allows 2e-5:
// sums over 1024 keys in f32 on either side.
TEST_F(TensorGpuOps, AttentionShapes) {
  struct Case {
    int64_t B, NH, T, HS;
  };
  for (DataType dt : {DataType::kF32, DataType::kF64}) {
    const double tol = dt == DataType::kF32 ? kReduction : kF64;
    for (const Case c :
         {Case{1, 1, 1, 8}, Case{2, 3, 31, 64}, Case{1, 2, 32, 64}, Case{2, 1, 33, 64},
          Case{1, 2, 70, 5}, Case{1, 1, 97, 1}, Case{2, 2, 40, 128}, Case{1, 1, 65, 100}}) {
      const std::string name = detail::concat("causal_attention ", c.B, "x", c.NH, "x", c.T, "x",
                                              c.HS, " ", to_string(dt));
      check_op(
          name, device_,
          [](const Inputs& x) {
            return causal_attention(x[0].transpose(1, 2), x[1].transpose(1, 2),
                                    x[2].transpose(1, 2));
          },
          {random({c.B, c.T, c.NH, c.HS}, 90, dt, -3, 3),
           random({c.B, c.T, c.NH, c.HS}, 91, dt, -3, 3),
           random({c.B, c.T, c.NH, c.HS}, 92, dt, -3, 3)},
          tol);
    }
    check_op(
        "causal_attention_qkv 2x45x(3x2x64)" + detail::concat(" ", to_string(dt)), device_,
        [](const Inputs& x) { return causal_attention_qkv(x[0], 2); },
        {random({2, 45, 384}, 93, dt, -3, 3)}, tol);
  }
  // Against itself the CPU would only spend seconds here.
  if (device_.type == DeviceType::kCPU) return;
  check_op(
      "causal_attention 1x2x1024x64 f32", device_,
      [](const Inputs& x) { return causal_attention(x[0], x[1], x[2]); },
      {random({1, 2, 1024, 64}, 94, DataType::kF32, -2, 2),
       random({1, 2, 1024, 64}, 95, DataType::kF32, -2, 2),
       random({1, 2, 1024, 64}, 96, DataType::kF32, -2, 2)},
      2e-5);
}

// Where the device has fused attention (the CUDA backend), the op takes it: no (B, NH, T, T)
// buffer during forward; its results track the materialised path's on the same device
// (set_fused_attention(false)), and repeat to the bit (no atomics).
TEST_F(TensorGpuOps, FusedAttention) {
  const int64_t B = 1, NH = 4, T = 1024, HS = 64;
  if (!backend_for(device_).has_fused_attention(DataType::kF32, HS))
    GTEST_SKIP() << to_string(device_) << " has no fused attention";
  std::vector<Tensor> x;
  for (int i = 0; i < 3; ++i) x.push_back(random({B, NH, T, HS}, 100 + i, DataType::kF32, -2, 2));
  const Tensor dy = random({B, NH, T, HS}, 103).to(device_);
  struct Result {
    Tensor out, dq, dk, dv;
  };
  auto run = [&](bool fused) {
    set_fused_attention(fused);
    std::vector<Tensor> in;
    for (const Tensor& t : x) {
      in.push_back(t.to(device_).detach());
      in.back().set_requires_grad(true);
    }
    synchronize(device_);
    reset_peak_memory(device_);
    const int64_t before = memory_stats(device_).current_bytes;
    const Tensor out = causal_attention(in[0], in[1], in[2]);
    synchronize(device_);
    const int64_t forward_peak = memory_stats(device_).peak_bytes - before;
    out.backward(dy);
    set_fused_attention(true);
    return std::make_pair(forward_peak, Result{out, in[0].grad(), in[1].grad(), in[2].grad()});
  };
  const auto [fused_peak, fused] = run(true);
  const auto [again_peak, again] = run(true);
  const auto [plain_peak, plain] = run(false);
  const int64_t weights_bytes = B * NH * T * T * 4;
  EXPECT_LT(fused_peak, weights_bytes / 4) << "the fused forward allocated the weights";
  EXPECT_GE(plain_peak, weights_bytes) << "the materialised forward did not";
  (void)again_peak;
  const std::pair<const char*, Tensor Result::*> parts[] = {
      {"out", &Result::out}, {"dq", &Result::dq}, {"dk", &Result::dk}, {"dv", &Result::dv}};
  for (const auto& [what, part] : parts) {
    EXPECT_TRUE((fused.*part).to_vector() == (again.*part).to_vector()) << what << " repeated";
    expect_close(fused.*part, plain.*part, 2e-5, detail::concat("fused vs materialised ", what));
  }
}

TEST_F(TensorGpuOps, BadIndicesAreRefusedOnTheDeviceToo) {
  const Tensor w = random({10, 4}, 50).to(device_);
  const Tensor idx = Tensor::from_vector(std::vector<int64_t>{3, 10, 2}, {3}).to(device_);
  try {
    (void)embedding(idx, w);
    ADD_FAILURE() << "no InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.message()).find("embedding: index 10 outside [0, 10)"),
              std::string::npos)
        << e.message();
  }
}

// The optimizer's pieces: a fused AdamW over several parameters (with and without weight decay)
// equals the CPU's bit for bit; the gradient norm and clipping; loss scaling's unscale and
// overflow test.
TEST_F(TensorGpuOps, OptimizerPieces) {
  auto make = [&](Device dev) {
    nn::NamedTensors params;
    for (int i = 0; i < 5; ++i) {
      Tensor p = random(i % 2 ? Shape{129} : Shape{17, 31}, 60 + i).to(dev).detach();
      p.set_requires_grad(true);
      p.set_grad(random(p.shape(), 70 + i).to(dev));
      params.emplace_back(detail::concat("p", i), p);
    }
    return params;
  };
  nn::NamedTensors cpu = make(Device::cpu()), gpu = make(device_);
  optim::AdamW cpu_opt(cpu, {.lr = 1e-2, .weight_decay = 0.1});
  optim::AdamW gpu_opt(gpu, {.lr = 1e-2, .weight_decay = 0.1});
  for (int step = 0; step < 10; ++step) {
    cpu_opt.step();
    gpu_opt.step();
  }
  for (size_t i = 0; i < cpu.size(); ++i)
    EXPECT_EQ(gpu[i].second.to_vector(), cpu[i].second.to_vector()) << cpu[i].first;

  std::vector<Tensor> cp, gp;
  for (auto& [n, t] : cpu) cp.push_back(t);
  for (auto& [n, t] : gpu) gp.push_back(t);
  const double cpu_norm = optim::clip_grad_norm(cp, 0.5), gpu_norm = optim::clip_grad_norm(gp, 0.5);
  EXPECT_EQ(gpu_norm, cpu_norm) << "the exact norm has the same bits on every device";
  for (size_t i = 0; i < cp.size(); ++i)
    EXPECT_EQ(gp[i].grad().to_vector(), cp[i].grad().to_vector()) << "clipped " << cpu[i].first;

  GradScaler cpu_scaler, gpu_scaler;
  EXPECT_TRUE(cpu_scaler.step(cpu_opt));
  EXPECT_TRUE(gpu_scaler.step(gpu_opt));
  for (size_t i = 0; i < cp.size(); ++i)
    expect_close(gp[i].grad(), cp[i].grad(), kElementwise, "unscaled gradient");
  gp[2].mutable_grad().narrow(0, 3, 1).fill_(std::numeric_limits<double>::infinity());
  EXPECT_FALSE(gpu_scaler.step(gpu_opt)) << "an inf gradient on the device is an overflow";
}

// The exact gradient norm's passes on the device equal the CPU's bit for bit, for every float
// dtype a gradient may have, at sizes 0, 1, odd and large (many blocks, several passes of the
// fold); a NaN or an infinity makes the largest |g| infinite.
TEST_F(TensorGpuOps, ExactNormEqualsTheCpu) {
  for (DataType dt : {DataType::kF32, DataType::kF64, DataType::kBF16, DataType::kF16}) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1001}, int64_t{(1 << 20) + 3}}) {
      const Tensor g = random({n}, 90 + static_cast<uint64_t>(n), DataType::kF32, -3, 3).to(dt);
      const Tensor d = g.to(device_);
      const std::string what = detail::concat(to_string(dt), " n=", n);
      const float m = optim::grad_max_abs(g);
      EXPECT_EQ(optim::grad_max_abs(d), m) << what;
      optim::SquareUnits cu{}, du{};
      optim::add_squares(g, m, cu);
      optim::add_squares(d, m, du);
      EXPECT_EQ(du, cu) << what;
      EXPECT_EQ(optim::norm_of(du, m), optim::norm_of(cu, m)) << what;
    }
  }
  Tensor bad = random({4097}, 99).to(device_);
  bad.narrow(0, 4000, 1).fill_(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(optim::grad_max_abs(bad), std::numeric_limits<float>::infinity());
}

// A GPT step on the device against the CPU (loss, every parameter's gradient), then ten AdamW
// steps tracking the CPU's losses.
TEST_F(TensorGpuOps, GptTrainingTracksTheCpu) {
  const nn::GPTConfig cfg{.vocab = 64, .context = 16, .layers = 2, .heads = 2, .width = 32};
  nn::GPT cpu_model(cfg), gpu_model(cfg);
  cpu_model.init(5);
  gpu_model.init(5);
  gpu_model.to(device_);
  optim::AdamW cpu_opt(cpu_model.named_parameters(), {.lr = 1e-3, .weight_decay = 0.1});
  optim::AdamW gpu_opt(gpu_model.named_parameters(), {.lr = 1e-3, .weight_decay = 0.1});
  for (int step = 0; step < 10; ++step) {
    const Tensor x = random_indices({4, 16}, 64, 100 + step),
                 y = random_indices({4, 16}, 64, 200 + step);
    cpu_opt.zero_grad();
    gpu_opt.zero_grad();
    const Tensor cpu_loss = cpu_model.loss(x, y),
                 gpu_loss = gpu_model.loss(x.to(device_), y.to(device_));
    cpu_loss.backward();
    gpu_loss.backward();
    EXPECT_NEAR(gpu_loss.item(), cpu_loss.item(), 1e-5 * std::abs(cpu_loss.item()))
        << "step " << step;
    if (step == 0) {
      const nn::NamedTensors cp = cpu_model.named_parameters(), gp = gpu_model.named_parameters();
      for (size_t i = 0; i < cp.size(); ++i)
        expect_close(gp[i].second.grad(), cp[i].second.grad(), 1e-4,
                     detail::concat("gradient of ", cp[i].first));
    }
    cpu_opt.step();
    gpu_opt.step();
  }
}

}  // namespace
}  // namespace chorus::tensor
