// chorus-tune: measures every algorithm of all_reduce, reduce_scatter, all_gather, broadcast,
// reduce, gather and scatter at sizes from 8 B up, on this machine with this many ranks, fits the
// cost model's constants to the times (chorus/cost_model.h) and writes them where the
// selector reads them, and the curves to a tune table (chorus/tune_table.h). Run it under a
// launcher:
//
//   chorus-run -n 2 chorus-tune            # writes ~/.cache/chorus/cost-<host>.txt and tune-...
//   chorus-run -n 2 chorus-tune --probe    # a few sizes: the constants only, in seconds
//   chorus-run -n 2 chorus-tune --device   # on device buffers: the IPC path's constants
//   chorus-tune --show                     # the constants (and any named table) in effect
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/config.h"
#include "chorus/cost_model.h"
#include "chorus/error.h"
#include "chorus/gpu/runtime.h"
#include "chorus/launch_env.h"
#include "chorus/selection_bytes.h"
#include "chorus/tune_table.h"

namespace chorus {
namespace {

constexpr const char* kUsage = R"(usage: chorus-run -n N chorus-tune [options]
       chorus-tune --show [--file FILE]

Measures every algorithm of all_reduce, reduce_scatter, all_gather, broadcast, reduce, gather and
scatter on this machine with N ranks (blocking calls, float32 sum, median of 5 timed blocks per
size, the slowest rank's time), at sizes 8 B, 32 B, 128 B, 512 B and x2 from there (where the
small-message paths end and the caches bend the curves) up to --max-bytes. Where some peer is read
single-copy, each algorithm is also measured on the FIFO path ("ring/fifo": large messages copy
through shared memory). Sizes are counted as chorus-bench counts them.

Then it fits, per (N, collective, algorithm), the constants of the algorithm's cost form
(latency alpha per step, inverse bandwidth beta per byte of its form; least squares on the
relative error) and writes them to the cost file under the link the ranks used ("shm"; "ucx"
when they span hosts or reach each other only over UCX, CHORUS_TRANSPORT=ucx), which the
selector reads on this host: it picks for each call the algorithm whose form predicts the
shortest time, at any world size (the constants of the nearest one measured); chorus-bench
--explain prints predicted beside measured.
Without a cost file the first job on the host probes a few sizes and writes one
(CHORUS_COST_PROBE; chorus-tune measures more and replaces its entries). all_reduce and
broadcast are measured in place too ("all_reduce/in-place" lines in both files), and the selector
chooses them by those constants, as they are mostly called in place. It also writes the measured
curves as a tune table, which chooses instead of the model only where CHORUS_TUNE_FILE names it.
Entries for other world sizes already in the files are kept, so run it once per world size you
use.

