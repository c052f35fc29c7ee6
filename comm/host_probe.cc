#include "host_probe.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "algo/cost_model.h"
#include "chorus/communicator.h"
#include "chorus/config.h"
#include "chorus/error.h"
#include "chorus/log.h"
#include "chorus/selection_bytes.h"
#include "chorus/tune_table.h"

namespace chorus {
namespace {

const StringKnob kCostProbe{"CHORUS_COST_PROBE", "auto",
                            "auto = the first communicator on a host without fitted cost "
                            "constants (no CHORUS_COST_FILE, no cache file, CHORUS_TUNE=on) "
                            "measures its collectives briefly, fits the cost model and caches "
                            "it per host; off = the model's defaults until chorus-tune runs"};

// The calls measured: the collectives a trainer calls most, at two sizes in each of the cost
// model's bands (algo::kBands: the small-message paths, a call that stays in cache, memory
// bandwidth), so that each band's alpha and beta are fitted (one point fixes only one of them).
constexpr Collective kProbed[] = {Collective::kAllReduce, Collective::kReduceScatter,
                                  Collective::kAllGather, Collective::kBroadcast};
// all_reduce is measured in place too (algo::probed_in_place): the selector chooses it by its
// in-place constants, and in place its single-copy paths cost more (algo/cost_model.h).
// The top band's second point lies past the caches a call's buffers fit in at 1-2 MiB: fitted
// from 1 and 2 MiB, its beta was a cache's, and all-reduce at 16 MiB chose direct (9.6 ms)
// over two-shot (5.7 ms) on 2 ranks of a Zen 3 host.
constexpr size_t kSizes[] = {
    8, size_t(8) << 10, size_t(64) << 10, size_t(256) << 10, size_t(1) << 20, size_t(8) << 20};
constexpr size_t kMaxBytes = size_t(8) << 20;
constexpr int kBlocks = 3;  // timed blocks per point: their median is the point

// Calls per block: a few where a call takes microseconds, one from 1 MiB on. Fixed by size, so
// that the ranks need not agree on it (every agreement is a wait, and on a loaded host each
// wait may cost a time slice).
int calls_per_block(size_t bytes) {
  return bytes <= (size_t(8) << 10)    ? 16
         : bytes <= (size_t(64) << 10) ? 4
         : bytes < (size_t(1) << 20)   ? 2
                                       : 1;
}
constexpr std::chrono::seconds kStaleLock{60};

// In place: `send` is ignored and `recv` is both.
void call(Communicator& comm, Collective c, const float* send, float* recv, size_t count,
          bool in_place) {
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
    default:
      break;
  }
}

// One point: one warm-up call, then kBlocks blocks of `algorithm`, this rank's time per call in
// each appended to `times`. The collectives keep the ranks in step; no barrier between blocks.
void measure(Communicator& comm, Collective c, const std::string& algorithm, size_t bytes,
             bool in_place, const float* send, float* recv, std::vector<double>& times) {
  using Clock = std::chrono::steady_clock;
  const size_t count = count_for_selection_bytes(c, bytes, DataType::kF32, comm.size());
  const int calls = calls_per_block(bytes);
  comm.set_algorithm(algorithm);
  call(comm, c, send, recv, count, in_place);
  for (int b = 0; b < kBlocks; ++b) {
    const auto start = Clock::now();
    for (int i = 0; i < calls; ++i) call(comm, c, send, recv, count, in_place);
    times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() /
                    calls);
  }
  comm.set_algorithm("auto");
}

// Writes `text` to `path` through a temporary file in the same directory renamed over it: a
// concurrent reader sees the old file or the new one, never a part, and of two writers the later
// rename wins whole. False (errno set) when the directory cannot be written.
bool write_atomically(const std::string& path, const std::string& text) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    f.flush();
    if (!f.good()) {
      ::unlink(tmp.c_str());
      return false;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    errno = e;
    return false;
  }
  return true;
}

std::string host_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

}  // namespace

std::string host_probe_skipped(const ProbeConditions& c) {
  const std::string mode = kCostProbe.get();
  CHORUS_ARG_CHECK(mode == "auto" || mode == "off", "CHORUS_COST_PROBE='", mode,
                   "' (use auto or off)");
  if (mode == "off") return "CHORUS_COST_PROBE=off";
  if (!c.model_defaults)
    return "constants are named (CHORUS_COST_FILE), cached, inherited or off (CHORUS_TUNE=off)";
  if (c.table_named) return "a tune table is named (CHORUS_TUNE_FILE, CHORUS_TUNE=builtin)";
  if (c.forced) return "an algorithm is forced (CHORUS_ALGO)";
  if (c.deterministic) return "deterministic reductions";
  if (c.world_size < 2 || c.hosts != 1 || !c.shm) return "not 2 or more ranks on one host over shm";
  return {};
}

