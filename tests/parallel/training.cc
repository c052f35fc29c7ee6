#include "training.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <sstream>

#include "chorus/parallel/checkpoint.h"
#include "chorus/parallel/data_parallel.h"
#include "chorus/parallel/mesh.h"
#include "chorus/parallel/pipeline.h"
#include "chorus/parallel/replicas.h"
#include "chorus/parallel/tensor_parallel.h"
#include "chorus/parallel/zero.h"
#include "chorus/tensor/amp.h"
#include "chorus/tensor/autograd.h"
#include "chorus/tensor/optim.h"
#include "chorus/tensor/random.h"

namespace chorus::testing {

using tensor::Tensor;
using tensor::nn::GPT;
using tensor::nn::NamedTensors;

namespace {

tensor::optim::AdamWOptions adamw_of(const TrainSpec& spec) {
  return {.lr = spec.lr, .weight_decay = spec.weight_decay};
}

std::unique_ptr<GPT> make_model(const TrainSpec& spec) {
  auto model = std::make_unique<GPT>(spec.model);
  model->init(spec.seed);
  model->set_activation_checkpointing(spec.checkpointing);
  if (spec.param_dtype != DataType::kF32) model->to(spec.param_dtype);
  return model;
}

// The loss of micro-batch (step, rank, k) scaled by `scale`; backward from it accumulates its
// gradients.
Tensor micro_loss(const GPT& model, const TrainSpec& spec, int step, int rank, int k,
                  double scale) {
  const auto [x, y] = micro_batch(spec, step, rank, k);
  tensor::AutocastGuard autocast(spec.autocast);
  Tensor loss = model.loss(x, y, static_cast<uint64_t>(step));
  return scale == 1.0 ? loss : tensor::scale(loss, scale);
}

NamedTensors copy_of(const NamedTensors& in) {
  NamedTensors out;
  for (const auto& [n, t] : in) out.emplace_back(n, t.detach().clone());
  return out;
}

// The moments of an optimizer state, in the order of `params`.
NamedTensors moments_of(const NamedTensors& state, const NamedTensors& params) {
  NamedTensors out;
  for (const char* suffix : {".exp_avg", ".exp_avg_sq"})
    for (const auto& [p, t] : params)
      for (const auto& [n, s] : state)
        if (n == p + suffix) out.emplace_back(n, s.detach().clone());
  return out;
}

// The step's loss: the scaled micro-batch losses of every replica (each replica's in `mine`,
// gathered over `dp`) added in the order of the global batch.
double global_loss(Communicator& dp, const std::vector<double>& mine) {
  const size_t m = mine.size(), n = static_cast<size_t>(dp.size());
  std::vector<double> all(m * n);
  dp.all_gather(mine.data(), all.data(), m, DataType::kF64);
  double loss = 0;
  for (size_t k = 0; k < m; ++k)
    for (size_t r = 0; r < n; ++r) loss += all[r * m + k];
  return loss;
}

}  // namespace

std::pair<Tensor, Tensor> micro_batch(const TrainSpec& spec, int step, int rank, int k) {
  const int64_t B = spec.micro_batch, T = spec.model.context, V = spec.model.vocab;
  std::vector<int64_t> x(static_cast<size_t>(B * T)), y(x.size());
  const tensor::RngKey key{spec.seed, 0xda7aull + static_cast<uint64_t>(step) * 1000003ull +
                                          static_cast<uint64_t>(rank) * 1009ull +
                                          static_cast<uint64_t>(k)};
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<int64_t>(tensor::uniform_at(key, 2 * i) * static_cast<float>(V)) % V;
    y[i] = static_cast<int64_t>(tensor::uniform_at(key, 2 * i + 1) * static_cast<float>(V)) % V;
  }
  return {Tensor::from_vector(std::span<const int64_t>(x), {B, T}),
          Tensor::from_vector(std::span<const int64_t>(y), {B, T})};
}