  --probe            the short probe: sizes 8 B, 1 KiB, 8 KiB, 32 KiB, 256 KiB, 1 MiB and
                     16 MiB (to --max-bytes; two in each of the model's size bands) only,
                     in place for all_reduce only, and the cost file only (no tune table)
  --device           on device buffers (each rank on GPU CHORUS_LOCAL_RANK % count, buffers
                     not registered, as a trainer passes them): fits the constants of the IPC
                     path ("ipc" lines), by which the selector chooses calls on device buffers
                     that move by IPC; the cost file only (the tune table is host memory's).
                     Refused without a GPU, or where device buffers move by pinned-host staging
                     (ranks on several hosts, CHORUS_GPU_PATH=staging, CHORUS_TRANSPORT=ucx):
                     the host algorithms then run on host memory, priced as host buffers are
  --cost-out FILE    where to write the constants (default ~/.cache/chorus/cost-<hostname>.txt,
                     which every job on this host then loads unless CHORUS_COST_FILE names another)
  --out FILE         where to write the tune table (default ~/.cache/chorus/tune-<hostname>.txt)
  --max-bytes SIZE   largest size measured, K/M/G suffixes allowed (default 64M)
  --colls LIST       comma-separated subset of the collectives above
  --algos LIST       comma-separated subset of the algorithms (as --sweep-algos names them:
                     ring, ring/fifo, fanout, ...); the file's other curves of these
                     collectives are kept, so a new algorithm can be added to a table
  --fit TABLE        no measuring: fit the constants to the curves of the tune table TABLE
                     ("builtin": the one built in) and write them to --cost-out (default
                     standard output); no launcher needed
  --show             print the cost constants in effect (or --cost-file FILE) and the tune table
                     in effect (or --file FILE), with latency (alpha, us) and inverse bandwidth
                     (beta, us per MiB) per curve; no launcher needed
  --print            also print the measured lines to stdout (rank 0)
  -h, --help         this text

Environment: CHORUS_COST_FILE (constants to load), CHORUS_TUNE_FILE (a table that chooses over
the model), CHORUS_TUNE=builtin (the built-in table over the model), CHORUS_TUNE=off (fixed
thresholds instead).
)";

struct Options {
  std::string out;
  std::string file;
  std::string cost_out;
  std::string cost_file;
  size_t max_bytes = 64 << 20;
  bool probe = false;
  bool device = false;
  std::string fit;
  std::vector<Collective> colls = {Collective::kAllReduce, Collective::kReduceScatter,
                                   Collective::kAllGather, Collective::kBroadcast,
                                   Collective::kReduce,    Collective::kGather,
                                   Collective::kScatter};
  std::vector<std::string> algos;  // empty: every algorithm
  bool show = false;
  bool print = false;
};

[[noreturn]] void usage_error(const std::string& why) {
  std::fprintf(stderr, "chorus-tune: %s\n(see chorus-tune --help)\n", why.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "--out") {
      o.out = value();
    } else if (arg == "--file") {
      o.file = value();
    } else if (arg == "--cost-out") {
      o.cost_out = value();
    } else if (arg == "--cost-file") {
      o.cost_file = value();
    } else if (arg == "--fit") {
      o.fit = value();
    } else if (arg == "--probe") {
      o.probe = true;
    } else if (arg == "--device") {
      o.device = true;
    } else if (arg == "--max-bytes") {
      const std::string v = value();
      auto b = parse_size(v);
      if (!b || *b < 8)
        usage_error("--max-bytes expects a size of at least 8 bytes, got '" + v + "'");
      o.max_bytes = static_cast<size_t>(*b);
    } else if (arg == "--colls") {
      o.colls.clear();
      std::stringstream list(value());
      std::string name;
      while (std::getline(list, name, ',')) {
        bool found = false;
        for (Collective c : Options{}.colls)
          if (to_string(c) == name) {
            o.colls.push_back(c);
            found = true;
          }
        if (!found) usage_error("unknown collective '" + name + "' in --colls");
      }
      if (o.colls.empty()) usage_error("--colls names no collective");
    } else if (arg == "--algos") {
      std::stringstream list(value());
      std::string name;
      while (std::getline(list, name, ',')) {
        if (!is_algorithm_name(name)) usage_error("unknown algorithm '" + name + "' in --algos");
        o.algos.push_back(name);
      }
      if (o.algos.empty()) usage_error("--algos names no algorithm");
    } else if (arg == "--show") {
      o.show = true;
    } else if (arg == "--print") {
      o.print = true;
    } else {
      usage_error("unknown option '" + arg + "'");
    }
  }
  if (o.device && (o.show || !o.fit.empty()))
    usage_error("--device measures: it does not go with --show or --fit");
  if (o.device && !o.out.empty())
    usage_error("--device writes the cost file only (--cost-out); --out names a tune table");
  return o;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

int show(const Options& o) {
  if (!tuning_enabled()) std::printf("CHORUS_TUNE=off: fixed size thresholds\n");
  const CostModel m(o.cost_file);
  std::printf("cost constants: %s\n", m.origin().c_str());
  if (!m.fitted()) {
    std::printf(
        "(none fitted: the model's defaults choose, docs/ARCHITECTURE.md \"Cost model\")\n");
  } else {
    std::printf("%-4s %4s  %-18s %-13s %10s %12s %16s\n", "link", "np", "collective", "algo",
                "from (B)", "alpha (us)", "beta (us/MiB)");
    for (const FittedCost& c : m.entries())
      std::printf("%-4s %4d  %-18s %-13s %10zu %12.3f %16.1f\n", c.link.c_str(), c.world_size,
                  c.collective.c_str(), c.algorithm.c_str(), c.band_from_bytes, c.alpha_us,
                  c.beta_us_per_mib);
  }
  const TableSummary t = summarize_tune_table(o.file);
  std::printf("tune table: %s\n", t.origin.empty() ? "(none named)" : t.origin.c_str());
  if (t.curves.empty()) return 0;
  std::printf("%4s  %-18s %-13s %12s %16s %7s\n", "np", "collective", "algo", "alpha (us)",
              "beta (us/MiB)", "points");
  for (const CurveSummary& c : t.curves)
    std::printf("%4d  %-18s %-13s %12.2f %16.1f %7d\n", c.world_size, c.collective.c_str(),
                c.algorithm.c_str(), c.alpha_us, c.beta_us_per_mib, c.points);
  return 0;
}

// In place: send == recv (broadcast is the only collective measured so).
void call(Communicator& comm, Collective c, const float* send, float* recv, size_t count,
          bool in_place = false) {
  if (in_place) send = recv;
  switch (c) {
    case Collective::kAllReduce:
      comm.all_reduce(send, recv, count, DataType::kF32, ReduceOp::kSum);
      break;
    case Collective::kReduceScatter:
      comm.reduce_scatter(send, recv, count, DataType::kF32, ReduceOp::kSum);
      break;
    case Collective::kAllGather:
      comm.all_gather(send, recv, count, DataType::kF32);
      break;
    case Collective::kBroadcast:
      comm.broadcast(send, recv, count, DataType::kF32, 0);
      break;
    case Collective::kReduce:
      comm.reduce(send, recv, count, DataType::kF32, ReduceOp::kSum, 0);
      break;
    case Collective::kGather:
      comm.gather(send, recv, count, DataType::kF32, 0);
      break;
    case Collective::kScatter:
      comm.scatter(send, recv, count, DataType::kF32, 0);
      break;
    default:
      break;
  }
}

double max_over_ranks(Communicator& comm, double v) {
  double out = 0;
  comm.all_reduce(&v, &out, 1, DataType::kF64, ReduceOp::kMax);
  return out;
}

// The sizes measured: 8 B, 32 B, 128 B, 512 B, then twice as dense up to `max_bytes`. The
// small-message paths end at a size (4 KiB, 32 KiB) and the caches at others, and there the
// curves bend; a straight line across 4x misled the selector (np=2 broadcast at 16 MiB; np=2
// all_gather at 4 KiB: direct predicted 0.92 us, 1.19 measured, fanout 0.87 and 0.89).
std::vector<size_t> tune_sizes(size_t max_bytes, bool probe) {
  std::vector<size_t> sizes;
  if (probe) {  // a few sizes across the form's two terms: latency, the cache sizes, bandwidth
    for (size_t b : {size_t(8), size_t(1) << 10, size_t(8) << 10, size_t(32) << 10,
                     size_t(256) << 10, size_t(1) << 20, size_t(16) << 20})
      if (b < max_bytes) sizes.push_back(b);
    sizes.push_back(max_bytes);
    return sizes;
  }
  for (size_t b = 8; b < max_bytes; b *= b < 512 ? 4 : 2) sizes.push_back(b);
  sizes.push_back(max_bytes);
  return sizes;
}

// Times the algorithms of the collectives on one communicator; every rank runs it alike.
class Tuner {
 public:
  Tuner(Communicator& comm, const Options& o)
      : comm_(comm),
        o_(o),
        n_(comm.size()),
        sizes_(tune_sizes(o.probe ? std::min<size_t>(o.max_bytes, size_t(16) << 20) : o.max_bytes,
                          o.probe)) {
    // Sized for the largest size measured (--probe stops at 16 MiB).
    const size_t max_elems = sizes_.back() / sizeof(float) + 1;
    // A size counts the whole buffer of reduce_scatter and all_gather, but one rank's part of
    // gather's and scatter's: only those two need n times the largest size (np=8 at 256 MiB
    // would otherwise hold 4 GiB per rank).
    const size_t ranks = static_cast<size_t>(n_);
    const size_t send_elems = max_elems * (measures(Collective::kScatter) ? ranks : 1);
    const size_t recv_elems = max_elems * (measures(Collective::kGather) ? ranks : 1);
    if (o.device) {
      device_send_ = gpu::DeviceBuffer(send_elems * sizeof(float));
      device_recv_ = gpu::DeviceBuffer(recv_elems * sizeof(float));
      gpu::memset_async(device_send_.data(), 0, device_send_.bytes(), gpu::Stream{});
      gpu::memset_async(device_recv_.data(), 0, device_recv_.bytes(), gpu::Stream{});
      gpu::stream_synchronize(gpu::Stream{});
      send_ptr_ = static_cast<float*>(device_send_.data());
      recv_ptr_ = static_cast<float*>(device_recv_.data());
    } else {
      send_.assign(send_elems, 1.0f);
      recv_.resize(recv_elems);
      send_ptr_ = send_.data();
      recv_ptr_ = recv_.data();
    }
  }

  // Settles first: pages in the buffers, wakes the cores, fills the caches.
  void settle() {
    const auto until = Clock::now() + std::chrono::milliseconds(200);
    const size_t max_elems = sizes_.back() / sizeof(float) + 1;
    int go = 1;
    while (go) {
      call(comm_, Collective::kAllReduce, send_ptr_, recv_ptr_,
           std::min<size_t>(1024, max_elems));  // --max-bytes below 4 KiB: a smaller buffer
      go = max_over_ranks(comm_, Clock::now() < until ? 1.0 : 0.0) > 0 ? 1 : 0;
    }
  }

  // Every wanted algorithm of `c` at every size, into `measured`: one (algorithm, size) at a
  // time, the algorithms of a size in turn, so that a disturbance of the machine lands on
  // neighbouring points of different curves rather than on one whole curve.
  void measure_collective(Collective c, MeasuredTable& measured) {
    std::vector<AlgorithmEstimate> algos =
        comm_.explain(c, 8, o_.device ? BufferMemory::kDevice : BufferMemory::kHost);
    std::erase_if(algos, [&](const AlgorithmEstimate& e) { return !wanted(e.algorithm); });
    if (algos.empty()) return;
    for (bool in_place : {false, true}) {
      // In place too where the selector chooses by it (all_reduce, broadcast; the probe only
      // all_reduce's, the in-place call a training step makes most).
      if (in_place && !(o_.probe ? probed_in_place(c) : chosen_in_place(c))) continue;
      std::vector<std::vector<TunePoint>> curves(algos.size());
      for (size_t bytes : sizes_)
        for (size_t i = 0; i < algos.size(); ++i)
          curves[i].push_back(
              {bytes, measure(c, algos[i].algorithm,
                              count_for_selection_bytes(c, bytes, DataType::kF32, n_), in_place)});
      for (size_t i = 0; i < algos.size(); ++i)
        measured.add(n_, c, algos[i].algorithm, std::move(curves[i]), in_place);
    }
    if (comm_.rank() == 0)
      std::fprintf(stderr, "chorus-tune: np=%d %s measured\n", n_,
                   std::string(to_string(c)).c_str());
  }

  bool wanted(const std::string& name) const {
    return o_.algos.empty() || std::find(o_.algos.begin(), o_.algos.end(), name) != o_.algos.end();
  }

 private:
  using Clock = std::chrono::steady_clock;

  bool measures(Collective c) const {
    return std::find(o_.colls.begin(), o_.colls.end(), c) != o_.colls.end();
  }

  // The median of 5 timed blocks of `algorithm`, the slowest rank's time per call.
  double measure(Collective c, const std::string& algorithm, size_t count, bool in_place) {
    comm_.set_algorithm(algorithm);
    // Iterations per block: enough for ~3 ms, agreed on by all ranks.
    const auto t0 = Clock::now();
    call(comm_, c, send_ptr_, recv_ptr_, count, in_place);
    call(comm_, c, send_ptr_, recv_ptr_, count, in_place);
    const double first_us =
        std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 2;
    comm_.set_algorithm("auto");
    const double est = max_over_ranks(comm_, first_us);
    const int iters = static_cast<int>(std::clamp(3000.0 / std::max(est, 0.05), 1.0, 20000.0));
    std::vector<double> blocks;
    for (int b = 0; b < 5; ++b) {
      comm_.set_algorithm(algorithm);
      comm_.barrier();
      const auto start = Clock::now();
      for (int i = 0; i < iters; ++i) call(comm_, c, send_ptr_, recv_ptr_, count, in_place);
      const double us =
          std::chrono::duration<double, std::micro>(Clock::now() - start).count() / iters;
      comm_.set_algorithm("auto");
      blocks.push_back(max_over_ranks(comm_, us));
    }
    std::sort(blocks.begin(), blocks.end());
    return blocks[blocks.size() / 2];
  }

  Communicator& comm_;
  const Options& o_;
  const int n_;
  const std::vector<size_t> sizes_;
  std::vector<float> send_, recv_;               // host buffers
  gpu::DeviceBuffer device_send_, device_recv_;  // --device
  float* send_ptr_ = nullptr;                    // the buffers the calls use
  float* recv_ptr_ = nullptr;
};

bool write_file(const std::string& path, const std::string& header, const std::string& text) {
  const auto dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir);
  std::ofstream f(path);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  f << "# chorus " << header << " for " << host << " (written by chorus-tune)\n" << text;
  if (!f.good()) {
    std::fprintf(stderr, "chorus-tune: cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

int fit(const Options& o) {
  const std::string text = fit_costs_of_table(o.fit);
  if (o.cost_out.empty()) {
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  return write_file(o.cost_out, "cost constants fitted to " + o.fit, text) ? 0 : 1;
}

// Writes the run's fitted constants into the cost file and (not for --probe) its curves into the
// table file (rank 0), keeping the other world sizes' entries of existing files and replacing this
// run's.
int write_results(const Options& o, int n, std::string_view link, const MeasuredTable& measured) {
  const std::string cost_path = o.cost_out.empty() ? default_cost_path() : o.cost_out;
  if (!write_file(cost_path,
                  "cost constants (<link> <np> <collective> <algorithm> <band from bytes> "
                  "<alpha us per step> <beta us per MiB>)",
                  measured.fit_costs_into(read_file(cost_path), link)))
    return 1;
  std::fprintf(stderr, "chorus-tune: wrote the %.*s constants of world size %d to %s\n",
               static_cast<int>(link.size()), link.data(), n, cost_path.c_str());
  if (o.print) std::fputs(measured.format().c_str(), stdout);
  if (o.probe || o.device) return 0;
  const std::string path = o.out.empty() ? default_tune_path() : o.out;
  if (!write_file(path, "tune table (median us per call)",
                  measured.merge_into(read_file(path), n, o.colls, o.algos)))
    return 1;
  std::fprintf(stderr, "chorus-tune: wrote world size %d to %s\n", n, path.c_str());
  return 0;
}

// --device: this rank's GPU made current before the communicator exists. False (with the reason,
// from every rank: they are refused alike) when there is none.
bool use_device() {
  const gpu::Devices devices = gpu::probe_devices();
  if (devices.count == 0) {
    std::fprintf(stderr, "chorus-tune: --device: no GPU: %s\n", devices.reason.c_str());
    return false;
  }
  gpu::set_device(local_device_index(devices.count));
  return true;
}

int tune(const Options& o) {
  if (o.device && !use_device()) return 2;
  // chorus-tune measures itself: the host probe of a communicator made here would only be
  // replaced.
  ::setenv("CHORUS_COST_PROBE", "off", 1);
  Communicator comm = Communicator::from_env();
  if (comm.size() < 2) {
    std::fprintf(stderr, "chorus-tune: needs at least 2 ranks (chorus-run -n 2 chorus-tune)\n");
    return 2;
  }
  const BufferMemory memory = o.device ? BufferMemory::kDevice : BufferMemory::kHost;
  if (o.device && comm.priced_link(memory) != "ipc") {  // the same on every rank
    if (comm.rank() == 0)
      std::fprintf(stderr,
                   "chorus-tune: --device: device buffers move by pinned-host staging here "
                   "(CHORUS_GPU_PATH, docs/GPU.md), where the host algorithms run on host memory "
                   "and are chosen by the host's constants: run chorus-tune without --device\n");
    return 2;
  }
  Tuner tuner(comm, o);
  tuner.settle();
  MeasuredTable measured;
  for (Collective c : o.colls) tuner.measure_collective(c, measured);
  if (measured.empty()) {  // the same on every rank
    if (comm.rank() == 0)
      std::fprintf(stderr, "chorus-tune: --algos names no algorithm of the collectives measured\n");
    return 2;
  }
  if (comm.rank() != 0) return 0;
  return write_results(o, comm.size(), comm.priced_link(memory), measured);
}

}  // namespace
}  // namespace chorus

int main(int argc, char** argv) {
  const chorus::Options o = chorus::parse(argc, argv);
  try {
    if (!o.fit.empty()) return chorus::fit(o);
    return o.show ? chorus::show(o) : chorus::tune(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chorus-tune: %s\n", e.what());
    return 1;
  }
}
