// Expert parallelism: the uneven row exchange both ways, an MoE layer over ep ranks against the
// one-process layer on each rank's tokens (outputs, losses, every gradient), and the sizes it
// must refuse.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "chorus/parallel/expert_parallel.h"
#include "chorus/tensor/autograd.h"
#include "chorus/tensor/random.h"
#include "multiproc.h"
#include "tensor_compare.h"

namespace chorus::testing {
namespace {

using tensor::Tensor;

Tensor random(tensor::Shape shape, uint64_t stream) {
  Tensor t = Tensor::empty(std::move(shape), DataType::kF64);
  tensor::fill_normal_(t, {91, stream}, 0.0, 1.0);
  return t;
}

// Rank r's batch for the GPT tests: 2 sequences of 4 tokens of a vocabulary of 16, its own per
// rank, and their targets.
std::pair<Tensor, Tensor> rank_batch(int rank) {
  std::vector<int64_t> ids, tgt;
  for (int i = 0; i < 8; ++i) {
    ids.push_back((i * 3 + rank * 5) % 16);
    tgt.push_back((i * 7 + 1) % 16);
  }
  return {Tensor::from_vector(std::span<const int64_t>(ids), {2, 4}),
          Tensor::from_vector(std::span<const int64_t>(tgt), {2, 4})};
}

// Rank r sends (r + 2 p) % 3 rows to rank p (none for some pairs, itself included), each row
// tagged (source, destination, index); the backward of a loss whose gradient is the received
// rows themselves must hand every rank back exactly what it sent.
TEST(ExpertParallel, ExchangeRowsMovesUnevenCountsBothWays) {
  run_ranks(3, [](Communicator& comm) {
    const int P = 3, me = comm.rank();
    auto count = [](int from, int to) { return static_cast<int64_t>((from + 2 * to) % 3); };
    std::vector<int64_t> send_rows, recv_rows;
    std::vector<double> values;
    for (int p = 0; p < P; ++p) {
      send_rows.push_back(count(me, p));
      recv_rows.push_back(count(p, me));
      for (int64_t i = 0; i < count(me, p); ++i)
        for (int c = 0; c < 2; ++c) values.push_back(100.0 * me + 10.0 * p + double(i) + 0.5 * c);
    }
    Tensor x = Tensor::from_vector(std::span<const double>(values),
                                   {static_cast<int64_t>(values.size() / 2), 2}, DataType::kF64);
    x.set_requires_grad(true);
    const Tensor y = parallel::exchange_rows(x, send_rows, recv_rows, comm);
    std::vector<double> expect;
    for (int s = 0; s < P; ++s)
      for (int64_t i = 0; i < count(s, me); ++i)
        for (int c = 0; c < 2; ++c) expect.push_back(100.0 * s + 10.0 * me + double(i) + 0.5 * c);
    EXPECT_EQ(y.to_vector(), expect) << "rank " << me;
    tensor::sum(tensor::mul(y, y.detach())).backward();
    EXPECT_EQ(x.grad().to_vector(), values) << "rank " << me;
    // Counts that do not add up are refused before anything is sent.
    EXPECT_THROW(parallel::exchange_rows(x.detach(), {9, 9, 9}, recv_rows, comm), InvalidArgument);
  });
}

// Each rank's tokens through the layer over ep ranks and through the whole layer on this rank:
// the same outputs and losses, bit for bit (each row meets the same arithmetic), the same input
// and router gradients, and each expert's gradient the sum over ranks of the one-process
// gradients (to rounding: the sum's grouping differs). A token sent to the wrong rank, or a
// count off by one, changes the outputs.
TEST(ExpertParallel, MatchesTheWholeLayerOnEveryRanksTokens) {
  for (const int ep : {2, 4}) {
    for (const double cf : {0.0, 0.6}) {
      SCOPED_TRACE("ep " + std::to_string(ep) + " capacity " + std::to_string(cf));
      run_ranks(ep, [cf](Communicator& comm) {
        const tensor::nn::GPTConfig cfg{
            .layers = 1, .heads = 1, .width = 4, .experts = 4, .top_k = 2, .capacity_factor = cf};
        tensor::nn::MoE full(cfg);
        full.init(5);
        full.to(DataType::kF64);
        {
          tensor::NoGradGuard ng;
          tensor::fill_normal_(full.router->weight, {5, 7}, 0.0, 1.0);
        }
        parallel::ExpertParallelMoE layer(cfg, full, comm);
        ASSERT_EQ(layer.experts.size(), 4u / comm.size());
        const uint64_t r = static_cast<uint64_t>(comm.rank());
        // Rank 1 has a single token: most experts get nothing from it.
        const int64_t rows = comm.rank() == 1 ? 1 : 7;
        Tensor x = random({rows, 4}, 100 + r), x_ref = x.clone();
        const Tensor w = random({rows, 4}, 200 + r);
        x.set_requires_grad(true);
        x_ref.set_requires_grad(true);
        auto loss_of = [&w](const Tensor& y, const tensor::nn::MoEStats& s) {
          return tensor::add(tensor::sum(tensor::mul(y, w)),
                             tensor::add(s.load_balance, tensor::scale(s.z_loss, 0.1)));
        };
        tensor::nn::MoEStats s, s_ref;
        const Tensor y = layer.forward(x, &s), y_ref = full.forward(x_ref, &s_ref);
        EXPECT_EQ(max_diff(y, y_ref), 0.0);
        EXPECT_EQ(s.load_balance.item(), s_ref.load_balance.item());
        EXPECT_EQ(s.kept, s_ref.kept);
        EXPECT_EQ(s.dropped, s_ref.dropped);
        loss_of(y, s).backward();
        loss_of(y_ref, s_ref).backward();
        EXPECT_LT(max_diff(x.grad(), x_ref.grad()), 1e-13);
        EXPECT_LT(max_diff(layer.router->weight.grad(), full.router->weight.grad()), 1e-13);
        // Each expert's one-process gradients summed over the ranks (undefined: zeros).
        for (int64_t e = 0; e < 4; ++e) {
          const auto ref = full.experts[static_cast<size_t>(e)]->named_parameters();
          const int64_t l = e - layer.first_expert();
          const bool mine = l >= 0 && l < static_cast<int64_t>(layer.experts.size());
          for (size_t i = 0; i < ref.size(); ++i) {
            const Tensor& p = ref[i].second;
            Tensor g = p.grad().defined() ? p.grad().clone() : Tensor::zeros_like(p);
            comm.all_reduce(g.data_ptr(), g.data_ptr(), static_cast<size_t>(g.numel()),
                            DataType::kF64, ReduceOp::kSum);
            if (!mine) continue;
            const Tensor got =
                layer.experts[static_cast<size_t>(l)]->named_parameters()[i].second.grad();
            ASSERT_TRUE(got.defined()) << "expert " << e << " " << ref[i].first;
            EXPECT_LT(max_diff(got, g), 1e-12) << "expert " << e << " " << ref[i].first;
          }
        }
      });
    }
  }
}

TEST(ExpertParallel, RefusesExpertsThatEpDoesNotDivide) {
  run_ranks(3, [](Communicator& comm) {
    tensor::nn::GPT moe_model(
        {.vocab = 8, .context = 4, .layers = 2, .heads = 1, .width = 4, .experts = 4});
    try {
      parallel::expert_parallel(moe_model, comm);
      ADD_FAILURE() << "4 experts over ep=3 accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("4 experts do not divide over ep=3"), std::string::npos)
          << e.what();
    }
    tensor::nn::GPT dense({.vocab = 8, .context = 4, .layers = 1, .heads = 1, .width = 4});
    EXPECT_THROW(parallel::expert_parallel(dense, comm), InvalidArgument);
  });
}

// The GPT with experts over ep ranks: each rank's loss on its own batch is the whole model's.
TEST(ExpertParallel, GptLossIsTheWholeModelsOnEveryRank) {
  run_ranks(2, [](Communicator& comm) {
    const tensor::nn::GPTConfig cfg{.vocab = 16,
                                    .context = 4,
                                    .layers = 2,
                                    .heads = 1,
                                    .width = 8,
                                    .experts = 4,
                                    .top_k = 2,
                                    .moe_every = 2};
    tensor::nn::GPT full(cfg), sliced(cfg);
    full.init(3);
    sliced.init(3);
    parallel::expert_parallel(sliced, comm);
    full.to(DataType::kF64);  // f64: no timing of the f32 GEMM libraries in a test this small
    sliced.to(DataType::kF64);
    int held = 0;
    for (const auto& [name, p] : sliced.named_parameters())
      held += name.find("h.1.mlp.experts.") == 0 ? 1 : 0;
    EXPECT_EQ(held, 2 * 4);  // two experts of four tensors
    const auto [x, y] = rank_batch(comm.rank());
    EXPECT_EQ(sliced.loss(x, y).item(), full.loss(x, y).item());
  });
}

// Sources apart (the deterministic mode's arithmetic): after a backward, fold_expert_gradients
// leaves each expert the one-process gradients of every rank's batch added in rank order, bit for
// bit, and the router the one-process gradient of this rank's batch.
TEST(ExpertParallel, SourcesApartFoldTheOneProcessGradients) {
  run_ranks(2, [](Communicator& comm) {
    const tensor::nn::GPTConfig cfg{
        .vocab = 16, .context = 4, .layers = 1, .heads = 1, .width = 8, .experts = 4, .top_k = 2};
    tensor::nn::GPT full(cfg), sliced(cfg);
    full.init(3);
    sliced.init(3);
    parallel::expert_parallel(sliced, comm);
    parallel::keep_expert_sources_apart(sliced);
    full.to(DataType::kF64);
    sliced.to(DataType::kF64);
    const auto [x, y] = rank_batch(comm.rank());
    full.loss(x, y).backward();
    sliced.loss(x, y).backward();
    std::optional<Communicator> alone = comm.split(comm.rank(), 0, "alone");  // one replica
    parallel::fold_expert_gradients(sliced, *alone);
    EXPECT_EQ(
        max_diff(sliced.h[0]->moe->router->weight.grad(), full.h[0]->moe->router->weight.grad()),
        0.0);
    const auto& mine = sliced.h[0]->moe->experts;
    const int64_t first = 2 * comm.rank();
    for (int64_t e = 0; e < 4; ++e) {
      const auto ref = full.h[0]->moe->experts[static_cast<size_t>(e)]->named_parameters();
      for (size_t i = 0; i < ref.size(); ++i) {
        // Rank 0's gradient, then rank 1's added to it (undefined: no contribution).
        const Tensor& g = ref[i].second.grad();
        std::vector<double> have{g.defined() ? 1.0 : 0.0}, both(2);
        Tensor mine_g = g.defined() ? g.clone() : Tensor::zeros_like(ref[i].second);
        Tensor all = Tensor::empty({2 * mine_g.numel()}, DataType::kF64);
        comm.all_gather(mine_g.data_ptr(), all.data_ptr(), static_cast<size_t>(mine_g.numel()),
                        DataType::kF64);
        comm.all_gather(have.data(), both.data(), 1, DataType::kF64);
        if (e < first || e >= first + 2) continue;
        const Tensor got =
            mine[static_cast<size_t>(e - first)]->named_parameters()[i].second.grad();
        if (both[0] == 0 && both[1] == 0) {
          EXPECT_FALSE(got.defined()) << "expert " << e;
          continue;
        }
        Tensor fold;
        for (int r = 0; r < 2; ++r) {
          if (both[static_cast<size_t>(r)] == 0) continue;
          const Tensor c = all.narrow(0, r * mine_g.numel(), mine_g.numel()).view(mine_g.shape());
          if (!fold.defined())
            fold = c.clone();
          else
            tensor::accumulate_grad(fold, c);
        }
        ASSERT_TRUE(got.defined()) << "expert " << e << " " << ref[i].first;
        EXPECT_EQ(max_diff(got, fold), 0.0) << "expert " << e << " " << ref[i].first;
      }
    }
  });
}

// Sources apart through a pipeline's order: two forwards before their backwards, each backward
// folded at once, leave the experts the gradients that forward, backward and fold of one batch
// after the other leave (each backward's sources are those of its own forward), bit for bit.
TEST(ExpertParallel, SourcesApartFoldEachBackwardOfForwardsAhead) {
  run_ranks(2, [](Communicator& comm) {
    const tensor::nn::GPTConfig cfg{
        .vocab = 16, .context = 4, .layers = 1, .heads = 1, .width = 8, .experts = 4, .top_k = 2};
    tensor::nn::GPT in_turn(cfg), ahead(cfg);
    std::optional<Communicator> alone = comm.split(comm.rank(), 0, "alone");
    for (tensor::nn::GPT* m : {&in_turn, &ahead}) {
      m->init(3);
      parallel::expert_parallel(*m, comm);
      parallel::keep_expert_sources_apart(*m);
      m->to(DataType::kF64);
    }
    const auto [x0, y0] = rank_batch(comm.rank());
    const auto [x1, y1] = rank_batch(comm.rank() + 2);
    in_turn.loss(x0, y0).backward();
    parallel::fold_expert_gradients(in_turn, *alone);
    in_turn.loss(x1, y1).backward();
    parallel::fold_expert_gradients(in_turn, *alone);
    const Tensor first = ahead.loss(x0, y0), second = ahead.loss(x1, y1);
    first.backward();
    parallel::fold_expert_gradients(ahead, *alone);
    second.backward();
    parallel::fold_expert_gradients(ahead, *alone);
    int compared = 0;
    for (size_t l = 0; l < 2; ++l) {
      const auto want = in_turn.h[0]->moe->experts[l]->named_parameters();
      const auto got = ahead.h[0]->moe->experts[l]->named_parameters();
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(got[i].second.grad().defined(), want[i].second.grad().defined()) << want[i].first;
        if (!want[i].second.grad().defined()) continue;
        EXPECT_EQ(max_diff(got[i].second.grad(), want[i].second.grad()), 0.0) << want[i].first;
        ++compared;
      }
    }
    EXPECT_GT(compared, 0) << "no expert got a token";
  });
}

}  // namespace
}  // namespace chorus::testing
