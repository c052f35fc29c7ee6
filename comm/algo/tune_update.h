// chorus — how measured curves become a tune table (chorus-tune's last steps, in the library so
// that they are tested): each curve is fitted to be non-decreasing, and the curves of one run
// are merged into an existing table's text, replacing what that run measured and keeping the
// rest (other world sizes, other collectives, algorithms left out of the run).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "algo/tuner.h"

namespace chorus::algo {

// A call never gets faster as it grows: noise that says otherwise (a descheduled block at a small
// size) is pooled away, least-squares (pool adjacent violators), so the curve is non-decreasing.
// Sizes are kept; only times change.
void fit_non_decreasing(std::vector<TuneTable::Point>& curve);

// The curves a run measured: world size `world_size`, collectives `colls` (in place or not), and
// the variants named in `variants` ("ring", "ring/fifo", ...; empty = every variant).
struct TuneRun {
  int world_size = 0;
  std::span<const Collective> colls;
  std::span<const std::string> variants;
  // Whether a table line of (world size, collective, variant) is one this run replaces.
  bool replaces(int world_size, Collective coll, std::string_view variant) const;
};

// The table text after `run`: every curve line of `old_text` that the run does not replace, in
// its order, then `measured`'s lines. Comments and blank lines are dropped; any other line is
// kept unless the run replaces it (one of a collective this chorus does not know included).
std::string merge_tune_text(std::string_view old_text, const TuneTable& measured,
                            const TuneRun& run);

}  // namespace chorus::algo
