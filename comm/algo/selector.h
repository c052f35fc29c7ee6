// chorus — the selector: which algorithm, on which path, runs a call. A pure function of the
// call's collective and selection bytes and of what the communicator fixed at set-up
// (SelectContext); the same on every rank, since every rank has the same context (rank 0's cost
// model and tune table, agreed capabilities) and the same call.
//
// The order of precedence:
//   1. a forced algorithm (CHORUS_ALGO, CommOptions::algorithm, set_algorithm), for the
//      collectives that have it. One that the collective has but that cannot run on this
//      communicator (AlgoEntry::supports) is an InvalidArgument naming the reason; in
//      deterministic mode one that does not fold the reduction in rank order is replaced by the
//      choice below (communicator.h, "Deterministic mode").
//   2. a tune table, where one was named (CHORUS_TUNE_FILE, CHORUS_TUNE=builtin): its fastest
//      measured curve (algo/tuner.h), on one host;
//   3. the cost model (algo/cost_model.h): the candidate with the smallest predicted time, by
//      its form and the constants fitted on this host (or the defaults);
//   4. the fixed size thresholds (algo/registry.h): CHORUS_TUNE=off, or a collective the model
//      has no form for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "algo/cost_model.h"
#include "algo/registry.h"
#include "algo/tuner.h"

namespace chorus::algo {

// The bytes a call selects its algorithm by, the one rule for the communicator, chorus-bench and
// chorus-tune: the call's count times the element size, times the world size for reduce_scatter
// and all_gather (their whole buffer: the input that is reduce-scattered, the result that is
// gathered). Every other collective counts one rank's buffer as the call names it: for gather and
// scatter that is one rank's block, not the root's whole buffer.
inline size_t selection_bytes(Collective coll, size_t count, DataType dtype, int world_size) {
  const size_t bytes = count * dtype_size(dtype);
  const bool whole = coll == Collective::kReduceScatter || coll == Collective::kAllGather;
  return whole ? bytes * static_cast<size_t>(world_size) : bytes;
}
// The inverse, for tools that sweep sizes: the count of a call of `bytes` selection bytes (at
// least 1 element).
size_t count_for_selection_bytes(Collective coll, size_t bytes, DataType dtype, int world_size);

// What the choice depends on besides the call: fixed at set-up (the forced algorithm aside) and
// the same on every rank.
struct SelectContext {
  Capabilities caps;
  std::span<const int> host_of;  // host index of every rank (for the hierarchical rule)
  // Reductions fold in rank order (CHORUS_DETERMINISTIC): only algorithms that do are chosen.
  bool deterministic = false;
  const TuneTable* tune = nullptr;   // rank 0's table, if one was named
  const CostModel* model = nullptr;  // rank 0's model; null (and no table) = fixed thresholds
  Link local = Link::kShm;           // the transport within a host
  // The size from which the "/fifo" variants differ from the plain ones (0: they never do; no
  // peer is read single copy).
  size_t fifo_from_bytes = 0;
  std::optional<Variant> forced;
};

// What becomes of the forced algorithm for a collective.
enum class ForcedUse : uint8_t {
  kNone,      // nothing forced, or the collective has no such algorithm: chosen by size
  kRuns,      // it runs
  kReplaced,  // deterministic mode, and it does not fold the reduction in rank order: by size
};
// Throws InvalidArgument, naming the collective, the algorithm and the reason, when the
// collective has the forced algorithm but supports() says it cannot run here. A communicator of
// one rank runs any (it only copies).
ForcedUse use_of_forced(const SelectContext& s, Collective coll);

// A call on device buffers that move by IPC (`device_ipc`, docs/GPU.md) is chosen among
// single-copy variants (a device message takes one path, whatever the variant's), and priced on
// the IPC link (Link::kDeviceIpc) where chorus-tune --device fitted constants of its collective:
// by the cost model alone (the tune table's curves are host memory's). Without such constants
// it is chosen as a host call is. Every rank of such a call passes device memory (a rank with
// host buffers would choose as a host call, and the peers would fail with a Mismatch naming both
// choices).

// The choice without the forced algorithm: the tune table's fastest prediction where it applies
// (one host; in deterministic mode among the rank-ordered variants), else the cost model's, else
// the fixed thresholds.
Variant choose_by_size(const SelectContext& s, Collective coll, size_t bytes,
                       bool device_ipc = false);
// The choice for a call (the order of precedence above). Throws as use_of_forced().
Variant choose(const SelectContext& s, Collective coll, size_t bytes, bool device_ipc = false);

// One variant of a registered algorithm of the collective, as explain() sees it.
struct Candidate {
  Variant variant;
  // Why it is not a candidate here: it cannot run (supports()), it is offered only on another
  // number of hosts (runs_on_hosts(): hier across hosts), deterministic mode excludes it, or its
  // "/fifo" path is no different from its single-copy one. Empty: a candidate.
  std::string reason;
  std::optional<double> predicted_us;  // the tune table's prediction, else the cost model's
  bool chosen = false;
};
// The cost model's choice among the candidates (explain()'s, without a reason): the smallest
// prediction; a FIFO variant only where it beats its single-copy one by TuneTable::kTieMargin;
// among predictions that tie exactly, the fixed thresholds' choice.
// nullopt without a model or where it predicts no candidate.
std::optional<Variant> model_choice(const SelectContext& s, Collective coll, size_t bytes);
// Every variant of every algorithm registered for `coll`, with its reason and prediction, and
// which one choose() picks. Never throws: a forced algorithm that cannot run is listed with its
// reason, and nothing is chosen.
std::vector<Candidate> explain(const SelectContext& s, Collective coll, size_t bytes,
                               bool device_ipc = false);
// Whether a call of `coll` on device buffers that move by IPC is priced on the IPC link's
// constants (the model has some for `coll`); else it is chosen as a host call is.
bool priced_on_ipc(const SelectContext& s, Collective coll);

// Whether this rank's sends of a call run as `v` go through the FIFO: v's path, except for the
// root of a broadcast the selector chose for (not a forced algorithm) on one host, from the
// single-copy threshold up, in host memory: it follows the tune table's curves of its own
// placement (in place or not), since a receiver takes either kind of message.
bool sends_through_fifo(const SelectContext& s, const CollArgs& a, int rank, Variant v,
                        size_t bytes, bool on_device);

}  // namespace chorus::algo
