// A communicator's selection: algo::choose() on the communicator's SelectContext, with a memo of
// recent choices by size (the tuner's interpolation is not free; sizes repeat), the one-time note
// when deterministic mode replaces a forced algorithm, and explain() in the public form.
#include <string>
#include <vector>

#include "chorus/log.h"
#include "communicator_impl.h"

namespace chorus {

// A forced algorithm runs where the collective has it and it can run here (else InvalidArgument
// naming the reason), except a reduction in deterministic mode that it would not fold in rank
// order: that one runs as the selector chooses by size (communicator.h, "Deterministic mode"),
// and rank 0 says so once.
algo::Variant Communicator::Impl::choose(Collective coll, size_t bytes, bool device_ipc) const {
  if (!selection.forced) return choose_by_size(coll, bytes, device_ipc);
  switch (algo::use_of_forced(selection, coll)) {
    case algo::ForcedUse::kRuns:
      return *selection.forced;
    case algo::ForcedUse::kNone:
      return choose_by_size(coll, bytes, device_ipc);
    case algo::ForcedUse::kReplaced:
      break;
  }
  const algo::Variant forced = *selection.forced;
  const algo::Variant v = choose_by_size(coll, bytes, device_ipc);
  const size_t logged = static_cast<size_t>(coll) * 8 + static_cast<size_t>(forced.algo);
  if (rank == 0 && !substitutions_logged_.test(logged)) {
    substitutions_logged_.set(logged);
    CHORUS_INFO(kLogColl, "deterministic reductions: the forced algorithm ",
                algo::to_string(forced), " does not fold ", to_string(coll), " in rank order; ",
                to_string(coll), " runs as chosen by size instead (", algo::to_string(v), " at ",
                bytes, " bytes)");
  }
  return v;
}

algo::Variant Communicator::Impl::choose_by_size(Collective coll, size_t bytes,
                                                 bool device_ipc) const {
  Choice& c = choices_[(bytes * 31 + static_cast<size_t>(coll) * 2 + device_ipc) % choices_.size()];
  if (c.bytes == bytes && c.coll == coll && c.device_ipc == device_ipc) return c.algo;
  c = {bytes, coll, device_ipc, algo::choose_by_size(selection, coll, bytes, device_ipc)};
  return c.algo;
}

std::vector<AlgorithmEstimate> Communicator::Impl::explain(Collective coll, size_t bytes,
                                                           bool device_ipc) const {
  std::vector<AlgorithmEstimate> out;
  for (const algo::Candidate& c : algo::explain(selection, coll, bytes, device_ipc)) {
    if (!c.reason.empty()) continue;
    AlgorithmEstimate est;
    est.algorithm = std::string(algo::to_string(c.variant));
    est.chosen = c.chosen;
    if (c.predicted_us) est.predicted_us = *c.predicted_us;
    out.push_back(std::move(est));
  }
  return out;
}

}  // namespace chorus
