// chorus-copy-roofline: how fast this machine can fill P result buffers from one shared source,
// the copying that a broadcast to P receivers (or an all-gather over P ranks) cannot avoid, with
// nothing else in the way: no messages, no waiting, no system calls.
//
// P processes (fork) each own an S-byte destination and copy the whole of one S-byte source
// (MAP_SHARED, written once before) into it, ITERS times, all started together; each begins at
// rank / P of the way in and wraps round (as chorus's single-copy readers do), in 1 MiB pieces.
// The time per round is the wall time of all of them over ITERS. Two store kinds:
//   stream  kernels::copy_stream (non-temporal stores: no read for ownership), what chorus uses
//           for large results;
//   cached  memcpy (each store first reads its line), what a copy in the kernel
//           (process_vm_readv) does.
// With --ring the P processes copy out of a shared ring of 8 x 256 KiB that one more process
// fills from the source chunk by chunk, each chunk reused once every reader is done with it: the
// source is read once however many copy it, as a broadcast root could hand one buffer to all its
// receivers (a model of that, with its waiting: spin, then yield).
// With --all-reduce each of the P processes does the work of one rank of chorus's ring
// all-reduce over shared-memory FIFOs (float sum; the input all 1.0, and every result element
// checked to be P at the end). Per slice of P segments of 256 KiB (the FIFO ring's chunk), in
// 64 KiB slots: it copies its own segment into slots (the send); P - 1 times it reduces the slots
// it receives with its input into the slots it sends on, storing each to its result (receive,
// reduce, forward: with streaming stores in one pass, kernels::reduce_stream, as chorus does);
// P - 1 times it stores the slots it receives to its result, copying them on but the last time
// (the all-gather). That is every copy and reduction a rank does when it cannot map its peers'
// buffers. Alone, the slots are the process's own (8, in its cache): the work with nothing moving
// between cores. With --shared they are 8-slot FIFOs in shared memory from each process to the
// next, with counts of slots written and read (wait: spin, then yield): a ring all-reduce as lean
// as it can be, with every slot crossing from one core's cache to another.
// --warmup W rounds run before the clock starts (default 1), as a benchmark's warm-up calls: the
// first rounds run slower while the buffers' lines leave the state their first writes left.
// docs/perf/collectives.md divides a collective's required copies by these rates to say how far a
// target is from what the machine allows. Usage:
//   chorus-copy-roofline [--procs P] [--bytes SIZE] [--iters N] [--store stream|cached]
//                        [--ring | --all-reduce [--shared] [--warmup W]]
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/kernels/cpu.h"

