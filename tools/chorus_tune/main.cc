// chorus-tune: measures every algorithm of all_reduce, reduce_scatter, all_gather, broadcast,
// reduce, gather and scatter at sizes from 8 B up, on this machine with this many ranks, and writes the curves to
// the tune table the selector reads (comm/algo/tuner.h). Run it under a launcher:
//
//   chorus-run -n 2 chorus-tune            # writes ~/.cache/chorus/tune-<host>.txt
//   chorus-tune --show                     # the table in effect, with alpha/beta per curve
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "algo/tuner.h"
#include "chorus/communicator.h"
#include "chorus/config.h"
#include "chorus/error.h"

namespace chorus {
namespace {

constexpr const char* kUsage = R"(usage: chorus-run -n N chorus-tune [options]
       chorus-tune --show [--file FILE]

Measures every algorithm of all_reduce, reduce_scatter, all_gather, broadcast, reduce, gather and
scatter on this machine with N ranks (blocking calls, float32 sum, median of 5 timed blocks per size, the slowest
rank's time), at sizes 8 B, 32 B, 128 B, 512 B and x2 from there (where the small-message
paths end and the caches bend the curves) up to --max-bytes, and writes one curve per
(N, collective, algorithm) to the tune table. Where some peer is read single-copy, each algorithm
is also measured on the FIFO path ("ring/fifo": large messages copy through shared memory), and
the selector picks the path with the algorithm. Broadcast is measured in place as well
("broadcast/in-place" lines): the root of an in-place broadcast picks the path of its own sends
from those. Lines for other world sizes already in the file are kept, so run it once per world
size you use. Sizes are counted as chorus-bench counts them.

The selector (rank 0's table, shared with every rank) then picks, for each call, the algorithm
whose curve predicts the shortest time; chorus-bench --explain prints predicted beside measured.

  --out FILE         where to write (default ~/.cache/chorus/tune-<hostname>.txt, which every
                     job on this host then loads unless CHORUS_TUNE_FILE names another)
  --max-bytes SIZE   largest size measured, K/M/G suffixes allowed (default 64M)
  --colls LIST       comma-separated subset of the collectives above
  --algos LIST       comma-separated subset of the algorithms (as --sweep-algos names them:
                     ring, ring/fifo, fanout, ...); the file's other curves of these
                     collectives are kept, so a new algorithm can be added to a table
  --show             print the table in effect (or --file FILE), with latency (alpha, us) and
                     inverse bandwidth (beta, us per MiB) per curve; no launcher needed
  --print            also print the measured lines to stdout (rank 0)
  -h, --help         this text

Environment: CHORUS_TUNE_FILE (table to load), CHORUS_TUNE=off (fixed thresholds instead).
)";

struct Options {
  std::string out;
  std::string file;
  size_t max_bytes = 64 << 20;
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
    } else if (arg == "--max-bytes") {
      const std::string v = value();
      auto b = parse_size(v);
      if (!b || *b < 8) usage_error("--max-bytes expects a size of at least 8 bytes, got '" + v + "'");
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
        if (!algo::parse_variant(name)) usage_error("unknown algorithm '" + name + "' in --algos");
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
  return o;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

int show(const Options& o) {
  algo::TuneTable t = o.file.empty() ? algo::load_tune_table()
                                     : algo::TuneTable::parse(read_file(o.file), o.file);
  if (!algo::tuning_enabled()) std::printf("CHORUS_TUNE=off: fixed size thresholds\n");
  std::printf("tune table: %s\n", t.origin.empty() ? "(none)" : t.origin.c_str());
  if (t.empty()) {
    std::printf("(no curves: every world size uses fixed thresholds)\n");
    return 0;
  }
  std::printf("%4s  %-18s %-13s %12s %16s %7s\n", "np", "collective", "algo", "alpha (us)",
              "beta (us/MiB)", "points");
  std::istringstream lines(t.format());
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream f(line);
    int np;
    std::string coll, algo;
    f >> np >> coll >> algo;
    int points = 0;
    std::string p;
    while (f >> p) ++points;
    const bool in_place = coll.ends_with("/in-place");
    const std::string name = in_place ? coll.substr(0, coll.find('/')) : coll;
    for (int c = 0; c <= static_cast<int>(Collective::kSendRecv); ++c) {
      if (to_string(static_cast<Collective>(c)) != name) continue;
      auto ab = t.alpha_beta(np, static_cast<Collective>(c), *algo::parse_variant(algo), in_place);
      std::printf("%4d  %-18s %-13s %12.2f %16.1f %7d\n", np, coll.c_str(), algo.c_str(),
                  ab->first, ab->second, points);
    }
  }
  return 0;
}

// Elements per call for `bytes` counted as chorus-bench counts them.
size_t count_for(Collective c, size_t bytes, int n) {
  const size_t elems = std::max<size_t>(1, bytes / sizeof(float));
  if (c == Collective::kReduceScatter || c == Collective::kAllGather)
    return std::max<size_t>(1, elems / static_cast<size_t>(n));
  return elems;
}

// In place: send == recv (broadcast is the only collective measured so).
void call(Communicator& comm, Collective c, const float* send, float* recv, size_t count,
          bool in_place = false) {
  if (in_place) send = recv;
  switch (c) {
    case Collective::kAllReduce: comm.all_reduce(send, recv, count, DataType::kF32, ReduceOp::kSum); break;
    case Collective::kReduceScatter: comm.reduce_scatter(send, recv, count, DataType::kF32, ReduceOp::kSum); break;
    case Collective::kAllGather: comm.all_gather(send, recv, count, DataType::kF32); break;
    case Collective::kBroadcast: comm.broadcast(send, recv, count, DataType::kF32, 0); break;
    case Collective::kReduce: comm.reduce(send, recv, count, DataType::kF32, ReduceOp::kSum, 0); break;
    case Collective::kGather: comm.gather(send, recv, count, DataType::kF32, 0); break;
    case Collective::kScatter: comm.scatter(send, recv, count, DataType::kF32, 0); break;
    default: break;
  }
}

// A call never gets faster as it grows: noise that says otherwise (a descheduled block at a small
// size) is pooled away, least-squares (pool adjacent violators), so the curve is non-decreasing.
void make_non_decreasing(std::vector<algo::TuneTable::Point>& curve) {
  struct Block {
    double sum;
    int n;
  };
  std::vector<Block> blocks;
  for (const auto& p : curve) {
    blocks.push_back({p.us, 1});
    while (blocks.size() > 1 && blocks[blocks.size() - 2].sum / blocks[blocks.size() - 2].n >
                                    blocks.back().sum / blocks.back().n) {
      blocks[blocks.size() - 2].sum += blocks.back().sum;
      blocks[blocks.size() - 2].n += blocks.back().n;
      blocks.pop_back();
    }
  }
  size_t i = 0;
  for (const Block& b : blocks)
    for (int k = 0; k < b.n; ++k) curve[i++].us = b.sum / b.n;
}

double max_over_ranks(Communicator& comm, double v) {
  double out = 0;
  comm.all_reduce(&v, &out, 1, DataType::kF64, ReduceOp::kMax);
  return out;
}

int tune(const Options& o) {
  Communicator comm = Communicator::from_env();
  const int n = comm.size();
  if (n < 2) {
    std::fprintf(stderr, "chorus-tune: needs at least 2 ranks (chorus-run -n 2 chorus-tune)\n");
    return 2;
  }
  std::vector<size_t> sizes;
  // Twice as dense from 512 B: the small-message paths end at a size (4 KiB, 32 KiB) and the
  // caches at others, and there the curves bend; a straight line across 4x misled the selector
  // (np=2 broadcast at 16 MiB; np=2 all_gather at 4 KiB: direct predicted 0.92 us, 1.19
  // measured, fanout 0.87 and 0.89).
  for (size_t b = 8; b < o.max_bytes; b *= b < 512 ? 4 : 2) sizes.push_back(b);
  sizes.push_back(o.max_bytes);
  const size_t max_elems = o.max_bytes / sizeof(float) + 1;
  // A size counts the whole buffer of reduce_scatter and all_gather, but one rank's part of
  // gather's and scatter's: only those two need n times the largest size (np=8 at 256 MiB
  // would otherwise hold 4 GiB per rank).
  const auto measures = [&](Collective c) {
    return std::find(o.colls.begin(), o.colls.end(), c) != o.colls.end();
  };
  const size_t ranks = static_cast<size_t>(n);
  std::vector<float> send(max_elems * (measures(Collective::kScatter) ? ranks : 1), 1.0f);
  std::vector<float> recv(max_elems * (measures(Collective::kGather) ? ranks : 1));

  algo::TuneTable measured;
  using Clock = std::chrono::steady_clock;
  // Settle first: page in the buffers, wake both cores, fill the caches.
  {
    const auto until = Clock::now() + std::chrono::milliseconds(200);
    int go = 1;
    while (go) {
      call(comm, Collective::kAllReduce, send.data(), recv.data(),
           std::min<size_t>(1024, max_elems));  // --max-bytes below 4 KiB: a smaller buffer
      go = max_over_ranks(comm, Clock::now() < until ? 1.0 : 0.0) > 0 ? 1 : 0;
    }
  }
  // One (algorithm, size) at a time, the algorithms of a size in turn, so that a disturbance of
  // the machine lands on neighbouring points of different curves rather than on one whole curve.
  const auto measure = [&](Collective c, const std::string& algorithm, size_t count,
                           bool in_place) {
    comm.set_algorithm(algorithm);
    // Iterations per block: enough for ~3 ms, agreed on by all ranks.
    const auto t0 = Clock::now();
    call(comm, c, send.data(), recv.data(), count, in_place);
    call(comm, c, send.data(), recv.data(), count, in_place);
    const double first_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 2;
    comm.set_algorithm("auto");
    const double est = max_over_ranks(comm, first_us);
    const int iters = static_cast<int>(std::clamp(3000.0 / std::max(est, 0.05), 1.0, 20000.0));
    std::vector<double> blocks;
    for (int b = 0; b < 5; ++b) {
      comm.set_algorithm(algorithm);
      comm.barrier();
      const auto start = Clock::now();
      for (int i = 0; i < iters; ++i) call(comm, c, send.data(), recv.data(), count, in_place);
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / iters;
      comm.set_algorithm("auto");
      blocks.push_back(max_over_ranks(comm, us));
    }
    std::sort(blocks.begin(), blocks.end());
    return blocks[blocks.size() / 2];
  };
  const auto wanted = [&](const std::string& name) {
    return o.algos.empty() || std::find(o.algos.begin(), o.algos.end(), name) != o.algos.end();
  };
  for (Collective c : o.colls) {
    std::vector<AlgorithmEstimate> algos = comm.explain(c, 8);
    std::erase_if(algos, [&](const AlgorithmEstimate& e) { return !wanted(e.algorithm); });
    if (algos.empty()) continue;
    for (bool in_place : {false, true}) {
      if (in_place && c != Collective::kBroadcast) continue;
      std::vector<std::vector<algo::TuneTable::Point>> curves(algos.size());
      for (size_t bytes : sizes)
        for (size_t i = 0; i < algos.size(); ++i)
          curves[i].push_back(
              {bytes, measure(c, algos[i].algorithm, count_for(c, bytes, n), in_place)});
      for (size_t i = 0; i < algos.size(); ++i) {
        make_non_decreasing(curves[i]);
        measured.set(n, c, *algo::parse_variant(algos[i].algorithm), std::move(curves[i]),
                     in_place);
      }
    }
    if (comm.rank() == 0)
      std::fprintf(stderr, "chorus-tune: np=%d %s measured\n", n, std::string(to_string(c)).c_str());
  }
  if (measured.empty()) {  // the same on every rank
    if (comm.rank() == 0)
      std::fprintf(stderr, "chorus-tune: --algos names no algorithm of the collectives measured\n");
    return 2;
  }
  if (comm.rank() != 0) return 0;

  // Keep the other world sizes' lines of an existing table; replace this one's.
  const std::string path = o.out.empty() ? algo::default_tune_path() : o.out;
  std::string kept;
  {
    std::istringstream old(read_file(path));
    std::string line;
    while (std::getline(old, line)) {
      std::istringstream f(line);
      int np = 0;
      if (line.empty() || line[0] == '#' || !(f >> np)) continue;
      std::string coll, variant;
      f >> coll >> variant;
      if (coll.ends_with("/in-place")) coll.resize(coll.size() - std::string_view("/in-place").size());
      bool ours = false;
      for (Collective c : o.colls) ours |= coll == to_string(c);
      if (np == n && ours && wanted(variant)) continue;
      kept += line + "\n";
    }
  }
  const std::string text = measured.format();
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream f(path);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  f << "# chorus tune table for " << host << " (written by chorus-tune; median us per call)\n"
    << kept << text;
  if (!f.good()) {
    std::fprintf(stderr, "chorus-tune: cannot write %s\n", path.c_str());
    return 1;
  }
  if (o.print) std::fputs(text.c_str(), stdout);
  std::fprintf(stderr, "chorus-tune: wrote world size %d to %s\n", n, path.c_str());
  return 0;
}

}  // namespace
}  // namespace chorus

int main(int argc, char** argv) {
  const chorus::Options o = chorus::parse(argc, argv);
  try {
    return o.show ? chorus::show(o) : chorus::tune(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chorus-tune: %s\n", e.what());
    return 1;
  }
}