HostProbeLock HostProbeLock::try_acquire(const std::string& cache_path) {
  const std::string path = cache_path + ".probing";
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      const std::string me = std::to_string(::getpid()) + "\n";
      [[maybe_unused]] const ssize_t n = ::write(fd, me.data(), me.size());
      ::close(fd);
      HostProbeLock lock;
      lock.path_ = path;
      return lock;
    }
    if (errno != EEXIST) break;
    // A lock left by a job that died while probing is taken over after a while.
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) continue;  // released meanwhile: try again
    if (std::time(nullptr) - st.st_mtime < kStaleLock.count()) break;
    ::unlink(path.c_str());
  }
  return {};
}

HostProbeLock& HostProbeLock::operator=(HostProbeLock&& o) noexcept {
  if (this != &o) {
    if (held()) ::unlink(path_.c_str());
    path_ = std::move(o.path_);
    o.path_.clear();
  }
  return *this;
}

HostProbeLock::~HostProbeLock() {
  if (held()) ::unlink(path_.c_str());
}

std::string probe_host_costs(Communicator& comm, const std::string& cache_path,
                             HostProbeLock& lock) {
  const auto start = std::chrono::steady_clock::now();
  const int n = comm.size();
  std::vector<float> send(kMaxBytes / sizeof(float) + 1, 1.0f), recv(send.size());
  struct Curve {
    Collective coll;
    std::string algorithm;
    bool in_place = false;
  };
  std::vector<Curve> curves;
  std::vector<double> times;  // per curve, size and block: this rank's us per call
  for (Collective c : kProbed)
    for (bool in_place : {false, true}) {
      if (in_place && !algo::probed_in_place(c)) continue;
      // Every algorithm that can run here (explain() lists them alike on every rank).
      for (const AlgorithmEstimate& e : comm.explain(c, 8)) {
        curves.push_back({c, e.algorithm, in_place});
        for (size_t bytes : kSizes)
          measure(comm, c, e.algorithm, bytes, in_place, send.data(), recv.data(), times);
      }
    }
  // The slowest rank's time of each block, once for the whole probe; a point is the median block.
  std::vector<double> slowest(times.size());
  comm.all_reduce(times.data(), slowest.data(), times.size(), DataType::kF64, ReduceOp::kMax);
  MeasuredTable measured;
  auto block = slowest.begin();
  for (const Curve& k : curves) {
    std::vector<TunePoint> curve;
    for (size_t bytes : kSizes) {
      std::sort(block, block + kBlocks);
      curve.push_back({bytes, *(block + kBlocks / 2)});
      block += kBlocks;
    }
    measured.add(n, k.coll, k.algorithm, std::move(curve), k.in_place);
  }
  // Rank 0 fits and caches; every rank takes its text, so that all choose alike.
  std::string text;
  if (comm.rank() == 0) {
    text = measured.fit_costs_into({}, comm.priced_link());
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::ostringstream file;
    file << "# chorus cost constants for " << host_name() << " (the probe of the first job, np "
         << n << ", " << static_cast<int>(ms) << " ms; chorus-tune refreshes them)\n"
         << text;
    if (write_atomically(cache_path, file.str()))
      CHORUS_INFO(kLogTune, "probed this host's collectives at ", n, " ranks in ",
                  static_cast<int>(ms), " ms; constants cached in ", cache_path);
    else
      CHORUS_WARN(kLogTune, "cannot write the probed cost constants to ", cache_path, " (",
                  std::strerror(errno),
                  "); this job uses them, the next one probes again "
                  "(CHORUS_COST_PROBE=off: the defaults)");
  }
  // The cache is written (or cannot be): the next job loads it, or probes again.
  lock = HostProbeLock();
  int64_t size = static_cast<int64_t>(text.size());
  comm.broadcast(&size, &size, 1, DataType::kI64, 0);
  text.resize(static_cast<size_t>(size));
  if (size > 0) comm.broadcast(text.data(), text.data(), text.size(), DataType::kU8, 0);
  return text;
}

}  // namespace chorus
