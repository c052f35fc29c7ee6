// The seams the parallel layer builds on: storage released and gathered again, parameters and
// gradients rebound into flat buffers, module trees walked and edited, forward hooks, backward
// callbacks, the GPT's slices, dtype conversion and the optimizer's gradient gate.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "chorus/tensor/autograd.h"
#include "chorus/tensor/nn.h"
#include "chorus/tensor/optim.h"
#include "chorus/tensor/random.h"
#include "chorus/tensor/storage.h"

namespace chorus::tensor {
namespace {

using nn::GPT;
using nn::GPTConfig;

GPTConfig tiny() { return {.vocab = 64, .context = 8, .layers = 2, .heads = 2, .width = 16}; }

Tensor tokens(int64_t B, int64_t T, int64_t vocab, int64_t salt = 0) {
  std::vector<int64_t> v(static_cast<size_t>(B * T));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>((i * 7 + 3 + salt) % vocab);
  return Tensor::from_vector(std::span<const int64_t>(v), {B, T});
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && a.is_contiguous() &&
         b.is_contiguous() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

TEST(Seams, ReleasedStorageRefusesAccessAndComesBack) {
  Tensor t = Tensor::full({4, 8}, 2.0);
  Tensor row = t.narrow(0, 1, 1);  // a view sharing the storage
  const int64_t before = memory_stats().current_bytes;
  t.storage()->release();
  EXPECT_TRUE(t.storage()->released());
  EXPECT_EQ(memory_stats().current_bytes, before - 4 * 8 * 4);
  try {
    (void)row.data_ptr();
    FAIL() << "a released storage's data was handed out";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("released"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.to_vector(), InvalidArgument);
  t.storage()->reallocate();
  EXPECT_EQ(memory_stats().current_bytes, before);
  t.fill_(5.0);
  EXPECT_EQ(row.to_vector(), std::vector<double>(8, 5.0));  // the old view sees the new bytes
}

TEST(Seams, FreedLargeBuffersAreReusedAndCanBeReturned) {
  empty_cache();
  const size_t big = size_t{3} << 20;  // large enough to be cached
  void* first = nullptr;
  {
    Storage s(big, Device::cpu());
    first = s.data();
    std::memset(s.data(), 1, big);
    EXPECT_EQ(memory_stats().cached_bytes, 0);
  }
  // Freed: held for the next buffer of its size, not counted as live.
  EXPECT_EQ(memory_stats().cached_bytes, static_cast<int64_t>(big));
  {
    Storage again(big, Device::cpu());
    EXPECT_EQ(again.data(), first);
    EXPECT_EQ(memory_stats().cached_bytes, 0);
    // Released and reallocated (ZeRO-3's gather) goes through the cache too.
    again.release();
    EXPECT_EQ(memory_stats().cached_bytes, static_cast<int64_t>(big));
    again.reallocate();
    EXPECT_EQ(again.data(), first);
  }
  // A size of the same quarter octave (3 MiB = 1.5 x 2^21) takes the same block, as a mixture's
  // rows per expert drift from step to step; counted by its class.
  {
    Storage near(big - 4096, Device::cpu());
    EXPECT_EQ(near.data(), first);
    EXPECT_EQ(memory_stats().cached_bytes, 0);
  }
  EXPECT_EQ(memory_stats().cached_bytes, static_cast<int64_t>(big));
  // The next class (3.5 MiB) is not served from it; small buffers are not cached.
  {
    Storage other(big + 64, Device::cpu());
    EXPECT_NE(other.data(), first);
  }
  { Storage small(1024, Device::cpu()); }
  EXPECT_EQ(memory_stats().cached_bytes, static_cast<int64_t>(big + (size_t{7} << 19)));
  empty_cache();
  EXPECT_EQ(memory_stats().cached_bytes, 0);
}

TEST(Seams, ParametersBecomeViewsIntoAFlatBuffer) {
  nn::Linear lin(3, 2);
  lin.init(1);
  const std::vector<double> w = lin.weight.to_vector(), b = lin.bias.to_vector();
  Tensor flat = Tensor::zeros({8});
  lin.weight.set_data(flat.narrow(0, 0, 6).view({2, 3}));
  lin.bias.set_data(flat.narrow(0, 6, 2));
  EXPECT_EQ(lin.weight.storage(), flat.storage());
  EXPECT_EQ(lin.weight.to_vector(), std::vector<double>(6, 0.0));  // rebinding copies nothing
  lin.weight.copy_(Tensor::from_vector(std::span<const double>(w), {2, 3}));
  lin.bias.copy_(Tensor::from_vector(std::span<const double>(b), {2}));
  std::vector<double> expect = w;
  expect.insert(expect.end(), b.begin(), b.end());
  EXPECT_EQ(flat.to_vector(), expect);
  // The module computes with the flat buffer's values, and autograd still treats them as leaves.
  Tensor x = Tensor::full({1, 3}, 1.0);
  sum(lin.forward(x)).backward();
  EXPECT_TRUE(lin.weight.grad().defined());
  EXPECT_TRUE(lin.weight.requires_grad());
  EXPECT_THROW(lin.weight.set_data(flat.narrow(0, 0, 6)), InvalidArgument);  // shape [6]
}

TEST(Seams, BoundGradientsAccumulateInPlaceAndZeroInPlace) {
  nn::Linear lin(3, 2);
  lin.init(2);
  Tensor bucket = Tensor::zeros({8});
  lin.weight.bind_grad(bucket.narrow(0, 0, 6).view({2, 3}));
  lin.bias.bind_grad(bucket.narrow(0, 6, 2));
  EXPECT_TRUE(lin.weight.grad_bound());
  Tensor x = Tensor::from_vector(std::vector<double>{1, 2, 3}, {1, 3});
  sum(lin.forward(x)).backward();
  // d(sum)/dW[o, i] = x[i]; d/db = 1: the gradients landed in the bucket.
  EXPECT_EQ(bucket.to_vector(), (std::vector<double>{1, 2, 3, 1, 2, 3, 1, 1}));
  sum(lin.forward(x)).backward();
  EXPECT_EQ(bucket.to_vector(), (std::vector<double>{2, 4, 6, 2, 4, 6, 2, 2}));
  const void* where = lin.weight.grad().data_ptr();
  lin.zero_grad();
  EXPECT_EQ(bucket.to_vector(), std::vector<double>(8, 0.0));
  EXPECT_EQ(lin.weight.grad().data_ptr(), where);  // still bound to the bucket
  lin.weight.set_grad({});                         // unbinds
  EXPECT_FALSE(lin.weight.grad_bound());
  EXPECT_THROW(lin.bias.bind_grad(Tensor::zeros({3})), InvalidArgument);
  EXPECT_THROW(lin.bias.bind_grad(Tensor::zeros({2}, DataType::kF64)), InvalidArgument);
}

TEST(Seams, NamedModulesWalkTheTreeInParameterOrder) {
  GPT model(tiny());
  const auto mods = model.named_modules();
  std::vector<std::string> names;
  for (const auto& [n, m] : mods) names.push_back(n);
  ASSERT_GE(names.size(), 5u);
  EXPECT_EQ(names[0], "");
  EXPECT_EQ(names[1], "wte");
  EXPECT_EQ(names[2], "wpe");
  EXPECT_EQ(names[3], "h.0");
  EXPECT_EQ(names[4], "h.0.ln_1");
  EXPECT_EQ(names.back(), "ln_f");
  // 1 root, wte, wpe, 2 x (block, ln_1, attn, c_attn, c_proj, ln_2, mlp, c_fc, c_proj), ln_f
  EXPECT_EQ(names.size(), 4u + 2u * 9u + 0u);
  EXPECT_EQ(&model.module_at("h.1.mlp"), model.h[1]->mlp.get());
  EXPECT_THROW(model.module_at("h.2"), InvalidArgument);
}

// A Linear whose output is doubled: stands in for a tensor-parallel replacement.
class DoublingLinear : public nn::Linear {
 public:
  using Linear::Linear;
  Tensor forward(const Tensor& x) const override {
    return hooked([&] { return scale(linear(x, weight, bias), 2.0); });
  }
};

TEST(Seams, ALayerCanBeReplacedByASubclass) {
  GPT model(tiny());
  model.init(3);
  const Tensor idx = tokens(2, 8, 64);
  const Tensor before = model.forward(idx);
  auto repl = std::make_shared<DoublingLinear>(16, 64);
  repl->weight.copy_(model.h[0]->mlp->c_fc->weight);
  repl->bias.copy_(model.h[0]->mlp->c_fc->bias);
  model.replace_module("h.0.mlp.c_fc", repl);
  EXPECT_EQ(model.h[0]->mlp->c_fc.get(), repl.get());  // the member follows
  EXPECT_EQ(&model.module_at("h.0.mlp.c_fc"), repl.get());
  bool found = false;
  for (auto& [n, t] : model.named_parameters())
    if (n == "h.0.mlp.c_fc.weight") found = t.storage() == repl->weight.storage();
  EXPECT_TRUE(found);
  const Tensor after = model.forward(idx);
  EXPECT_FALSE(same_bits(before, after));  // the replacement runs
  // Replacing back restores the old output bit for bit.
  auto plain = std::make_shared<nn::Linear>(16, 64);
  plain->weight.copy_(repl->weight);
  plain->bias.copy_(repl->bias);
  model.replace_module("h.0.mlp.c_fc", plain);
  EXPECT_TRUE(same_bits(before, model.forward(idx)));
  try {
    model.replace_module("h.0.mlp", std::make_shared<nn::Linear>(1, 1));
    FAIL() << "a Linear replaced an MLP";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("is not a chorus::tensor::nn::MLP"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(model.replace_module("h.0.nothing", plain), InvalidArgument);
}

TEST(Seams, ForwardHooksRunAroundEveryForwardAndCanReplaceTheOutput) {
  GPT model(tiny());
  model.init(4);
  std::vector<std::string> log;
  const int pre = model.h[1]->add_forward_pre_hook([&](const nn::Module& m) {
    EXPECT_EQ(&m, model.h[1].get());
    log.push_back("pre");
  });
  const int post = model.h[1]->add_forward_hook([&](const nn::Module&, Tensor& out) {
    log.push_back("post");
    out = scale(out, 0.0);  // replaces the block's output
  });
  const Tensor idx = tokens(1, 8, 64);
  const Tensor zeroed = model.head(model.blocks(model.embed(idx), 0, 2));
  EXPECT_EQ(log, (std::vector<std::string>{"pre", "post"}));
  // ln_f of zeros is its bias (zeros), so every logit is 0.
  EXPECT_EQ(zeroed.to_vector(), std::vector<double>(static_cast<size_t>(8 * 64), 0.0));
  model.h[1]->remove_hook(pre);
  model.h[1]->remove_hook(post);
  log.clear();
  const Tensor normal = model.forward(idx);
  EXPECT_TRUE(log.empty());
  EXPECT_NE(normal.to_vector(), zeroed.to_vector());
}

TEST(Seams, GptSlicesComposeToTheForward) {
  GPT model(tiny());
  model.init(5);
  const Tensor idx = tokens(2, 8, 64, 1);
  const Tensor whole = model.forward(idx, 3);
  const Tensor x = model.embed(idx);
  const Tensor staged = model.head(model.blocks(model.blocks(x, 0, 1, 3), 1, 2, 3));
  EXPECT_TRUE(same_bits(whole, staged));
  EXPECT_THROW(model.blocks(x, 1, 3), InvalidArgument);
  EXPECT_THROW(model.blocks(x, 2, 1), InvalidArgument);
}

TEST(Seams, ModulesConvertToAnotherDtype) {
  GPT ref(tiny()), wide(tiny()), narrow(tiny());
  ref.init(6);
  wide.init(6);
  narrow.init(6);
  const auto names_before = wide.named_parameters();
  wide.to(DataType::kF64);
  narrow.to(DataType::kBF16);
  for (auto& [n, t] : wide.named_parameters()) {
    EXPECT_EQ(t.dtype(), DataType::kF64) << n;
    EXPECT_TRUE(t.requires_grad()) << n;
  }
  // The same tensors, converted in place.
  EXPECT_EQ(wide.named_parameters()[0].second.impl(), names_before[0].second.impl());
  const Tensor idx = tokens(2, 8, 64, 2), targets = tokens(2, 8, 64, 3);
  const double l32 = ref.loss(idx, targets).item();
  Tensor l64 = wide.loss(idx, targets);
  EXPECT_EQ(l64.dtype(), DataType::kF64);
  EXPECT_NEAR(l64.item(), l32, 1e-5 * std::abs(l32));
  // A bf16 model computes in f32 on widened weights; its gradients come back in bf16 and the
  // optimizer steps it through f32 master weights.
  Tensor l16 = narrow.loss(idx, targets);
  EXPECT_EQ(l16.dtype(), DataType::kF32);
  EXPECT_NEAR(l16.item(), l32, 2e-2 * std::abs(l32));
  l16.backward();
  for (auto& [n, t] : narrow.named_parameters()) {
    ASSERT_TRUE(t.grad().defined()) << n;
    EXPECT_EQ(t.grad().dtype(), DataType::kBF16) << n;
  }
  optim::AdamW opt(narrow.named_parameters(), {.lr = 1e-2});
  const std::vector<double> w0 = narrow.h[0]->mlp->c_fc->weight.to_vector();
  opt.step();
  EXPECT_NE(narrow.h[0]->mlp->c_fc->weight.to_vector(), w0);
  EXPECT_THROW(narrow.to(DataType::kI32), InvalidArgument);
}

TEST(Seams, BackwardCallbacksRunOnceAfterEveryHook) {
  GPT model(tiny());
  model.init(7);
  model.set_activation_checkpointing(true);  // nested backwards inside the outer one
  std::vector<std::string> log;
  int hooks = 0;
  for (auto& [n, p] : model.named_parameters())
    p.register_grad_ready_hook([&](Tensor&) {
      if (hooks++ == 0) {
        EXPECT_TRUE(backward_running());
        queue_backward_callback([&] {
          log.push_back("done after " + std::to_string(hooks) + " hooks");
          queue_backward_callback([&] { log.push_back("queued by a callback"); });
        });
      }
    });
  model.loss(tokens(1, 8, 64), tokens(1, 8, 64, 1)).backward();
  const size_t nparams = model.named_parameters().size();
  EXPECT_EQ(log, (std::vector<std::string>{"done after " + std::to_string(nparams) + " hooks",
                                           "queued by a callback"}));
  EXPECT_FALSE(backward_running());
  EXPECT_THROW(queue_backward_callback([] {}), InvalidArgument);
}

TEST(Seams, OptimizerGateOrdersAndWaits) {
  GPT model(tiny());
  model.init(8);
  model.loss(tokens(1, 8, 64), tokens(1, 8, 64, 1)).backward();
  optim::AdamW opt(model.named_parameters(), {.lr = 1e-3});
  const size_t n = opt.params().size();
  std::vector<size_t> order, waited;
  for (size_t i = n; i-- > 0;) order.push_back(i);
  opt.set_grad_gate({order, [&](size_t i) { waited.push_back(i); }});
  opt.step();
  EXPECT_EQ(waited, order);
  waited.clear();
  optim::clip_grad_norm(opt, 1.0);
  EXPECT_EQ(waited, order);
  EXPECT_THROW(opt.set_grad_gate({{n}, nullptr}), InvalidArgument);
}

TEST(Seams, AdamWDecayFilterDecidesByName) {
  Tensor a = Tensor::full({2}, 1.0), b = Tensor::full({2}, 1.0);
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  a.set_grad(Tensor::zeros({2}));
  b.set_grad(Tensor::zeros({2}));
  optim::AdamWOptions o{.lr = 0.1, .weight_decay = 0.5};
  o.decays = [](const std::string& name, const Tensor&) { return name == "a"; };
  optim::AdamW opt({{"a", a}, {"b", b}}, o);
  opt.step();
  EXPECT_NEAR(a.to_vector()[0], 1.0 - 0.1 * 0.5, 1e-7);  // decayed although it is a vector
  EXPECT_EQ(b.to_vector()[0], 1.0);
}

}  // namespace
}  // namespace chorus::tensor

namespace chorus::tensor {
namespace {

TEST(Seams, AdamWUpdatesAnElementAlikeWhereverItSits) {
  // A sharded optimizer updates pieces of a parameter; each element must come out as the whole
  // update leaves it, whatever the piece's length and offset (vector body or epilogue).
  const int64_t n = 203;
  Tensor whole = Tensor::empty({n}), grad = Tensor::empty({n});
  fill_normal_(whole, {1, 2}, 0.0, 1.0);
  fill_normal_(grad, {3, 4}, 0.0, 1e-2);
  Tensor copy = whole.clone();
  whole.set_requires_grad(true);
  whole.set_grad(grad.clone());
  optim::AdamWOptions o{.lr = 3e-3, .weight_decay = 0.1};
  o.decay_matrices_only = false;
  optim::AdamW one(nn::NamedTensors{{"p", whole}}, o);
  // Pieces of lengths 1, 2, ..., cut from the same buffer.
  nn::NamedTensors pieces;
  for (int64_t off = 0, len = 1; off < n; off += len, ++len) {
    const int64_t l = std::min(len, n - off);
    Tensor piece = copy.narrow(0, off, l);
    piece.bind_grad(grad.narrow(0, off, l).clone());
    pieces.emplace_back("p" + std::to_string(off), piece);
  }
  optim::AdamW many(pieces, o);
  for (int step = 0; step < 3; ++step) {
    one.step();
    many.step();
  }
  EXPECT_TRUE(same_bits(whole.detach(), copy));
}

}  // namespace
}  // namespace chorus::tensor
