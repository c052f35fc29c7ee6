// chorus — for chorus's own tools (chorus-tune --show, chorus-plan's `local` cluster): the cost
// model the selector chooses collective algorithms by (docs/ARCHITECTURE.md, "Cost model"): each
// algorithm's form (steps and bytes per call) with the constants chorus-tune fitted on this host,
// or the model's defaults. Installed with the other headers, but not part of the API a trainer
// uses: it may change between versions.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chorus/communicator.h"

namespace chorus {

// ~/.cache/chorus/cost-<hostname>.txt: where chorus-tune writes the fitted constants.
std::string default_cost_path();

// Whether the selector chooses `coll` by its in-place constants where it has any (all_reduce and
// broadcast, mostly called in place): what chorus-tune measures in place too.
bool chosen_in_place(Collective coll);
// Whether the short probes (the host probe, chorus-tune --probe) measure `coll` in place too:
// all_reduce only.
bool probed_in_place(Collective coll);

// One fitted entry, as chorus-tune --show prints it.
struct FittedCost {
  std::string link;  // "shm", "ucx", "ipc"
  int world_size = 0;
  std::string collective;      // "all_reduce", "all_reduce/in-place", ...
  std::string algorithm;       // "ring", "ring/fifo", ...
  size_t band_from_bytes = 0;  // the size band fitted: from here to the next band's start
  double alpha_us = 0;         // per step of the algorithm's form
  double beta_us_per_mib = 0;  // per MiB of the form's bytes
};

// The model rank 0 would load (`file` empty: CHORUS_COST_FILE, else the host's cache, else the
// defaults) or the one in `file`. Throws chorus::InvalidArgument naming the line of a malformed
// file.
class CostModel {
 public:
  explicit CostModel(const std::string& file = {});
  ~CostModel();
  CostModel(CostModel&&) noexcept;
  CostModel& operator=(CostModel&&) noexcept;

  const std::string& origin() const;  // the file, or "defaults"
  bool fitted() const;                // false: the defaults
  std::vector<FittedCost> entries() const;
  // The time of one call of `bytes` selection bytes (chorus/selection_bytes.h) among `world_size`
  // ranks on one host, by the fastest algorithm the model predicts (the selector's choice where
  // nothing else decides), and that algorithm; nullopt for a collective without algorithms to
  // choose from or a model that predicts none. In place for all_reduce and broadcast
  // (chosen_in_place) where the model has in-place constants.
  struct Choice {
    std::string algorithm;
    double us = 0;
  };
  std::optional<Choice> fastest(Collective coll, int world_size, double bytes) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus
