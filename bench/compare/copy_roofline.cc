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
// docs/PERFORMANCE.md divides a collective's required copies by these rates to say how far a
// target is from what the machine allows. Usage:
//   chorus-copy-roofline [--procs P] [--bytes SIZE] [--iters N] [--store stream|cached] [--ring]
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
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
               "[--store stream|cached] [--ring]\n"
               "P processes each copy one shared SIZE-byte source into their own buffer, N times,\n"
               "started together (defaults: P=2, SIZE=64M, N=5, stream). Prints the time per\n"
               "round and SIZE / time, the bandwidth a broadcast to P receivers could reach.\n"
               "--ring: one more process fills a shared 2 MiB ring from the source and the P\n"
               "processes copy out of it (the source read once; its copies are not counted).\n");
  std::exit(code);
}

size_t parse_size(const char* text) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  size_t mult = 1;
  if (*end == 'K' || *end == 'k') mult = size_t{1} << 10, ++end;
  else if (*end == 'M' || *end == 'm') mult = size_t{1} << 20, ++end;
  else if (*end == 'G' || *end == 'g') mult = size_t{1} << 30, ++end;
  if (end == text || *end != '\0' || v == 0) {
    std::fprintf(stderr, "chorus-copy-roofline: bad size '%s'\n", text);
    usage(2);
  }
  return static_cast<size_t>(v) * mult;
}

void* map_shared(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("chorus-copy-roofline: mmap");
    std::exit(1);
  }
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  int procs = 2, iters = 5;
  size_t bytes = size_t{64} << 20;
  bool stream = true, ring = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage(2);
      return argv[++i];
    };
    if (a == "-h" || a == "--help") usage(0);
    else if (a == "--procs") procs = std::atoi(value());
    else if (a == "--bytes") bytes = parse_size(value());
    else if (a == "--iters") iters = std::atoi(value());
    else if (a == "--store") {
      const std::string_view s = value();
      if (s != "stream" && s != "cached") usage(2);
      stream = s == "stream";
    } else if (a == "--ring") ring = true;
    else usage(2);
  }
  if (procs < 1 || procs > 256 || iters < 1) usage(2);
  bytes = (bytes + kPiece - 1) / kPiece * kPiece;

  auto* source = static_cast<std::byte*>(map_shared(bytes));
  std::memset(source, 0x3c, bytes);
  auto* control = static_cast<Control*>(map_shared(sizeof(Control)));
  // --ring: the ring, chunks written into it ([0]) and chunks each reader consumed ([1 + p]).
  const uint64_t ring_chunks = bytes / kRingChunk * static_cast<uint64_t>(iters);
  auto* ring_data = ring ? static_cast<std::byte*>(map_shared(kRingChunk * kRingDepth)) : nullptr;
  auto* counters = ring ? static_cast<Counter*>(map_shared(sizeof(Counter) * (procs + 1))) : nullptr;
  auto copy = [&](std::byte* dst, const std::byte* src, size_t n) {
    if (stream)
      chorus::kernels::copy_stream(dst, src, n);
    else
      std::memcpy(dst, src, n);
  };
  // A process that fails makes the others wait forever (for its chunks, or for it to be ready):
  // the parent then stops them all.
  std::vector<pid_t> children;
  auto stop_all = [&] {
    for (pid_t c : children) ::kill(c, SIGKILL);
    while (::wait(nullptr) > 0) {
    }
  };
  auto spawn = [&](auto&& body) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("chorus-copy-roofline: fork");
      stop_all();
      std::exit(1);
    }
    if (pid == 0) body();  // never returns
    children.push_back(pid);
  };
  auto await_go = [&] {
    control->ready.fetch_add(1);
    while (control->go.load() == 0) sched_yield();
  };
  if (ring) {
    spawn([&] {  // the writer
      await_go();
      for (uint64_t i = 0; i < ring_chunks; ++i) {
        if (i >= kRingDepth)
          wait_until([&] {
            for (int p = 0; p < procs; ++p)
              if (counters[1 + p].value.load(std::memory_order_acquire) + kRingDepth <= i) return false;
            return true;
          });
        std::memcpy(ring_data + i % kRingDepth * kRingChunk,
                    source + i % (bytes / kRingChunk) * kRingChunk, kRingChunk);
        counters[0].value.store(i + 1, std::memory_order_release);
      }
      _exit(0);
    });
  }
  const int processes = procs + (ring ? 1 : 0);
  for (int p = 0; p < procs; ++p) spawn([&] {
    auto* dst = static_cast<std::byte*>(std::aligned_alloc(4096, bytes));
    if (dst == nullptr) _exit(1);
    std::memset(dst, 0, bytes);  // fault the pages in before the clock starts
    await_go();
    if (ring) {
      for (uint64_t i = 0; i < ring_chunks; ++i) {
        wait_until([&] { return counters[0].value.load(std::memory_order_acquire) > i; });
        copy(dst + i % (bytes / kRingChunk) * kRingChunk, ring_data + i % kRingDepth * kRingChunk,
             kRingChunk);
        counters[1 + p].value.store(i + 1, std::memory_order_release);
      }
    } else {
      const size_t pieces = bytes / kPiece;
      const size_t first = pieces * static_cast<size_t>(p) / static_cast<size_t>(procs);
      for (int it = 0; it < iters; ++it)
        for (size_t k = 0; k < pieces; ++k) {
          const size_t off = (first + k) % pieces * kPiece;
          copy(dst + off, source + off, kPiece);
        }
    }
    const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
    if (control->done.fetch_add(1) + 1 == procs) control->finished.store(now);
    _exit(std::memcmp(dst, source, bytes) == 0 ? 0 : 3);
  });
  while (control->ready.load() < processes) {
    if (::waitpid(-1, nullptr, WNOHANG) > 0) {  // one ended before the start: it failed
      std::fprintf(stderr, "chorus-copy-roofline: a process failed to set up (out of memory?)\n");
      stop_all();
      return 1;
    }
    usleep(1000);
  }
  const auto start = std::chrono::steady_clock::now();
  control->go.store(1);
  for (int left = processes; left > 0; --left) {
    int status = 0;
    if (::wait(&status) < 0) break;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "chorus-copy-roofline: a copying process failed\n");
      stop_all();
      return 1;
    }
  }
  const std::chrono::steady_clock::duration elapsed =
      std::chrono::steady_clock::duration(control->finished.load()) - start.time_since_epoch();
  const double sec = std::chrono::duration<double>(elapsed).count() / iters;
  std::printf("procs %d, %zu MiB each, %s stores%s: %.2f ms per round, %.2f GB/s of copies, "
              "bytes / time %.2f GB/s\n",
              procs, bytes >> 20, stream ? "streaming" : "cached",
              ring ? ", through a 2 MiB ring from one writer" : "", sec * 1e3,
              static_cast<double>(procs) * static_cast<double>(bytes) / sec / 1e9,
              static_cast<double>(bytes) / sec / 1e9);
  return 0;
}
