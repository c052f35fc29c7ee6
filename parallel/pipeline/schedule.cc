// The pipeline schedules as data: GPipe, 1F1B and interleaved 1F1B (pipeline.h).
//
// A schedule is an order of forwards and backwards per stage; the communication follows from
// it. On stage s, virtual stage k = chunk * p + s of V = p * v, a forward receives its input
// (k > 0) and sends its output (k < V-1); a backward receives its output's gradient (k < V-1)
// and, with a tied embedding, the lm_head's embedding gradient (k == 0), and sends its input's
// gradient (k > 0) and the lm_head's embedding gradient (k == V-1). After each compute step
// comes one group: what the step sends and what the next step receives, posted together (the
// engine and the validator treat a run of communication actions as one group).
#include "chorus/error.h"
#include "chorus/parallel/pipeline.h"

namespace chorus::parallel {

std::string_view to_string(PipelineOp op) {
  switch (op) {
    case PipelineOp::kForward:
      return "F";
    case PipelineOp::kBackward:
      return "B";
    case PipelineOp::kSendActivation:
      return "send_act";
    case PipelineOp::kRecvActivation:
      return "recv_act";
    case PipelineOp::kSendGrad:
      return "send_grad";
    case PipelineOp::kRecvGrad:
      return "recv_grad";
    case PipelineOp::kSendTiedGrad:
      return "send_tied_grad";
    case PipelineOp::kRecvTiedGrad:
      return "recv_tied_grad";
  }
  return "?";
}

namespace {

struct Compute {
  bool forward;
  int micro, chunk;
};

PipelineSchedule start(const char* name, int stages, int chunks, int micro_batches, bool tied) {
  CHORUS_ARG_CHECK(stages >= 1, name, ": ", stages, " stages");
  CHORUS_ARG_CHECK(chunks >= 1, name, ": ", chunks, " chunks per stage");
  CHORUS_ARG_CHECK(micro_batches >= stages, name, ": ", micro_batches, " micro-batches for ",
                   stages, " stages (a pipeline needs at least as many micro-batches as stages)");
  PipelineSchedule s;
  s.name = name;
  s.stages = stages;
  s.chunks = chunks;
  s.micro_batches = micro_batches;
  s.tied_embedding = tied;
  s.actions.resize(static_cast<size_t>(stages));
  return s;
}

// Stage `stage`'s actions from the order of its forwards and backwards. After each compute step
// comes one group: what the step sends, and the receives of the next forward and of the next
// backward not posted yet (Megatron's send_forward_backward_recv_forward_backward). Posting a
// receive that early matters: a channel runs its operations in order, so a receive queued only
// after a send to the same peer can leave both ranks' sends waiting for each other.
void emit(PipelineSchedule& s, int stage, const std::vector<Compute>& order) {
  const int V = s.stages * s.chunks;
  // The first and last virtual stages share the weight in place when one rank holds both.
  const bool tied = s.tied_embedding && s.stages > 1;
  auto k_of = [&](int chunk) { return chunk * s.stages + stage; };
  auto& out = s.actions[static_cast<size_t>(stage)];
  std::vector<char> posted(order.size(), 0);
  auto receives = [&](size_t j) {
    if (j >= order.size() || posted[j]) return;
    posted[j] = 1;
    const Compute& c = order[j];
    const int k = k_of(c.chunk);
    if (c.forward && k > 0) out.push_back({PipelineOp::kRecvActivation, c.micro, c.chunk});
    if (!c.forward && k < V - 1) out.push_back({PipelineOp::kRecvGrad, c.micro, c.chunk});
    if (!c.forward && k == 0 && tied) out.push_back({PipelineOp::kRecvTiedGrad, c.micro, c.chunk});
  };
  auto sends = [&](const Compute& c) {
    const int k = k_of(c.chunk);
    if (c.forward && k < V - 1) out.push_back({PipelineOp::kSendActivation, c.micro, c.chunk});
    if (!c.forward && k > 0) out.push_back({PipelineOp::kSendGrad, c.micro, c.chunk});
    if (!c.forward && k == V - 1 && tied)
      out.push_back({PipelineOp::kSendTiedGrad, c.micro, c.chunk});
  };
  // The next forward and the next backward after position i.
  auto next_of_kind = [&](size_t i, bool forward) {
    size_t j = i + 1;
    while (j < order.size() && order[j].forward != forward) ++j;
    return j;
  };
  receives(0);
  if (!order.empty()) receives(next_of_kind(0, !order[0].forward));
  for (size_t i = 0; i < order.size(); ++i) {
    const Compute& c = order[i];
    out.push_back({c.forward ? PipelineOp::kForward : PipelineOp::kBackward, c.micro, c.chunk});
    sends(c);
    const size_t nf = next_of_kind(i, true), nb = next_of_kind(i, false);
    receives(std::min(nf, nb));
    receives(std::max(nf, nb));
  }
}

}  // namespace

PipelineSchedule gpipe(int stages, int micro_batches, bool tied_embedding) {
  PipelineSchedule s = start("gpipe", stages, 1, micro_batches, tied_embedding);
  for (int st = 0; st < stages; ++st) {
    std::vector<Compute> order;
    for (int m = 0; m < micro_batches; ++m) order.push_back({true, m, 0});
    for (int m = 0; m < micro_batches; ++m) order.push_back({false, m, 0});
    emit(s, st, order);
  }
  return s;
}

PipelineSchedule one_f_one_b(int stages, int micro_batches, bool tied_embedding) {
  PipelineSchedule s = start("1f1b", stages, 1, micro_batches, tied_embedding);
  for (int st = 0; st < stages; ++st) {
    // Warm-up: enough forwards to fill the pipeline below this stage; then one forward, one
    // backward; then the backwards still owed.
    const int warmup = std::min(stages - st - 1, micro_batches);
    std::vector<Compute> order;
    int f = 0, b = 0;
    for (; f < warmup; ++f) order.push_back({true, f, 0});
    while (f < micro_batches) {
      order.push_back({true, f++, 0});
      order.push_back({false, b++, 0});
    }
    while (b < micro_batches) order.push_back({false, b++, 0});
    emit(s, st, order);
  }
  return s;
}

PipelineSchedule interleaved(int stages, int chunks, int micro_batches, bool tied_embedding) {
  CHORUS_ARG_CHECK(chunks >= 2, "interleaved: ", chunks,
                   " chunks per stage (use 1f1b for one chunk)");
  CHORUS_ARG_CHECK(stages >= 2, "interleaved: ", stages,
                   " stage (the chunks of one rank would send to itself; use 1f1b)");
  CHORUS_ARG_CHECK(micro_batches % stages == 0, "interleaved: ", micro_batches,
                   " micro-batches are not a multiple of the ", stages, " stages");
  PipelineSchedule s = start("interleaved", stages, chunks, micro_batches, tied_embedding);
  const int total = micro_batches * chunks;
  // Megatron's order: micro-steps go through p micro-batches of chunk 0, then the same p of
  // chunk 1, ..., then the next p micro-batches; backwards walk the chunks in reverse.
  auto micro_of = [&](int k) { return (k / (stages * chunks)) * stages + k % stages; };
  auto chunk_of = [&](int k, bool forward) {
    const int c = (k / stages) % chunks;
    return forward ? c : chunks - 1 - c;
  };
  for (int st = 0; st < stages; ++st) {
    const int warmup = micro_batches == stages
                           ? total
                           : std::min((stages - st - 1) * 2 + (chunks - 1) * stages, total);
    std::vector<Compute> order;
    int f = 0, b = 0;
    for (; f < warmup; ++f) order.push_back({true, micro_of(f), chunk_of(f, true)});
    while (f < total) {
      order.push_back({true, micro_of(f), chunk_of(f, true)});
      ++f;
      order.push_back({false, micro_of(b), chunk_of(b, false)});
      ++b;
    }
    for (; b < total; ++b) order.push_back({false, micro_of(b), chunk_of(b, false)});
    emit(s, st, order);
  }
  return s;
}

PipelineSchedule make_schedule(const std::string& name, int stages, int chunks, int micro_batches,
                               bool tied_embedding) {
  if (name == "gpipe" || name == "1f1b") {
    CHORUS_ARG_CHECK(chunks == 1, name, " runs one chunk per stage, not ", chunks,
                     " (use interleaved)");
    return name == "gpipe" ? gpipe(stages, micro_batches, tied_embedding)
                           : one_f_one_b(stages, micro_batches, tied_embedding);
  }
  if (name == "interleaved") return interleaved(stages, chunks, micro_batches, tied_embedding);
  throw InvalidArgument("unknown pipeline schedule '" + name +
                        "' (expected gpipe, 1f1b or interleaved)");
}

}  // namespace chorus::parallel