namespace {

constexpr size_t kPiece = size_t{1} << 20;
constexpr size_t kRingChunk = size_t{256} << 10;
constexpr uint64_t kRingDepth = 8;
constexpr size_t kSegment = size_t{256} << 10;  // --all-reduce: the FIFO ring's chunk
constexpr size_t kSlot = size_t{64} << 10;      // ... a FIFO slot
constexpr size_t kBlock = size_t{16} << 10;  // cached: reduced into the slot, then copied, in these

struct alignas(64) Counter {
  std::atomic<uint64_t> value;
};

// Shared by all the processes.
struct Control {
  std::atomic<int> ready;  // processes set up and waiting for `go`
  std::atomic<int> go;
  std::atomic<int> done;  // copying processes finished
  // When the last copying process finished (steady_clock, which is CLOCK_MONOTONIC: one clock for
  // all processes). The parent sleeps in wait() meanwhile, so that it takes no turn on the cores.
  std::atomic<int64_t> finished;
};

template <class Pred>
void wait_until(Pred done) {
  for (int spins = 0; !done();) {
    if (++spins > 64) {
      sched_yield();
    } else {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
  }
}

[[noreturn]] void usage(int code) {
  std::fprintf(code == 0 ? stdout : stderr,
               "usage: chorus-copy-roofline [--procs P] [--bytes SIZE] [--iters N] "
               "[--store stream|cached]\n"
               "                            [--ring | --all-reduce [--shared] [--warmup W]]\n"
               "P processes each copy one shared SIZE-byte source into their own buffer, N times,\n"
               "started together (defaults: P=2, SIZE=64M, N=5, stream). Prints the time per\n"
               "round and SIZE / time, the bandwidth a broadcast to P receivers could reach.\n"
               "--ring: one more process fills a shared 2 MiB ring from the source and the P\n"
               "processes copy out of it (the source read once; its copies are not counted).\n"
               "--all-reduce: each process does the copies and reductions of one rank of a ring\n"
               "all-reduce over FIFOs (float sum) on its own SIZE-byte input and result, through\n"
               "8 slots of 64 KiB of its own (P >= 2). SIZE / time is its algbw.\n"
               "  --shared: through 8-slot FIFOs in shared memory, each process to the next.\n"
               "  --warmup W: rounds before the clock starts (default 1).\n");
  std::exit(code);
}

size_t parse_size(const char* text) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  size_t mult = 1;
  if (*end == 'K' || *end == 'k')
    mult = size_t{1} << 10, ++end;
  else if (*end == 'M' || *end == 'm')
    mult = size_t{1} << 20, ++end;
  else if (*end == 'G' || *end == 'g')
    mult = size_t{1} << 30, ++end;
  if (end == text || *end != '\0' || v == 0) {
    std::fprintf(stderr, "chorus-copy-roofline: bad size '%s'\n", text);
    usage(2);
  }
  return static_cast<size_t>(v) * mult;
}

// What every mode stores results with: streaming stores (--store stream) or memcpy.
void copy_bytes(bool stream, std::byte* dst, const std::byte* src, size_t n) {
  if (stream)
    chorus::kernels::copy_stream(dst, src, n);
  else
    std::memcpy(dst, src, n);
}

void* map_shared(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("chorus-copy-roofline: mmap");
    std::exit(1);
  }
  return p;
}

// --all-reduce --shared: the FIFO process p writes and process p + 1 (mod P) reads; counts of
// slots written and read, each on its own line, then kFifoSlots slots.
struct Fifo {
  Counter written, read;
  std::byte* slots;  // in the shared mapping
};
constexpr uint64_t kFifoSlots = 8;  // chorus's default FIFO depth (CHORUS_SHM_DEPTH)
// A process writes a whole segment of slots (its send) before it reads any: with room for two
// segments, a send never waits on a reader that is itself still sending.
static_assert(kFifoSlots >= 2 * (kSegment / kSlot));

