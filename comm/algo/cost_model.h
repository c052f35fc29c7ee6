// chorus — the cost model: the time of a collective call from its algorithm's step counts and
// the constants of the links it crosses (alpha-beta, Hockney):
//
//   t = sum over the terms of the algorithm's form:  alpha[transport] x steps + beta[transport] x
//       factor x bytes
//
// where `bytes` are the call's selection bytes (algo/selector.h), `steps` the messages in
// sequence on the critical path and `factor` the bytes a rank moves or reduces on that path per
// selection byte (a reduction reads its inputs: it counts like a move). The forms, N ranks
// (form_of() is the one place):
//
//   all_reduce     ring     2(N-1) steps, 3(N-1)/N  (2(N-1)/N moved + (N-1)/N reduced)
//                  tree     2 ceil(log2 N), 3       (double binary tree: a half up and down
//                                                    each tree, children reduced)
//                  direct   1, 2(N-1)               (N-1 copies in, N-1 reduced)
//                  twoshot  2, 3(N-1)/N             (direct reduce-scatter + direct all-gather)
//                  hier     shm: 2 steps, 3(g-1)/g; network: 2(H-1), 3(H-1)/H / g
//                           (H hosts of g ranks: reduce-scatter within, ring across, gather)
//   reduce_scatter ring     N-1, 2(N-1)/N   direct, twoshot  1, 2(N-1)/N
//   all_gather     ring     N-1, (N-1)/N    direct, fanout   1, (N-1)/N
//   broadcast      ring     N-1, 1   tree ceil(log2 N), min(2, N-1)   direct 1, N-1   fanout 1, 1
//   reduce         ring     N-1, 2   tree ceil(log2 N), 2 min(2, N-1) direct 1, 2(N-1)
//                  twoshot  2, 3(N-1)/N
// Gather, scatter, all_to_all and the point-to-point calls have one algorithm: no form.
//
// Across hosts every term of a flat algorithm crosses the network (its slowest link bounds it);
// only hier splits its terms between the host's transport and the network.
//
// Constants are per transport (shm, UCX, the device IPC path), per algorithm variant (the same
// form fits each variant's own alpha and beta: a FIFO copy costs more per byte than a single
// copy, a direct exchange's step more than a ring's) and per size band (kBands: below 32 KiB the
// small-message paths, to 1 MiB a call that stays in cache, above it memory bandwidth; one line
// does not fit all three, and a crossover measured on one machine's curves moved by 3x).
// chorus-tune fits them on the host by least squares over a few sizes (algo/cost_fit.h) and caches
// them per host (default_cost_path()); a world size it did not measure uses the constants (and
// candidates) of the nearest one it did, with its own form. Without a cache every variant shares
// the transport's default constants, so the form alone chooses (default_link_cost(),
// docs/ARCHITECTURE.md "Cost model"); the device IPC path has a form but no defaults: unknown until
// chorus-tune --device measures it on device buffers, and then what calls on device buffers that
// move by IPC are chosen by (algo/selector.h).
//
// In-place calls have constants of their own where chorus-tune measured them
// ("<collective>/in-place" lines): an in-place all-reduce cannot read a peer's buffer while its
// owner overwrites it, so its single-copy paths cost more than out of place (twoshot 82 us in
// place, 50 out of place at 512 KiB on two ranks of an Intel Xeon) where the FIFO paths cost the
// same. all_reduce and broadcast are chosen by them, on every rank alike (torch.distributed, DDP,
// tensor parallelism and MPI_Bcast call them in place); a collective without in-place constants
// uses its out-of-place ones.
//
// Text format, one fitted variant and band per line ('#' starts a comment):
//   <transport> <world size> <collective>[/in-place] <variant> <band from bytes>
//   <alpha us per step> <beta us per MiB>
#pragma once

#include <array>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include "algo/algorithm.h"