TrainResult reference_run(const TrainSpec& spec, int dp) {
  std::unique_ptr<GPT> model = make_model(spec);
  const NamedTensors params = model->named_parameters();
  tensor::optim::AdamW opt(params, adamw_of(spec));
  const int micro_batches = dp * spec.accumulation;
  TrainResult result;
  for (int step = 0; step < spec.steps; ++step) {
    double loss = 0;
    for (int k = 0; k < spec.accumulation; ++k)
      for (int r = 0; r < dp; ++r) {
        Tensor l = micro_loss(*model, spec, step, r, k, 1.0 / micro_batches);
        loss += l.item();
        l.backward();
      }
    if (spec.clip > 0) result.norms.push_back(tensor::optim::clip_grad_norm(opt, spec.clip));
    opt.step();
    opt.zero_grad();
    result.losses.push_back(loss);
  }
  result.parameters = copy_of(params);
  result.optimizer_state = moments_of(opt.state_dict(), params);
  return result;
}

TrainResult parallel_run(Communicator& world, const TrainSpec& spec, const Scheme& scheme) {
  parallel::DeviceMesh mesh(
      world, {.dp = world.size() / (scheme.tp * scheme.pp), .tp = scheme.tp, .pp = scheme.pp},
      {.placement = parallel::MeshOptions::Placement::kRankOrder});
  Communicator& dp = mesh.dp();
  // Each micro-batch's loss: scaled by the step's micro-batch count over all replicas, the
  // gradients summed; or, averaging, by this replica's count, the reductions dividing by dp.
  const double scale = 1.0 / (spec.average ? spec.accumulation : dp.size() * spec.accumulation);
  std::unique_ptr<GPT> model = make_model(spec);
  if (scheme.tp > 1) parallel::tensor_parallel(*model, mesh.tp());
  std::unique_ptr<parallel::PipelineEngine> pipe;
  std::function<bool(const std::string&)> include;
  if (scheme.pp > 1) {
    pipe = std::make_unique<parallel::PipelineEngine>(
        *model, mesh,
        parallel::PipelineOptions{.schedule = scheme.schedule,
                                  .chunks = scheme.chunks,
                                  .micro_batches = spec.accumulation,
                                  .balance = "uniform",
                                  .loss_scale = scale});
    include = [&pipe](const std::string& name) { return pipe->owns(name); };
  }
  // DDP + AdamW or ZeRO, as chorus-train holds them (parallel/replicas.h).
  const bool tp_rank0 = mesh.tp().rank() == 0;
  parallel::Replicas replicas(*model, mesh, pipe ? pipe->parameters() : model->named_parameters(),
                              parallel::ReplicasOptions{.zero_stage = scheme.zero_stage,
                                                        .adamw = adamw_of(spec),
                                                        .shard_group = scheme.zero_group,
                                                        .average = spec.average,
                                                        .include = include,
                                                        .counted = [&](const std::string& name) {
                                                          return tp_rank0 ||
                                                                 parallel::is_tensor_parallel_slice(
                                                                     *model, name);
                                                        }});
  TrainResult result;
  parallel::CheckpointState ckpt{.model = model.get(), .mesh = &mesh, .pipeline = pipe.get()};
  replicas.bind(ckpt);
  int first = 0;
  if (!spec.load_dir.empty()) {
    first = static_cast<int>(parallel::load_checkpoint(spec.load_dir, ckpt).step);
    if (pipe) pipe->sync_tied_weights();
  }
  for (int step = first; step < spec.steps; ++step) {
    std::vector<double> losses;
    if (pipe) {
      tensor::AutocastGuard autocast(spec.autocast);
      pipe->forward_backward([&](int m) { return micro_batch(spec, step, dp.rank(), m); },
                             static_cast<uint64_t>(step), replicas.pipeline_backward());
      losses = pipe->losses();
    } else {
      losses = replicas.accumulate(spec.accumulation, [&](int k) {
        Tensor loss = micro_loss(*model, spec, step, dp.rank(), k, scale);
        const double value = loss.item();
        loss.backward();
        return value;
      });
    }
    // Clipped (clip > 0), stepped, zeroed.
    const double norm = replicas.finish_step(spec.clip);
    if (spec.clip > 0) result.norms.push_back(norm);
    if (pipe) pipe->sync_tied_weights();
    // Averaging, a replica's losses are scaled by 1 / accumulation: / dp (exact for the powers
    // of two such runs use) makes them the one-process run's.
    if (spec.average)
      for (double& l : losses) l /= dp.size();
    result.losses.push_back(global_loss(dp, losses));
    if (step == spec.save_after) {
      ckpt.step = step + 1;
      parallel::save_checkpoint(spec.save_dir, ckpt);
    }
  }
  if (pipe) {
    if (scheme.tp == 1) result.parameters = pipe->gather_parameters();
    return result;
  }
  if (scheme.tp > 1) {
    result.parameters = parallel::gather_tensor_parallel(*model, mesh.tp());
    return result;
  }
  parallel::ZeroOptimizer* zero = ckpt.zero;
  result.parameters = copy_of(zero ? zero->state_dict() : model->named_parameters());
  result.optimizer_state = moments_of(
      zero ? zero->optimizer_state_dict() : ckpt.optimizer->state_dict(), result.parameters);
  return result;
}