// One ring all-reduce rank's work (the header), `iters` times after `warmup` untimed rounds (a
// benchmark's warm-up calls), on this process's own input (all 1.0f) into `dst`, calling done()
// after the last; true if every result element is `procs`, as the ring's would be.
// `out` and `in` are the FIFOs to the next process and from the one before (--shared), or null:
// then the slots are this process's own, each phase reading the slots the one before wrote.
template <class Go, class Done>
bool all_reduce_work(std::byte* dst, size_t bytes, int procs, int rank, int warmup, int iters,
                     bool stream, Fifo* out, Fifo* in_fifo, Go&& await_go, Done&& done) {
  constexpr size_t kRun = kSegment / kSlot;  // slots per segment
  auto* in = static_cast<std::byte*>(std::aligned_alloc(4096, bytes));
  auto* own = static_cast<std::byte*>(std::aligned_alloc(4096, kFifoSlots * kSlot));
  if (in == nullptr || own == nullptr) _exit(1);
  const float one = 1.0f;
  for (size_t i = 0; i < bytes; i += sizeof one) std::memcpy(in + i, &one, sizeof one);
  // Slots: the next one to write, published when written; the next one to read, released when
  // read. Alone, slot i is own[i % 8], read back in the order written.
  uint64_t wrote = 0, took = 0;
  const auto next_out = [&]() -> std::byte* {
    if (out == nullptr) return own + wrote % kFifoSlots * kSlot;
    wait_until(
        [&] { return wrote - out->read.value.load(std::memory_order_acquire) < kFifoSlots; });
    return out->slots + wrote % kFifoSlots * kSlot;
  };
  const auto publish = [&] {
    ++wrote;
    if (out != nullptr) out->written.value.store(wrote, std::memory_order_release);
  };
  const auto next_in = [&]() -> const std::byte* {
    if (in_fifo == nullptr) return own + took % kFifoSlots * kSlot;
    wait_until([&] { return in_fifo->written.value.load(std::memory_order_acquire) > took; });
    return in_fifo->slots + took % kFifoSlots * kSlot;
  };
  const auto release = [&] {
    ++took;
    if (in_fifo != nullptr) in_fifo->read.value.store(took, std::memory_order_release);
  };
  const auto seg = [&](size_t base, int i) {  // segment i (mod procs) of the slice at base
    return base + static_cast<size_t>((i % procs + procs) % procs) * kSegment;
  };
  const auto round = [&] {
    for (size_t base = 0; base < bytes; base += kSegment * static_cast<size_t>(procs)) {
      for (size_t k = 0; k < kRun; ++k) {  // the send
        std::memcpy(next_out(), in + seg(base, rank) + k * kSlot, kSlot);
        publish();
      }
      for (int s = 0; s + 1 < procs; ++s)  // receive, reduce, forward
        for (size_t k = 0; k < kRun; ++k) {
          const std::byte* from = next_in();
          std::byte* to = next_out();
          const size_t off = seg(base, rank - s - 1) + k * kSlot;
          if (stream) {  // each line computed once, streamed to the result and kept in the slot
            chorus::kernels::reduce_stream(chorus::DataType::kF32, chorus::ReduceOp::kSum,
                                           dst + off, in + off, from, kSlot / sizeof(float), to);
          } else {
            for (size_t b = 0; b < kSlot; b += kBlock) {
              chorus::kernels::reduce(chorus::DataType::kF32, chorus::ReduceOp::kSum, to + b,
                                      in + off + b, from + b, kBlock / sizeof(float));
              std::memcpy(dst + off + b, to + b, kBlock);
            }
          }
          publish();
          release();
        }
      for (int s = 0; s + 1 < procs; ++s)  // the all-gather's receives, forwarded but the last
        for (size_t k = 0; k < kRun; ++k) {
          const std::byte* from = next_in();
          std::byte* const to = dst + seg(base, rank - s) + k * kSlot;
          if (s + 2 < procs) {
            std::byte* fwd = next_out();
            std::memcpy(fwd, from, kSlot);
            copy_bytes(stream, to, fwd, kSlot);
            publish();
          } else {
            copy_bytes(stream, to, from, kSlot);
          }
          release();
        }
    }
  };
  for (int it = 0; it < warmup; ++it) round();
  await_go();
  for (int it = 0; it < iters; ++it) round();
  done();
  const float want = static_cast<float>(procs);
  bool ok = true;
  for (size_t i = 0; i < bytes && ok; i += sizeof want)
    ok = std::memcmp(dst + i, &want, sizeof want) == 0;
  std::free(in);
  std::free(own);
  return ok;
}

struct Args {
  int procs = 2, iters = 5, warmup = 1;
  size_t bytes = size_t{64} << 20;
  bool stream = true, ring = false, all_reduce = false, shared = false;
};

Args parse_args(int argc, char** argv) {
  Args a;
  bool warmup_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage(2);
      return argv[++i];
    };
    if (flag == "-h" || flag == "--help")
      usage(0);
    else if (flag == "--procs")
      a.procs = std::atoi(value());
    else if (flag == "--bytes")
      a.bytes = parse_size(value());
    else if (flag == "--iters")
      a.iters = std::atoi(value());
    else if (flag == "--warmup")
      a.warmup = std::atoi(value()), warmup_given = true;
    else if (flag == "--store") {
      const std::string_view s = value();
      if (s != "stream" && s != "cached") usage(2);
      a.stream = s == "stream";
    } else if (flag == "--ring")
      a.ring = true;
    else if (flag == "--all-reduce")
      a.all_reduce = true;
    else if (flag == "--shared")
      a.shared = true;
    else
      usage(2);
  }
  if (a.procs < 1 || a.procs > 256 || a.iters < 1 || (a.ring && a.all_reduce) ||
      (a.all_reduce && a.procs < 2) || a.warmup < 0 || (warmup_given && !a.all_reduce) ||
      (a.shared && !a.all_reduce))
    usage(2);
  // Whole pieces; --all-reduce: `procs` of them, so that its slices of `procs` segments are whole.
  const size_t unit = kPiece * (a.all_reduce ? static_cast<size_t>(a.procs) : 1);
  a.bytes = (a.bytes + unit - 1) / unit * unit;
  return a;
}