namespace chorus::algo {

enum class Link : uint8_t { kShm, kUcx, kDeviceIpc };
std::string_view to_string(Link l);
std::optional<Link> parse_link(std::string_view name);

// One term of a form: `steps` latencies and `factor` x bytes over `link`.
struct CostTerm {
  Link link = Link::kShm;
  double steps = 0;
  double factor = 0;
};
// An algorithm's form: one or two terms (hier: within hosts and across).
struct CostForm {
  std::array<CostTerm, 2> terms{};
  int count = 0;
};

// Where the ranks are: world size and hosts (every host with world_size / hosts ranks). The
// transport within a host is `local` (shm for host memory).
struct Placement {
  int world_size = 2;
  int hosts = 1;
  Link local = Link::kShm;
};

// The form of `algo` for `coll` at `p`; nullopt for a collective with one algorithm, or an
// algorithm that does not apply there (hier on one host, fanout across hosts).
std::optional<CostForm> form_of(Collective coll, Algorithm algo, const Placement& p);

// Whether the selector prices `coll` by its in-place constants (where it has any): all_reduce and
// broadcast, mostly called in place.
bool chosen_in_place(Collective coll);
// Whether the short probes (the host probe, chorus-tune --probe) measure `coll` in place too:
// all_reduce only, the in-place call of a training step; broadcast's in-place constants come
// from a full chorus-tune run.
bool probed_in_place(Collective coll);

// The size bands constants are fitted in: band i holds selection bytes from kBands[i] up to the
// next band's start.
inline constexpr size_t kBands[] = {0, size_t(32) << 10, size_t(1) << 20};
int band_of(size_t bytes);

// A link's constants.
struct LinkCost {
  double alpha_us = 0;         // per step
  double beta_us_per_mib = 0;  // per MiB of form bytes
};

// The defaults where nothing was measured: shm 2 us per step and 4 GiB/s (256 us per MiB), a
// copy through one core with a process wake-up per step, which choose direct below about 16 KiB
// and the bandwidth-optimal forms above, as the fixed thresholds do; UCX 20 us and 1 GiB/s,
// slower than any shm, so that hier wins across hosts. The device IPC path has none.
std::optional<LinkCost> default_link_cost(Link l);

class CostModel {
 public:
  // Throws InvalidArgument naming the line of malformed text.
  static CostModel parse(std::string_view text, std::string_view origin);
  std::string format() const;

  // The constants of `v` for `coll` fitted at `world_size` ranks over `link`, for the band
  // `band` (an index of kBands), of in-place calls when `in_place`.
  void set(Link link, int world_size, Collective coll, Variant v, int band, LinkCost c,
           bool in_place = false);
  bool empty() const { return fitted_.empty(); }
  // Whether any constants of `coll` were fitted on `link` (in place or not, any world size).
  bool fitted(Link link, Collective coll) const;
  // Takes every fitted entry of `newer`, replacing this model's of the same key.
  void merge(const CostModel& newer);
  // The constants used for `v` at `world_size` for a call of `bytes`: those fitted on `link` at
  // the world size nearest `world_size` that `coll` was fitted at (ties: the smaller), in the
  // band of `bytes` (else the nearest band fitted); nullopt when `v` was not fitted there (only
  // the variants fitted there are candidates); the link's defaults when `coll` was never fitted
  // on `link` (none for the IPC path). `in_place`: the in-place constants where `coll` has them
  // on `link` at a world size as near as its out-of-place ones', else the out-of-place ones.
  std::optional<LinkCost> constants(Link link, int world_size, Collective coll, Variant v,
                                    size_t bytes, bool in_place = false) const;
  // Predicted time of one call of `bytes` selection bytes (in place: as constants() says);
  // nullopt without a form or constants.
  std::optional<double> predict_us(Collective coll, Variant v, const Placement& p, size_t bytes,
                                   bool in_place = false) const;

  std::string origin;  // where it came from ("defaults" when nothing was loaded)

 private:
  // link, collective, in place, variant, world size, band
  using Key = std::tuple<Link, Collective, bool, Variant, int, int>;
  std::map<Key, LinkCost> fitted_;
};

// ~/.cache/chorus/cost-<hostname>.txt: where chorus-tune writes the fitted constants.
std::string default_cost_path();
// The model rank 0 uses: the file CHORUS_COST_FILE names, else default_cost_path() if
// chorus-tune wrote it, else the defaults (origin "defaults"). Throws InvalidArgument for a
// malformed or unreadable named file.
CostModel load_cost_model();

}  // namespace chorus::algo