std::string first_bit_difference(const TrainResult& a, const TrainResult& b) {
  std::ostringstream os;
  if (a.losses.size() != b.losses.size()) return "different step counts";
  for (size_t s = 0; s < a.losses.size(); ++s)
    if (std::memcmp(&a.losses[s], &b.losses[s], sizeof(double)) != 0) {
      os.precision(17);
      os << "step " << s << " loss " << a.losses[s] << " vs " << b.losses[s];
      return os.str();
    }
  NamedTensors ta_all = a.parameters, tb_all = b.parameters;
  // The optimizer state where both runs kept it (pipelines and tensor parallelism do not).
  if (!a.optimizer_state.empty() && !b.optimizer_state.empty()) {
    ta_all.insert(ta_all.end(), a.optimizer_state.begin(), a.optimizer_state.end());
    tb_all.insert(tb_all.end(), b.optimizer_state.begin(), b.optimizer_state.end());
  }
  if (ta_all.size() != tb_all.size())
    return "different tensor counts: " + std::to_string(ta_all.size()) + " vs " +
           std::to_string(tb_all.size());
  for (size_t i = 0; i < ta_all.size(); ++i) {
    const auto& [na, ta] = ta_all[i];
    const auto& [nb, tb] = tb_all[i];
    if (na != nb) return "parameter " + std::to_string(i) + ": " + na + " vs " + nb;
    if (ta.shape() != tb.shape() || ta.dtype() != tb.dtype())
      return na + ": shape or dtype differs";
    if (std::memcmp(ta.data_ptr(), tb.data_ptr(), ta.nbytes()) != 0) {
      const std::vector<double> va = ta.to_vector(), vb = tb.to_vector();
      size_t e = 0;
      while (e < va.size() && va[e] == vb[e]) ++e;
      os.precision(9);
      os << na << " element " << e << ": " << (e < va.size() ? va[e] : 0) << " vs "
         << (e < vb.size() ? vb[e] : 0);
      return os.str();
    }
  }
  return "";
}

double max_relative_difference(const TrainResult& a, const TrainResult& b, std::string* where) {
  double worst = 0;
  auto note = [&](double d, const std::string& what) {
    if (d > worst) {
      worst = d;
      if (where != nullptr) *where = what;
    }
  };
  for (size_t s = 0; s < std::min(a.losses.size(), b.losses.size()); ++s)
    note(std::abs(a.losses[s] - b.losses[s]) / std::abs(b.losses[s]),
         "loss of step " + std::to_string(s));
  for (size_t s = 0; s < std::min(a.norms.size(), b.norms.size()); ++s)
    note(std::abs(a.norms[s] - b.norms[s]) / std::abs(b.norms[s]),
         "gradient norm of step " + std::to_string(s));
  // The parameters as one vector: ||a - b|| / ||b||. (Per tensor the measure would be dominated
  // by the attention's key bias, whose gradient is zero but for rounding (it shifts every score
  // of a row alike): AdamW turns that noise into steps of about lr, so its few elements follow
  // the rounding of whichever summation order ran.)
  double diff = 0, ref = 0;
  for (size_t i = 0; i < std::min(a.parameters.size(), b.parameters.size()); ++i) {
    const std::vector<double> va = a.parameters[i].second.to_vector();
    const std::vector<double> vb = b.parameters[i].second.to_vector();
    for (size_t e = 0; e < std::min(va.size(), vb.size()); ++e) {
      diff += (va[e] - vb[e]) * (va[e] - vb[e]);
      ref += vb[e] * vb[e];
    }
  }
  note(std::sqrt(diff) / std::max(std::sqrt(ref), 1e-12), "the parameters");
  return worst;
}

}  // namespace chorus::testing
