// chorus — for chorus's own tools (chorus-tune): the tune table the selector reads, behind a
// small API: check an algorithm name, summarise a table, and turn one run's measured curves into
// the table file. Installed with the other headers, but not part of the API a trainer uses: it
// may change between versions. The table's format and model: docs/ARCHITECTURE.md, "Tuner".
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/communicator.h"

namespace chorus {

// Whether `name` names an algorithm variant ("ring", "ring/fifo", "fanout", ...).
bool is_algorithm_name(std::string_view name);
// ~/.cache/chorus/tune-<hostname>.txt: where chorus-tune writes by default.
std::string default_tune_path();
// False when CHORUS_TUNE=off (fixed size thresholds, every table ignored).
bool tuning_enabled();

// One curve of a table, as chorus-tune --show prints it.
struct CurveSummary {
  int world_size = 0;
  std::string collective;      // "all_reduce", "broadcast/in-place", ...
  std::string algorithm;       // "ring", "ring/fifo", ...
  double alpha_us = 0;         // latency: the time at the smallest size
  double beta_us_per_mib = 0;  // inverse bandwidth: the slope at the largest sizes
  int points = 0;
};
struct TableSummary {
  std::string origin;  // where the table came from; empty: none
  std::vector<CurveSummary> curves;
};
// The table in effect for this process (`file` empty: as rank 0 would load it) or the one in
// `file`. Throws chorus::InvalidArgument naming the line of a malformed table.
TableSummary summarize_tune_table(const std::string& file = {});

// The cost model's constants fitted to every out-of-place curve of the tune table in `file`
// ("builtin": the table built in), as a constants file's text. Throws chorus::InvalidArgument
// naming the line of a malformed table.
std::string fit_costs_of_table(const std::string& file);

// A measured point: the median time of one call of `bytes` selection bytes (selection.h).
struct TunePoint {
  size_t bytes = 0;
  double us = 0;
};

// The curves of one chorus-tune run.
class MeasuredTable {
 public:
  MeasuredTable();
  ~MeasuredTable();
  MeasuredTable(MeasuredTable&&) noexcept;
  MeasuredTable& operator=(MeasuredTable&&) noexcept;

  // Adds the curve of `algorithm` (a name is_algorithm_name() takes), fitted to be
  // non-decreasing first (a call never gets faster as it grows; the noise that says otherwise is
  // pooled away). Throws chorus::InvalidArgument for an unknown algorithm name.
  void add(int world_size, Collective coll, std::string_view algorithm,
           std::vector<TunePoint> curve, bool in_place = false);
  bool empty() const;
  // The table lines of the curves added.
  std::string format() const;
  // The table text after this run, which measured world size `world_size`, the collectives
  // `colls` and the algorithms `algorithms` (empty: all): the lines of `old_text` (an existing
  // table file) that the run does not replace, then this run's lines.
  std::string merge_into(std::string_view old_text, int world_size,
                         std::span<const Collective> colls,
                         std::span<const std::string> algorithms) const;
  // The cost model's constants (chorus/cost_model.h) fitted to the curves added, filed under
  // `link` ("shm" or "ucx": what the measured communicator's priced_link() says), merged into
  // `old_text` (an existing constants file: its entries of other world sizes, collectives,
  // algorithms and links are kept). Throws chorus::InvalidArgument naming the line of a
  // malformed `old_text`, or an unknown link.
  std::string fit_costs_into(std::string_view old_text, std::string_view link = "shm") const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus
