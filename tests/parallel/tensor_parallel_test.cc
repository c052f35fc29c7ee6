// Tensor parallelism: each layer against the full layer, the GPT against the one-process run,
// the communication per block, and the faults and sizes it must refuse.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>

#include "chorus/parallel/mesh.h"
#include "chorus/parallel/tensor_parallel.h"
#include "chorus/tensor/autograd.h"
#include "chorus/tensor/gemm.h"
#include "chorus/tensor/random.h"
#include "multiproc.h"
#include "tensor_compare.h"
#include "training.h"

namespace chorus::testing {
namespace {

using tensor::Tensor;

Tensor random(tensor::Shape shape, uint64_t stream, DataType dt = DataType::kF64) {
  Tensor t = Tensor::empty(std::move(shape), dt);
  tensor::fill_normal_(t, {77, stream}, 0.0, 1.0);
  return t;
}

// Rank r of n's slice along `dim` of `full` (dim 0 or 1), laid out as `parts` blocks side by side
// of which the rank holds the r-th n-th of each.
Tensor slice_of(const Tensor& full, int dim, int parts, int r, int n) {
  const int64_t block = full.size(dim) / parts, local = block / n;
  tensor::Shape shape = full.shape();
  shape[static_cast<size_t>(dim)] = local * parts;
  Tensor out = Tensor::empty(shape, full.dtype());
  for (int p = 0; p < parts; ++p)
    out.narrow(dim, p * local, local).copy_(full.narrow(dim, p * block + r * local, local));
  return out;
}

TEST(TensorParallel, LayersMatchTheFullLayer) {
  for (int n : {2, 3}) {
    run_ranks(n, [n](Communicator& tp) {
      const int r = tp.rank();
      const int64_t in = 6 * n, out = 12 * n;
      const Tensor x = random({3, 2, in}, 1), dy = random({3, 2, out}, 2);
      for (int parts : {1, 3}) {
        // Column-parallel: this rank's columns of the output; the input gradient all-reduced.
        tensor::nn::Linear full(in, out);
        full.init(5);
        full.to(DataType::kF64);
        auto col = parallel::ColumnParallelLinear::slice_of(full, tp, parts);
        Tensor xf = x.clone(), xs = x.clone();
        xf.set_requires_grad(true);
        xs.set_requires_grad(true);
        Tensor yf = full.forward(xf), ys = col->forward(xs);
        EXPECT_LT(max_diff(ys, slice_of(yf.detach().reshape({6, out}), 1, parts, r, n)), 1e-12);
        yf.backward(dy);
        ys.backward(slice_of(dy.reshape({6, out}), 1, parts, r, n).view({3, 2, -1}));
        EXPECT_LT(max_diff(xs.grad(), xf.grad()), 1e-12) << "column dx, parts " << parts;
        EXPECT_LT(max_diff(col->weight.grad(), slice_of(full.weight.grad(), 0, parts, r, n)),
                  1e-12);
        EXPECT_LT(max_diff(col->bias.grad(), slice_of(full.bias.grad(), 0, parts, r, n)), 1e-12);
      }
      {
        // Row-parallel: the input split by features, the full output on every rank.
        tensor::nn::Linear full(in, out);
        full.init(6);
        full.to(DataType::kF64);
        auto row = parallel::RowParallelLinear::slice_of(full, tp);
        const int64_t local = in / n;
        Tensor xf = x.clone(), xs = x.narrow(2, r * local, local).contiguous();
        xf.set_requires_grad(true);
        xs.set_requires_grad(true);
        Tensor yf = full.forward(xf), ys = row->forward(xs);
        EXPECT_LT(max_diff(ys, yf), 1e-12);
        yf.backward(dy);
        ys.backward(dy);
        EXPECT_LT(max_diff(xs.grad(), xf.grad().narrow(2, r * local, local)), 1e-12);
        EXPECT_LT(max_diff(row->weight.grad(), full.weight.grad().narrow(1, r * local, local)),
                  1e-12);
        EXPECT_LT(max_diff(row->bias.grad(), full.bias.grad()), 1e-12);
      }
      {
        // Vocabulary-parallel embedding and tied loss, with a vocabulary tp does not divide.
        const int64_t V = 4 * n + 1, C = 5;
        tensor::nn::Embedding full(V, C);
        full.init(7);
        full.to(DataType::kF64);
        auto emb = parallel::VocabParallelEmbedding::slice_of(full, tp);
        std::vector<int64_t> ids{0, V - 1, 3, 1, V - 2, 2};
        const Tensor idx = Tensor::from_vector(std::span<const int64_t>(ids), {2, 3});
        EXPECT_LT(max_diff(emb->forward(idx), full.forward(idx)), 1e-12);
        const Tensor h = random({6, C}, 3);
        Tensor hf = h.clone(), hs = h.clone();
        hf.set_requires_grad(true);
        hs.set_requires_grad(true);
        Tensor lf = full.tied_loss(full.tied_logits(hf), idx.reshape({6}));
        Tensor ls = emb->tied_loss(emb->tied_logits(hs), idx.reshape({6}));
        EXPECT_NEAR(ls.item(), lf.item(), 1e-12);
        lf.backward();
        ls.backward();
        EXPECT_LT(max_diff(hs.grad(), hf.grad()), 1e-12);
        const int64_t rows = emb->weight.size(0), start = emb->vocab_start();
        const int64_t real = std::max<int64_t>(0, std::min(rows, V - start));
        if (real > 0) {
          EXPECT_LT(max_diff(emb->weight.grad().narrow(0, 0, real),
                             full.weight.grad().narrow(0, start, real)),
                    1e-12);
        }
        if (real < rows) {  // padding rows get no gradient
          EXPECT_EQ(max_diff(emb->weight.grad().narrow(0, real, rows - real),
                             Tensor::zeros({rows - real, C}, DataType::kF64)),
                    0.0);
        }
      }
    });
  }
}

TEST(TensorParallel, InitDrawsEachSliceFromTheFullModel) {
  run_ranks(2, [](Communicator& tp) {
    const tensor::nn::GPTConfig cfg{
        .vocab = 63, .context = 8, .layers = 2, .heads = 2, .width = 16};
    tensor::nn::GPT full(cfg), sliced(cfg);
    full.init(9);
    parallel::tensor_parallel(sliced, tp);
    sliced.init(9);  // drawn by full name and element index, slice by slice
    const auto gathered = parallel::gather_tensor_parallel(sliced, tp);
    const auto ref = full.named_parameters();
    ASSERT_EQ(gathered.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_EQ(gathered[i].first, ref[i].first);
      EXPECT_EQ(gathered[i].second.shape(), ref[i].second.shape()) << ref[i].first;
      EXPECT_EQ(max_diff(gathered[i].second, ref[i].second), 0.0) << ref[i].first;
    }
  });
}

void expect_close_to_reference(int world, const TrainSpec& spec, const Scheme& scheme,
                               double tolerance, RunOptions options = {}) {
  tensor::set_num_threads(1);
  tensor::pin_gemm_choices();
  const TrainResult ref = reference_run(spec, world / scheme.tp);
  options.env["CHORUS_TENSOR_THREADS"] = "1";
  run_ranks(
      world,
      [&](Communicator& w) {
        const TrainResult got = parallel_run(w, spec, scheme);
        std::string where;
        const double d = max_relative_difference(got, ref, &where);
        EXPECT_LE(d, tolerance) << scheme.name() << " on " << world << " ranks: " << where;
      },
      options);
}

TEST(TensorParallel, GptMatchesOneProcessFor20Steps) {
  TrainSpec spec;
  spec.model = {.vocab = 62, .context = 8, .layers = 2, .heads = 4, .width = 16};  // 62 % 4 != 0
  spec.steps = 20;
  for (int tp : {2, 4}) expect_close_to_reference(tp, spec, Scheme{.tp = tp}, 1e-5);
}

TEST(TensorParallel, WithDataParallelAndZero) {
  TrainSpec spec;
  spec.model = {.vocab = 64, .context = 8, .layers = 2, .heads = 2, .width = 16};
  spec.steps = 10;
  spec.accumulation = 2;
  expect_close_to_reference(4, spec, Scheme{.zero_stage = 0, .tp = 2}, 1e-5);
  expect_close_to_reference(4, spec, Scheme{.zero_stage = 1, .tp = 2}, 1e-5);
}

TEST(TensorParallel, TheCheckCatchesAWrongHeadSlice) {
  TrainSpec spec;
  spec.model = {.vocab = 64, .context = 8, .layers = 2, .heads = 2, .width = 16};
  spec.steps = 2;
  tensor::set_num_threads(1);
  tensor::pin_gemm_choices();
  const TrainResult ref = reference_run(spec, 1);
  RunOptions options;
  options.env["CHORUS_PARALLEL_FAULT"] = "tp_head_slice";
  run_ranks(
      2,
      [&](Communicator& w) {
        const TrainResult got = parallel_run(w, spec, Scheme{.tp = 2});
        EXPECT_GT(max_relative_difference(got, ref), 1e-3)
            << "keys of the wrong heads went unnoticed";
      },
      options);
}

int64_t issued(Communicator& c) {
  const std::string json = c.flight_recorder_json();
  std::smatch m;
  EXPECT_TRUE(std::regex_search(json, m, std::regex("\"last_issued_seq\": (-?[0-9]+)")));
  return std::stoll(m[1].str());
}

TEST(TensorParallel, TwoAllReducesPerBlockEachWay) {
  run_ranks(2, [](Communicator& tp) {
    for (int64_t layers : {1, 3}) {
      tensor::nn::GPT model({.vocab = 64, .context = 8, .layers = layers, .heads = 2, .width = 16});
      model.init(1);
      parallel::tensor_parallel(model, tp);
      const auto [x, y] = micro_batch(TrainSpec{}, 0, 0, 0);
      const int64_t before = issued(tp);
      Tensor loss = model.loss(x, y);
      const int64_t forward = issued(tp) - before;
      loss.backward();
      const int64_t backward = issued(tp) - before - forward;
      // Forward: 2 per block, the embedding's g, the loss's max and sum; backward: 2 per block
      // (the f before each column-parallel projection) and the f before the lm_head.
      EXPECT_EQ(forward, 2 * layers + 3) << layers << " layers";
      EXPECT_EQ(backward, 2 * layers + 1) << layers << " layers";
    }
  });
}

TEST(TensorParallel, RefusesHeadsThatDoNotDivide) {
  run_ranks(2, [](Communicator& tp) {
    tensor::nn::GPT model({.vocab = 64, .context = 8, .layers = 1, .heads = 3, .width = 12});
    try {
      parallel::tensor_parallel(model, tp);
      ADD_FAILURE() << "3 heads split over 2 ranks";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("3 attention heads do not divide over tp=2"),
                std::string::npos)
          << e.what();
    }
  });
}

}  // namespace
}  // namespace chorus::testing
