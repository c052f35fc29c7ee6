// chorus — the tuner: which algorithm is fastest for a collective of a given size, from times
// measured on this machine.
//
// A tune table holds, per (world size, collective, algorithm variant), the median time of a call at
// a series of sizes, measured by `chorus-tune` (tools/chorus_tune) on the machine it runs on. The
// model predicts a time for any size by interpolating between the two nearest measured sizes
// (linear in bytes, which is the alpha + bytes x beta model fitted piecewise) and by the last
// segment's slope beyond them; the selector picks the algorithm with the smallest prediction.
// From each curve the table also derives the classic constants: alpha (latency: the time at the
// smallest size) and beta (inverse bandwidth: the slope at the largest sizes).
//
// A table is an override of the cost model (algo/cost_model.h), which chooses by default: rank 0
// loads one only where it is named (every rank of a communicator uses rank 0's, so all choose
// alike): CHORUS_TUNE_FILE (chorus-tune writes ~/.cache/chorus/tune-<hostname>.txt beside the
// fitted constants), or CHORUS_TUNE=builtin, the table built in (measured on one 2-vCPU
// machine). CHORUS_TUNE=off ignores every table and the model and uses fixed size thresholds.
//
// Text format, one curve per line ('#' starts a comment):
//   <world size> <collective>[/in-place] <variant> <bytes>:<us> <bytes>:<us> ...
// where <variant> is an algorithm name, alone (single copy) or with "/fifo" (algorithm.h, Path).
// Curves are of out-of-place calls. "/in-place" marks a curve of in-place calls: chorus-tune
// measures them for broadcast, which the selector chooses by them (fastest(..., in_place)); the
// root of a broadcast then picks the path of its own sends by the curves of its own placement
// (path_for()).
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "algo/algorithm.h"

namespace chorus::algo {

class TuneTable {
 public:
  struct Point {
    size_t bytes;
    double us;
  };

  // Throws InvalidArgument naming the line for malformed text.
  static TuneTable parse(std::string_view text, std::string_view origin);
  std::string format() const;

  void set(int world_size, Collective coll, Variant v, std::vector<Point> curve,
           bool in_place = false);
  bool empty() const { return curves_.empty(); }
  // Whether any out-of-place curve exists for this collective at this world size.
  bool covers(int world_size, Collective coll) const;
  // Predicted time of one call, or nullopt when the table has no curve for it.
  std::optional<double> predict_us(int world_size, Collective coll, Variant v, size_t bytes,
                                   bool in_place = false) const;
  // Latency (us) and inverse bandwidth (us per MiB) of a curve, for explanations.
  std::optional<std::pair<double, double>> alpha_beta(int world_size, Collective coll, Variant v,
                                                      bool in_place = false) const;
  // The fastest variant by prediction among those registered for `coll` (each algorithm on
  // either path), if covered. A FIFO variant within kTieMargin of its algorithm's single-copy
  // one yields to it. A `preferred` variant predicted within kTieMargin of the fastest is kept:
  // curves measured on a busy machine differ by that much from run to run, and a flip between
  // near-equal predictions can pick an algorithm with more steps. `in_place`: by the in-place
  // curves, where a variant has one (else its out-of-place one). `rank_ordered`: only among the
  // algorithms that fold `coll` in rank order (folds_in_rank_order(); deterministic mode).
  static constexpr double kTieMargin = 0.10;
  std::optional<Variant> fastest(int world_size, Collective coll, size_t bytes,
                                 std::optional<Variant> preferred = std::nullopt,
                                 bool in_place = false, bool rank_ordered = false) const;
  // The faster path for `algo`, by its two curves in place or out of place; nullopt when either
  // is missing. (No tie margin: the caller asks only from the single-copy threshold up, where the
  // two paths are different code.)
  std::optional<Path> path_for(int world_size, Collective coll, Algorithm algo, size_t bytes,
                               bool in_place) const;

  // Calls f(world size, collective, variant, in place, points) for every curve.
  template <class F>
  void for_each_curve(F&& f) const {
    for (const auto& [key, curve] : curves_)
      f(std::get<0>(key), std::get<1>(key), std::get<3>(key), std::get<2>(key), curve);
  }

  std::string origin;  // where it was loaded from (for logs and chorus-tune --show)

 private:
  using Key = std::tuple<int, Collective, bool, Variant>;  // bool: in place
  std::map<Key, std::vector<Point>> curves_;
};

// The table rank 0 would load (see above; empty when none is named); `origin` says from where.
// Throws InvalidArgument for a malformed or unreadable one.
TuneTable load_tune_table();
// The built-in table's text.
std::string_view builtin_tune_text();
// ~/.cache/chorus/tune-<hostname>.txt (where chorus-tune writes by default).
std::string default_tune_path();
// False when CHORUS_TUNE=off; throws InvalidArgument for a value other than on, off, builtin.
bool tuning_enabled();

}  // namespace chorus::algo