// What the processes share, mapped before they fork.
struct Shared {
  std::byte* source = nullptr;  // the copies' source (not --all-reduce)
  Control* control = nullptr;
  // --ring: the ring, chunks written into it ([0]) and chunks each reader consumed ([1 + p]).
  std::byte* ring_data = nullptr;
  Counter* counters = nullptr;
  uint64_t ring_chunks = 0;
  Fifo* fifos = nullptr;  // --all-reduce --shared: process p's FIFO to p + 1
};

Shared map_all(const Args& a) {
  Shared sh;
  if (!a.all_reduce) {
    sh.source = static_cast<std::byte*>(map_shared(a.bytes));
    std::memset(sh.source, 0x3c, a.bytes);
  }
  sh.control = static_cast<Control*>(map_shared(sizeof(Control)));
  if (a.ring) {
    sh.ring_chunks = a.bytes / kRingChunk * static_cast<uint64_t>(a.iters);
    sh.ring_data = static_cast<std::byte*>(map_shared(kRingChunk * kRingDepth));
    sh.counters = static_cast<Counter*>(map_shared(sizeof(Counter) * (a.procs + 1)));
  }
  if (a.shared) {
    sh.fifos = static_cast<Fifo*>(map_shared(sizeof(Fifo) * static_cast<size_t>(a.procs)));
    auto* data =
        static_cast<std::byte*>(map_shared(kFifoSlots * kSlot * static_cast<size_t>(a.procs)));
    for (int p = 0; p < a.procs; ++p)
      sh.fifos[p].slots = data + kFifoSlots * kSlot * static_cast<size_t>(p);
  }
  return sh;
}

// The forked processes. One that fails makes the others wait forever (for its chunks, or for it
// to be ready): the parent then stops them all.
class Processes {
 public:
  explicit Processes(Control* control) : control_(control), parent_(getpid()) {}

  template <typename Body>
  void spawn(Body&& body) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("chorus-copy-roofline: fork");
      stop_all();
      std::exit(1);
    }
    if (pid == 0) {
      // A parent stopped from outside (a timeout, ^C) takes its spinning children with it.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent_) _exit(1);
      body();  // never returns
    }
    children_.push_back(pid);
  }

  void stop_all() {
    for (pid_t c : children_) ::kill(c, SIGKILL);
    while (::wait(nullptr) > 0) {
    }
  }

  // Starts the clock once every process is ready; waits for all. False (and all stopped) when
  // one failed.
  bool run(std::chrono::steady_clock::time_point* start) {
    const int processes = static_cast<int>(children_.size());
    while (control_->ready.load() < processes) {
      if (::waitpid(-1, nullptr, WNOHANG) > 0) {  // one ended before the start: it failed
        std::fprintf(stderr, "chorus-copy-roofline: a process failed to set up (out of memory?)\n");
        stop_all();
        return false;
      }
      usleep(1000);
    }
    *start = std::chrono::steady_clock::now();
    control_->go.store(1);
    for (int left = processes; left > 0; --left) {
      int status = 0;
      if (::wait(&status) < 0) break;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "chorus-copy-roofline: a copying process failed\n");
        stop_all();
        return false;
      }
    }
    return true;
  }

 private:
  Control* control_;
  pid_t parent_;
  std::vector<pid_t> children_;
};

void await_go(Control* control) {
  control->ready.fetch_add(1);
  while (control->go.load() == 0) sched_yield();
}

// A copying process is done: the last one stops the clock.
void finish(Control* control, int procs) {
  const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  if (control->done.fetch_add(1) + 1 == procs) control->finished.store(now);
}

