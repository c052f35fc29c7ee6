// PipelineEngine: one interpreter for every schedule (pipeline.h).
//
// Per (micro, chunk) the engine keeps the stage input (a received activation, a leaf that
// requires grad, or the embedding's output on the first virtual stage), the stage output or,
// on the last virtual stage, the micro-batch's loss; a backward consumes them. Actions run in
// the schedule's order; each run of communication actions is one group (communicate()), posted
// at once, asynchronously, on three channels; a compute step waits for the receives it needs,
// and sends are waited for at the end of the step. The lm_head's copy of the token embedding
// on the last stage hands its gradient to the first stage micro-batch by micro-batch; on the
// first stage it enters that micro-batch's backward ahead of the embedding's own share
// (tensor::with_leaf_grad, recorded in forward and filled by the receive): the pieces and the
// order of one process's backward, so the token embedding's gradient of a micro-batch is the
// same sum, added to the accumulated one in one step.
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "chorus/error.h"
#include "chorus/log.h"
#include "chorus/parallel/pipeline.h"
#include "chorus/parallel/trace.h"
#include "chorus/tensor/autograd.h"
#include "chorus/tensor/ops.h"
#include "common/tensor_comm.h"

namespace chorus::parallel {

using tensor::Tensor;

namespace {

bool is_send(PipelineOp op) {
  return op == PipelineOp::kSendActivation || op == PipelineOp::kSendGrad ||
         op == PipelineOp::kSendTiedGrad;
}
bool is_comm(PipelineOp op) {
  return is_send(op) || op == PipelineOp::kRecvActivation || op == PipelineOp::kRecvGrad ||
         op == PipelineOp::kRecvTiedGrad;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

struct PipelineEngine::Impl {
  tensor::nn::GPT* model = nullptr;
  DeviceMesh* mesh = nullptr;
  Communicator* pp = nullptr;
  // One communicator per channel (each runs its operations in issue order): activations
  // forward, gradients backward, and the tied embedding's gradients.
  std::optional<Communicator> act, grad, tied_comm;
  // The model's device, and each channel's transfers in the engine's order on it (beside the
  // compute on a GPU: common/tensor_comm.h).
  tensor::Device device;
  std::map<const Communicator*, TensorComm> ordered;
  TensorComm& on(Communicator* c) { return ordered.at(c); }
  PipelineOptions options;
  PipelineSchedule schedule;
  std::vector<int64_t> bounds;  // block boundaries of the virtual stages
  int p = 1, s = 0, V = 1;
  bool tied = false;  // first and last virtual stages on different ranks
  std::set<std::string> owned;
  Stats stats;

  // The step in progress, per (micro, chunk).
  struct Slot {
    Tensor input, output, loss, grad_out;
    Tensor tied_grad;  // first stage: the lm_head's share of the embedding's gradient
  };
  std::map<std::pair<int, int>, Slot> slots;
  std::vector<Work> sends;
  std::vector<Tensor> send_buffers;
  std::vector<double> losses;  // per micro-batch (scaled), this step
  Batch batch;
  uint64_t step = 0;
  Tracer* tracer = nullptr;
  // Traced: when the running action started and, if it began by waiting, when that wait ended.
  double action_start_us = 0, action_ready_us = 0;

  int virtual_stage(int chunk) const { return chunk * p + s; }
  int stage_of(int k) const { return k % p; }
  bool first(int chunk) const { return virtual_stage(chunk) == 0; }
  bool last(int chunk) const { return virtual_stage(chunk) == V - 1; }

  tensor::Shape activation_shape() const {
    const auto& cfg = model->config();
    return {options_micro_batch, cfg.context, cfg.width};
  }
  int64_t options_micro_batch = 0;  // rows of a micro-batch, learned from the first batch

  // ---- what to send and where to receive -------------------------------------------------
  Tensor payload(const PipelineAction& a) {
    Slot& slot = slots[{a.micro, a.chunk}];
    switch (a.op) {
      case PipelineOp::kSendActivation:
        return slot.output.detach().contiguous();
      case PipelineOp::kSendGrad: {
        CHORUS_CHECK(slot.input.grad().defined(), "pipeline: no input gradient to send");
        return slot.input.grad().contiguous();
      }
      default: {  // kSendTiedGrad: this micro-batch's lm_head gradient of the embedding copy
        Tensor w = model->wte->weight;
        Tensor g = w.grad().defined() ? w.grad().clone() : Tensor::zeros_like(w);
        w.set_grad({});
        return g;
      }
    }
  }
  int peer(const PipelineAction& a) const {
    const int k = virtual_stage(a.chunk);
    switch (a.op) {
      case PipelineOp::kSendActivation:
        return stage_of(k + 1);
      case PipelineOp::kRecvActivation:
        return stage_of(k - 1);
      case PipelineOp::kSendGrad:
        return stage_of(k - 1);
      case PipelineOp::kRecvGrad:
        return stage_of(k + 1);
      case PipelineOp::kSendTiedGrad:
        return 0;
      default:
        return stage_of(V - 1);  // kRecvTiedGrad
    }
  }
  Tensor& tied_grad(int micro, int chunk) {
    Tensor& t = slots[{micro, chunk}].tied_grad;
    if (!t.defined()) t = Tensor::empty_like(model->wte->weight);
    return t;
  }
  Tensor receive_buffer(const PipelineAction& a) {
    if (a.op == PipelineOp::kRecvTiedGrad) return tied_grad(a.micro, a.chunk);
    return Tensor::empty(activation_shape(), DataType::kF32, device);
  }
  void received(const PipelineAction& a, Tensor buf) {
    Slot& slot = slots[{a.micro, a.chunk}];
    if (a.op == PipelineOp::kRecvActivation) {
      buf.set_requires_grad(true);
      slot.input = buf;
    } else if (a.op == PipelineOp::kRecvGrad) {
      slot.grad_out = buf;
    }
    // kRecvTiedGrad: received into the slot's tied_grad, which this micro-batch's backward reads.
  }

  // One group of communication actions (a run of them in the schedule), posted at once: on each
  // channel a send and a receive go out as one send_recv, anything else one by one, all
  // asynchronous. A compute step waits for the receives it needs (await_input); sends are waited
  // for at the end of the step. (The validator's rule, so a validated schedule cannot deadlock.)
  Communicator& channel(PipelineOp op) {
    if (op == PipelineOp::kSendActivation || op == PipelineOp::kRecvActivation) return *act;
    if (op == PipelineOp::kSendGrad || op == PipelineOp::kRecvGrad) return *grad;
    return *tied_comm;
  }
  struct Pending {
    PipelineAction action;
    Tensor buffer;
    Work work;
  };
  std::map<std::tuple<int, int, int>, Pending> inbox;  // posted receives by (op, micro, chunk)

  void communicate(const std::vector<PipelineAction>& group) {
    auto expect = [&](const PipelineAction& a, Tensor buffer, Work work) {
      inbox[{static_cast<int>(a.op), a.micro, a.chunk}] = {a, std::move(buffer), std::move(work)};
    };
    for (Communicator* c : {&*act, &*grad, &*tied_comm}) {
      std::vector<const PipelineAction*> mine;
      for (const PipelineAction& a : group)
        if (&channel(a.op) == c) mine.push_back(&a);
      const bool fused = mine.size() == 2 && is_send(mine[0]->op) != is_send(mine[1]->op);
      if (fused) {
        const PipelineAction& snd = is_send(mine[0]->op) ? *mine[0] : *mine[1];
        const PipelineAction& rcv = is_send(mine[0]->op) ? *mine[1] : *mine[0];
        Tensor out = payload(snd);
        Tensor in = receive_buffer(rcv);
        Work w = on(c).send_recv_async(out.data_ptr(), static_cast<size_t>(out.numel()), peer(snd),
                                       in.data_ptr(), static_cast<size_t>(in.numel()), peer(rcv),
                                       out.dtype());
        send_buffers.push_back(out);
        expect(rcv, in, w);
        continue;
      }
      for (const PipelineAction* a : mine) {
        if (is_send(a->op)) {
          Tensor out = payload(*a);
          sends.push_back(on(c).send_async(out.data_ptr(), static_cast<size_t>(out.numel()),
                                           out.dtype(), peer(*a)));
          send_buffers.push_back(out);  // kept until the send is done
        } else {
          Tensor in = receive_buffer(*a);
          expect(*a, in,
                 on(c).recv_async(in.data_ptr(), static_cast<size_t>(in.numel()), in.dtype(),
                                  peer(*a)));
        }
      }
    }
  }

  // Waits for the receive (op, micro, chunk) a compute step needs, and takes it in.
  void await_input(PipelineOp op, int micro, int chunk) {
    auto it = inbox.find({static_cast<int>(op), micro, chunk});
    CHORUS_CHECK(it != inbox.end(), "pipeline: ", to_string(op), " of micro-batch ", micro,
                 " was never posted");
    const auto t0 = std::chrono::steady_clock::now();
    const double trace_t0 = tracer ? Tracer::now_us() : 0;
    it->second.work.wait();
    stats.wait_seconds += seconds_since(t0);
    if (tracer) {
      const double end = Tracer::now_us();
      tracer->add("wait " + std::string(to_string(op)) + " " + std::to_string(micro) + "." +
                      std::to_string(chunk),
                  "pipeline", trace_t0, end);
      // A wait before any of the action's compute delays its start.
      if (action_ready_us == 0 && trace_t0 - action_start_us < 50) action_ready_us = end;
    }
    received(it->second.action, it->second.buffer);
    inbox.erase(it);
  }

  // ---- compute ---------------------------------------------------------------------------
  void forward(const PipelineAction& a) {
    const int k = virtual_stage(a.chunk);
    if (k > 0) await_input(PipelineOp::kRecvActivation, a.micro, a.chunk);
    Slot& slot = slots[{a.micro, a.chunk}];
    Tensor x;
    if (k == 0) {
      x = model->embed(batch(a.micro).first);
      if (tied) x = tensor::with_leaf_grad(x, model->wte->weight, tied_grad(a.micro, a.chunk));
    } else {
      CHORUS_CHECK(slot.input.defined(), "pipeline: forward of micro-batch ", a.micro,
                   " without its input");
      x = slot.input;
    }
    // The MoE blocks' weighted auxiliary losses, scaled as the loss is: part of the loss on the
    // stage that holds the blocks (the last stage adds them to its loss; another seeds their
    // gradient in the backward of its output), and of the micro-batch's reported loss.
    std::vector<Tensor> aux;
    Tensor y = model->blocks(x, bounds[static_cast<size_t>(k)], bounds[static_cast<size_t>(k) + 1],
                             step, model->config().experts > 0 ? &aux : nullptr);
    const double scale = options.loss_scale > 0 ? options.loss_scale : 1.0 / schedule.micro_batches;
    Tensor side;
    for (const Tensor& t : aux) side = side.defined() ? tensor::add(side, t) : t;
    if (side.defined() && scale != 1.0) side = tensor::scale(side, scale);
    if (k == V - 1) {
      const Tensor targets = batch(a.micro).second;
      const int64_t n = targets.numel();
      Tensor logits = model->head(y);
      Tensor loss = model->wte->tied_loss(logits.view({n, logits.size(-1)}), targets.reshape({n}));
      if (scale != 1.0) loss = tensor::scale(loss, scale);
      if (side.defined()) loss = tensor::add(loss, side);
      losses[static_cast<size_t>(a.micro)] += loss.item();
      slot.loss = loss;
    } else {
      if (side.defined()) {
        losses[static_cast<size_t>(a.micro)] += side.item();
        y = tensor::with_side_loss(y, side);
      }
      slot.output = y;
    }
  }

  void backward(const PipelineAction& a, bool last_of_step, const AroundBackward& around) {
    const int k = virtual_stage(a.chunk);
    if (k < V - 1) await_input(PipelineOp::kRecvGrad, a.micro, a.chunk);
    if (k == 0 && tied) await_input(PipelineOp::kRecvTiedGrad, a.micro, a.chunk);
    Slot& slot = slots[{a.micro, a.chunk}];
    auto run = [&] {
      if (slot.loss.defined()) {
        slot.loss.backward();
      } else {
        CHORUS_CHECK(slot.grad_out.defined(), "pipeline: backward of micro-batch ", a.micro,
                     " without its output's gradient");
        slot.output.backward(slot.grad_out);
      }
    };
    if (around)
      around(last_of_step, run);
    else
      run();
    slot.output = Tensor();
    slot.loss = Tensor();
    slot.grad_out = Tensor();
    slot.tied_grad = Tensor();
  }
};

PipelineEngine::PipelineEngine(tensor::nn::GPT& model, DeviceMesh& mesh, PipelineOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& e = *impl_;
  e.model = &model;
  e.mesh = &mesh;
  e.pp = &mesh.pp();
  e.options = options;
  e.p = e.pp->size();
  e.s = e.pp->rank();
  e.tied = e.p > 1;
  e.act = e.pp->split(0, e.s, e.pp->group_name() + " activations");
  e.grad = e.pp->split(0, e.s, e.pp->group_name() + " gradients");
  e.tied_comm = e.pp->split(0, e.s, e.pp->group_name() + " tied gradients");
  e.device = common_device(model.named_parameters(), "pipeline");
  for (Communicator* c : {&*e.act, &*e.grad, &*e.tied_comm})
    e.ordered.emplace(c, TensorComm(*c, e.device, CommOrder::kOverlap));
  e.schedule = make_schedule(options.schedule, e.p, options.chunks, options.micro_batches, e.tied);
  validate(e.schedule);  // throws on a broken schedule, before any work
  e.V = e.p * e.schedule.chunks;
  const tensor::nn::GPTConfig& cfg = model.config();
  CHORUS_ARG_CHECK(cfg.layers >= e.V, "pipeline: ", cfg.layers, " layers for ", e.V,
                   " virtual stages (", e.p, " stages x ", e.schedule.chunks,
                   " chunks; every virtual stage needs at least one block)");

  // The cut: given, uniform, or measured on world rank 0 and shared.
  if (!options.boundaries.empty()) {
    e.bounds = options.boundaries;
    CHORUS_ARG_CHECK(e.bounds.size() == static_cast<size_t>(e.V) + 1 && e.bounds.front() == 0 &&
                         e.bounds.back() == cfg.layers,
                     "pipeline: boundaries need ", e.V + 1, " entries from 0 to ", cfg.layers);
    for (size_t i = 1; i < e.bounds.size(); ++i)
      CHORUS_ARG_CHECK(e.bounds[i] > e.bounds[i - 1], "pipeline: boundaries must increase");
  } else if (options.balance == "uniform") {
    std::vector<double> costs(static_cast<size_t>(cfg.layers) + 2, 1.0);
    costs.front() = costs.back() = 0;
    e.bounds = balance_layers(costs, e.V);
  } else {
    CHORUS_ARG_CHECK(options.balance == "measured", "pipeline: balance '", options.balance,
                     "' (expected measured or uniform)");
    // Every rank measures (a tensor-parallel layer's collectives need its whole tp group), and
    // world rank 0's costs decide, so that every rank cuts alike.
    std::vector<double> costs = measure_layer_costs(model, 1);
    Communicator& world = mesh.world();
    world.broadcast(costs.data(), costs.data(), costs.size(), DataType::kF64, 0);
    e.bounds = balance_layers(costs, e.V);
  }

  // What this rank owns; the rest of the model's storage goes.
  for (int c = 0; c < e.schedule.chunks; ++c) {
    const int k = e.virtual_stage(c);
    for (int64_t b = e.bounds[static_cast<size_t>(k)]; b < e.bounds[static_cast<size_t>(k) + 1];
         ++b)
      for (const auto& [name, t] : model.h[static_cast<size_t>(b)]->named_parameters())
        e.owned.insert("h." + std::to_string(b) + "." + name);
    if (k == 0)
      for (const auto& [name, t] : model.named_parameters())
        if (name.rfind("wte.", 0) == 0 || name.rfind("wpe.", 0) == 0) e.owned.insert(name);
    if (k == e.V - 1)
      for (const auto& [name, t] : model.named_parameters())
        if (name.rfind("ln_f.", 0) == 0) e.owned.insert(name);
  }
  const bool uses_wte_copy =
      e.virtual_stage(e.schedule.chunks - 1) == e.V - 1 && !e.owned.count("wte.weight");
  for (const auto& [name, t] : model.named_parameters()) {
    if (e.owned.count(name) || (uses_wte_copy && name.rfind("wte.", 0) == 0)) continue;
    t.storage()->release();
  }
  CHORUS_INFO(kLogPar, "pipeline ", e.schedule.name, ": stage ", e.s, " of ", e.p, ", ",
              e.schedule.chunks, " chunk(s), ", e.schedule.micro_batches, " micro-batches, ",
              e.owned.size(), " parameters");
}

PipelineEngine::~PipelineEngine() {
  for (Work& w : impl_->sends) {
    try {
      w.wait();
    } catch (const std::exception& ex) {
      CHORUS_WARN(kLogPar, "pipeline: a send failed during teardown: ", ex.what());
    }
  }
}

const PipelineSchedule& PipelineEngine::schedule() const { return impl_->schedule; }
const std::vector<int64_t>& PipelineEngine::boundaries() const { return impl_->bounds; }
bool PipelineEngine::owns(const std::string& name) const { return impl_->owned.count(name) > 0; }

tensor::nn::NamedTensors PipelineEngine::parameters() const {
  tensor::nn::NamedTensors out;
  for (const auto& [name, t] : impl_->model->named_parameters())
    if (owns(name)) out.emplace_back(name, t);
  return out;
}

double PipelineEngine::forward_backward(const Batch& batch, uint64_t step,
                                        const AroundBackward& around_backward) {
  Impl& e = *impl_;
  const auto t0 = std::chrono::steady_clock::now();
  e.stats = Stats{};
  e.slots.clear();
  e.batch = batch;
  e.step = step;
  e.losses.assign(static_cast<size_t>(e.schedule.micro_batches), 0.0);
  e.options_micro_batch = batch(0).first.size(0);
  const std::vector<PipelineAction>& list = e.schedule.actions[static_cast<size_t>(e.s)];
  size_t last_backward = 0;
  for (size_t i = 0; i < list.size(); ++i)
    if (list[i].op == PipelineOp::kBackward) last_backward = i;
  int live = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    const PipelineAction& a = list[i];
    if (is_comm(a.op)) {
      std::vector<PipelineAction> group;
      while (i < list.size() && is_comm(list[i].op)) group.push_back(list[i++]);
      --i;
      e.communicate(group);
      continue;
    }
    const auto c0 = std::chrono::steady_clock::now();
    const double waited = e.stats.wait_seconds;
    if (e.tracer) {
      e.action_start_us = Tracer::now_us();
      e.action_ready_us = 0;
    }
    if (a.op == PipelineOp::kForward) {
      e.forward(a);
      e.stats.peak_activations = std::max(e.stats.peak_activations, ++live);
    } else if (a.op == PipelineOp::kBackward) {
      e.backward(a, i == last_backward, around_backward);
      --live;
    }
    e.stats.compute_seconds += seconds_since(c0) - (e.stats.wait_seconds - waited);
    // The action from when its inputs were there (the wait before it is the bubble's).
    if (e.tracer && (a.op == PipelineOp::kForward || a.op == PipelineOp::kBackward))
      e.tracer->add((a.op == PipelineOp::kForward ? "F " : "B ") + std::to_string(a.micro) + "." +
                        std::to_string(a.chunk),
                    "compute", e.action_ready_us > 0 ? e.action_ready_us : e.action_start_us,
                    Tracer::now_us());
  }
  CHORUS_CHECK(e.inbox.empty(), "pipeline: ", e.inbox.size(), " receives never used");
  for (Work& w : e.sends) w.wait();
  e.sends.clear();
  e.send_buffers.clear();
  e.slots.clear();
  // The losses live on the last stage (and, with experts, the auxiliary losses on the stages
  // holding the MoE blocks; zeros elsewhere): summed over the stages, every stage returns them.
  e.pp->all_reduce(e.losses.data(), e.losses.data(), e.losses.size(), DataType::kF64,
                   ReduceOp::kSum);
  double loss = 0;
  for (double l : e.losses) loss += l;
  e.stats.total_seconds = seconds_since(t0);
  return loss;
}

void PipelineEngine::sync_tied_weights() {
  Impl& e = *impl_;
  if (!e.tied) return;
  Tensor w = e.model->wte->weight;
  TensorComm pp(*e.pp, e.device, CommOrder::kInline);
  if (e.s == 0) pp.send(w.data_ptr(), static_cast<size_t>(w.numel()), w.dtype(), e.p - 1);
  if (e.s == e.p - 1) pp.recv(w.data_ptr(), static_cast<size_t>(w.numel()), w.dtype(), 0);
}

tensor::nn::NamedTensors PipelineEngine::gather_parameters() {
  Impl& e = *impl_;
  tensor::nn::NamedTensors out;
  // The owner of every parameter: the same computation on every rank.
  auto owner = [&](const std::string& name) {
    if (name.rfind("h.", 0) == 0) {
      const int64_t b = std::stoll(name.substr(2, name.find('.', 2) - 2));
      for (int k = 0; k < e.V; ++k)
        if (b < e.bounds[static_cast<size_t>(k) + 1]) return e.stage_of(k);
    }
    if (name.rfind("ln_f.", 0) == 0) return e.stage_of(e.V - 1);
    return 0;  // wte, wpe
  };
  TensorComm pp(*e.pp, e.device, CommOrder::kInline);
  for (const auto& [name, t] : e.model->named_parameters()) {
    Tensor full = Tensor::empty(t.shape(), t.dtype(), t.device());
    const int root = owner(name);
    if (e.s == root) full.copy_(t);
    pp.broadcast(full.data_ptr(), full.data_ptr(), static_cast<size_t>(full.numel()), full.dtype(),
                 root);
    out.emplace_back(name, full);
  }
  return out;
}

PipelineEngine::Stats PipelineEngine::stats() const { return impl_->stats; }

const std::vector<double>& PipelineEngine::losses() const { return impl_->losses; }

void PipelineEngine::set_tracer(Tracer* tracer) { impl_->tracer = tracer; }

std::vector<std::pair<std::string, Communicator*>> PipelineEngine::channels() {
  return {{"pp act", &*impl_->act}, {"pp grad", &*impl_->grad}, {"pp tied", &*impl_->tied_comm}};
}

}  // namespace chorus::parallel
