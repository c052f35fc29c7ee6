#include "algo/selector.h"

#include <algorithm>

#include "chorus/error.h"

namespace chorus::algo {
namespace {

// Why the forced algorithm, which the collective has (`e`), cannot run here; empty when it can.
// One rank runs any: its calls only copy.
std::string why_forced_cannot_run(const SelectContext& s, const AlgoEntry& e) {
  if (s.caps.world_size == 1) return {};
  return supports(e, s.caps);
}

// Why an algorithm of the collective is no candidate here; empty when it is.
std::string why_not_candidate(const SelectContext& s, Collective coll, const AlgoEntry& e) {
  std::string why = supports(e, s.caps);
  if (why.empty() && !runs_on_hosts(e.algo, s.caps.hosts))
    why = detail::concat(to_string(e.algo), " is offered only ",
                         s.caps.hosts == 1 ? "across hosts" : "on one host");
  if (why.empty() && s.deterministic && !folds_in_rank_order(coll, e.algo))
    why = detail::concat(to_string(e.algo), " does not fold ", to_string(coll),
                         " in rank order (deterministic mode)");
  return why;
}

Placement placement(const SelectContext& s) {
  return Placement{s.caps.world_size, s.caps.hosts, s.local};
}

// The context a call is chosen in: for one on device buffers that move by IPC, `s` with one path
// (every device message larger than a slot travels by IPC, whatever the variant's path), and on
// the IPC link without the tune table where its collective has that link's constants (`device`
// holds it); for any other, `s` itself.
const SelectContext& call_context(const SelectContext& s, Collective coll, bool device_ipc,
                                  SelectContext& device) {
  if (!device_ipc) return s;
  device = s;
  device.fifo_from_bytes = 0;
  if (priced_on_ipc(s, coll)) {
    device.local = Link::kDeviceIpc;
    device.tune = nullptr;
  }
  return device;
}

}  // namespace

std::optional<Variant> model_choice(const SelectContext& s, Collective coll, size_t bytes) {
  if (s.model == nullptr || s.caps.world_size < 2) return std::nullopt;
  const Placement p = placement(s);
  const bool in_place = chosen_in_place(coll);
  std::optional<Variant> best;
  double best_us = 0;
  // Both paths only where they differ: from the single-copy threshold up.
  const bool paths = s.fifo_from_bytes != 0 && bytes >= s.fifo_from_bytes;
  for (const AlgoEntry& e : all_algorithms()) {
    if (e.coll != coll || !why_not_candidate(s, coll, e).empty()) continue;
    for (Path path : {Path::kSingleCopy, Path::kFifo}) {
      if (path == Path::kFifo && (!paths || !has_paths(e.algo))) continue;
      const Variant v{e.algo, path};
      const auto us = s.model->predict_us(coll, v, p, bytes, in_place);
      if (us && (!best || *us < best_us)) {
        best = v;
        best_us = *us;
      }
    }
  }
  if (best && best->path == Path::kFifo)
    if (auto us = s.model->predict_us(coll, Variant{best->algo}, p, bytes, in_place);
        us && *us <= best_us * (1 + TuneTable::kTieMargin)) {
      best = Variant{best->algo};
      best_us = *us;
    }
  // Forms that tie (at 2 ranks a ring, a tree and a direct exchange are one step alike, and the
  // defaults give them the same constants): the fixed rule's choice among them.
  const Variant fixed{s.deterministic ? select_rank_ordered(coll, bytes, p.world_size)
                                      : select_default(coll, bytes, p.world_size, s.host_of)};
  if (best && fixed != *best)
    if (auto us = s.model->predict_us(coll, fixed, p, bytes, in_place);
        us && *us <= best_us * (1 + 1e-9))
      best = fixed;
  return best;
}

size_t count_for_selection_bytes(Collective coll, size_t bytes, DataType dtype, int world_size) {
  const size_t elems = std::max<size_t>(1, bytes / dtype_size(dtype));
  if (coll == Collective::kReduceScatter || coll == Collective::kAllGather)
    return std::max<size_t>(1, elems / static_cast<size_t>(std::max(1, world_size)));
  return elems;
}

ForcedUse use_of_forced(const SelectContext& s, Collective coll) {
  if (!s.forced) return ForcedUse::kNone;
  const AlgoEntry* e = find_algorithm(coll, s.forced->algo);
  if (e == nullptr) return ForcedUse::kNone;
  // Deterministic mode replaces it before asking whether it could run: it would not anyway.
  if (s.deterministic && !folds_in_rank_order(coll, s.forced->algo)) return ForcedUse::kReplaced;
  if (const std::string why = why_forced_cannot_run(s, *e); !why.empty())
    throw InvalidArgument(detail::concat(
        to_string(coll), ": the forced algorithm ", to_string(*s.forced), " cannot run: ", why,
        " (forced by CHORUS_ALGO, CommOptions::algorithm or set_algorithm)"));
  return ForcedUse::kRuns;
}

bool priced_on_ipc(const SelectContext& s, Collective coll) {
  return s.model != nullptr && s.model->fitted(Link::kDeviceIpc, coll);
}

Variant choose_by_size(const SelectContext& context, Collective coll, size_t bytes,
                       bool device_ipc) {
  SelectContext device;
  const SelectContext& s = call_context(context, coll, device_ipc, device);
  const int size = s.caps.world_size;
  // The tune table is measured on one host; across hosts the hierarchical rules apply, unless
  // reductions must fold in rank order (hier does not).
  const Algorithm fixed = s.deterministic ? select_rank_ordered(coll, bytes, size)
                                          : select_default(coll, bytes, size, s.host_of);
  std::optional<Variant> a;
  // Broadcast and all_reduce by their in-place curves (chosen_in_place): in place is how they are
  // mostly called (MPI_Bcast, torch.distributed, DDP's buckets, tensor parallelism, the span
  // overloads); an out-of-place broadcast root adds its own copy to any algorithm, and an
  // in-place all-reduce's single-copy paths cost more. Every rank chooses alike, whatever its
  // own buffers. Deterministic mode picks among the rank-ordered variants,
  // and only where the table measured the fixed choice: a table without reduce_scatter twoshot
  // would otherwise send large reduce-scatters through the direct one.
  if (s.caps.hosts == 1 && s.tune != nullptr &&
      (!s.deterministic || s.tune->predict_us(size, coll, Variant{fixed}, bytes)))
    a = s.tune->fastest(size, coll, bytes, fixed, chosen_in_place(coll), s.deterministic);
  // A table measured where the algorithm could run (fanout, on a host whose transport shares a
  // buffer) does not make it run where it cannot.
  if (a && size > 1) {
    const AlgoEntry* e = find_algorithm(coll, a->algo);
    if (e == nullptr || !supports(*e, s.caps).empty()) a.reset();
  }
  // Below the single-copy threshold no message can go single copy: the "/fifo" variant is the
  // same code as the plain one, and only noise in the table could have picked it.
  if (a && a->path == Path::kFifo && (s.fifo_from_bytes == 0 || bytes < s.fifo_from_bytes))
    a = Variant{a->algo};
  if (!a) a = model_choice(s, coll, bytes);
  return a ? *a : Variant{fixed};
}

Variant choose(const SelectContext& s, Collective coll, size_t bytes, bool device_ipc) {
  if (use_of_forced(s, coll) == ForcedUse::kRuns) return *s.forced;
  return choose_by_size(s, coll, bytes, device_ipc);
}

std::vector<Candidate> explain(const SelectContext& context, Collective coll, size_t bytes,
                               bool device_ipc) {
  SelectContext device;
  const SelectContext& s = call_context(context, coll, device_ipc, device);
  // What choose() picks; nothing when the forced algorithm cannot run.
  std::optional<Variant> chosen;
  const AlgoEntry* forced = s.forced ? find_algorithm(coll, s.forced->algo) : nullptr;
  if (forced != nullptr && (!s.deterministic || folds_in_rank_order(coll, forced->algo))) {
    if (why_forced_cannot_run(s, *forced).empty()) chosen = *s.forced;
  } else {
    chosen = choose_by_size(context, coll, bytes, device_ipc);
  }
  const int size = s.caps.world_size;
  std::vector<Candidate> out;
  for (const AlgoEntry& e : all_algorithms()) {
    if (e.coll != coll) continue;
    const std::string why = why_not_candidate(s, coll, e);
    for (Path path : {Path::kSingleCopy, Path::kFifo}) {
      Candidate c;
      c.variant = Variant{e.algo, path};
      c.chosen = chosen && c.variant == *chosen;
      c.reason = why;
      // The FIFO variants only where they differ: some peer is read single-copy, and the
      // algorithm has two paths (has_paths). A forced or tuned one is a candidate anyway, since
      // it is what runs.
      if (c.reason.empty() && path == Path::kFifo && !c.chosen) {
        if (device_ipc)
          c.reason = "device buffers: every message takes one path (the FIFO's slots, then IPC)";
        else if (s.fifo_from_bytes == 0)
          c.reason = "no peer is read single copy: every message goes through the FIFO";
        else if (!has_paths(e.algo))
          c.reason = detail::concat(to_string(e.algo), " has one path (", to_string(c.variant),
                                    " names the same)");
      }
      if (s.tune != nullptr && s.caps.hosts == 1) {
        // What the choice compared: the in-place curve where there is one (chosen_in_place).
        c.predicted_us = chosen_in_place(coll)
                             ? s.tune->predict_us(size, coll, c.variant, bytes, true)
                             : std::nullopt;
        if (!c.predicted_us) c.predicted_us = s.tune->predict_us(size, coll, c.variant, bytes);
      }
      if (!c.predicted_us && s.model != nullptr)
        c.predicted_us =
            s.model->predict_us(coll, c.variant, placement(s), bytes, chosen_in_place(coll));
      out.push_back(std::move(c));
    }
  }
  return out;
}

// A receiver takes a message of either kind, single copy or through the FIFO, so a rank may pick
// the path of its own sends without the others knowing (the pipelining unit stays the agreed
// variant's). The root of a broadcast uses that: the selector chose the algorithm and its path by
// the table's in-place curves (choose_by_size()), but an out-of-place root also copies its buffer
// into place meanwhile, and single copy then often wins where in place the copy shared through
// the FIFO does (docs/PERFORMANCE.md). So the root follows the chosen algorithm's curves of its
// own placement, when there are both and the selector chose (not a forced algorithm), for host
// memory, from the single-copy threshold up (below it every send goes through the FIFO anyway).
bool sends_through_fifo(const SelectContext& s, const CollArgs& a, int rank, Variant v,
                        size_t bytes, bool on_device) {
  const bool agreed = v.path == Path::kFifo;
  if (a.coll != Collective::kBroadcast || a.root != rank || on_device || s.forced ||
      s.tune == nullptr || s.caps.hosts != 1 || s.fifo_from_bytes == 0 || bytes < s.fifo_from_bytes)
    return agreed;
  const auto path = s.tune->path_for(s.caps.world_size, a.coll, v.algo, bytes, a.send == a.recv);
  return path ? *path == Path::kFifo : agreed;
}

}  // namespace chorus::algo