// --ring: the one writer, filling the ring no faster than its slowest reader drains it.
[[noreturn]] void ring_writer(const Args& a, const Shared& sh) {
  await_go(sh.control);
  for (uint64_t i = 0; i < sh.ring_chunks; ++i) {
    if (i >= kRingDepth)
      wait_until([&] {
        for (int p = 0; p < a.procs; ++p)
          if (sh.counters[1 + p].value.load(std::memory_order_acquire) + kRingDepth <= i)
            return false;
        return true;
      });
    std::memcpy(sh.ring_data + i % kRingDepth * kRingChunk,
                sh.source + i % (a.bytes / kRingChunk) * kRingChunk, kRingChunk);
    sh.counters[0].value.store(i + 1, std::memory_order_release);
  }
  _exit(0);
}

// Process p: the ring all-reduce's work, or its copies (from the ring, or of the whole source
// starting at its own piece); exits 0 when its destination holds what it should.
[[noreturn]] void copier(const Args& a, const Shared& sh, int p) {
  auto* dst = static_cast<std::byte*>(std::aligned_alloc(4096, a.bytes));
  if (dst == nullptr) _exit(1);
  std::memset(dst, 0, a.bytes);  // fault the pages in before the clock starts
  if (a.all_reduce) {
    Fifo* out = sh.fifos == nullptr ? nullptr : &sh.fifos[p];
    Fifo* from = sh.fifos == nullptr ? nullptr : &sh.fifos[(p + a.procs - 1) % a.procs];
    const bool ok = all_reduce_work(
        dst, a.bytes, a.procs, p, a.warmup, a.iters, a.stream, out, from,
        [&] { await_go(sh.control); }, [&] { finish(sh.control, a.procs); });
    _exit(ok ? 0 : 3);
  }
  await_go(sh.control);
  if (a.ring) {
    for (uint64_t i = 0; i < sh.ring_chunks; ++i) {
      wait_until([&] { return sh.counters[0].value.load(std::memory_order_acquire) > i; });
      copy_bytes(a.stream, dst + i % (a.bytes / kRingChunk) * kRingChunk,
                 sh.ring_data + i % kRingDepth * kRingChunk, kRingChunk);
      sh.counters[1 + p].value.store(i + 1, std::memory_order_release);
    }
  } else {
    const size_t pieces = a.bytes / kPiece;
    const size_t first = pieces * static_cast<size_t>(p) / static_cast<size_t>(a.procs);
    for (int it = 0; it < a.iters; ++it)
      for (size_t k = 0; k < pieces; ++k) {
        const size_t off = (first + k) % pieces * kPiece;
        copy_bytes(a.stream, dst + off, sh.source + off, kPiece);
      }
  }
  finish(sh.control, a.procs);
  _exit(std::memcmp(dst, sh.source, a.bytes) == 0 ? 0 : 3);
}

void report(const Args& a, double sec) {
  if (a.all_reduce) {
    std::printf(
        "procs %d, %zu MiB each, %s stores, ring all-reduce work%s: %.2f ms per round, "
        "bytes / time %.2f GB/s\n",
        a.procs, a.bytes >> 20, a.stream ? "streaming" : "cached",
        a.shared ? " through shared FIFOs" : "", sec * 1e3,
        static_cast<double>(a.bytes) / sec / 1e9);
    return;
  }
  std::printf(
      "procs %d, %zu MiB each, %s stores%s: %.2f ms per round, %.2f GB/s of copies, "
      "bytes / time %.2f GB/s\n",
      a.procs, a.bytes >> 20, a.stream ? "streaming" : "cached",
      a.ring ? ", through a 2 MiB ring from one writer" : "", sec * 1e3,
      static_cast<double>(a.procs) * static_cast<double>(a.bytes) / sec / 1e9,
      static_cast<double>(a.bytes) / sec / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse_args(argc, argv);
  const Shared sh = map_all(a);
  Processes procs(sh.control);
  if (a.ring) procs.spawn([&] { ring_writer(a, sh); });
  for (int p = 0; p < a.procs; ++p) procs.spawn([&, p] { copier(a, sh, p); });
  std::chrono::steady_clock::time_point start;
  if (!procs.run(&start)) return 1;
  const std::chrono::steady_clock::duration elapsed =
      std::chrono::steady_clock::duration(sh.control->finished.load()) - start.time_since_epoch();
  report(a, std::chrono::duration<double>(elapsed).count() / a.iters);
  return 0;
}
