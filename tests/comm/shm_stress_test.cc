// Stress of the shm transport's lock-free protocols (shm_layout.h), each driven where a broken
// publication order or a lost wake-up would show: payloads chosen to look like the words the
// protocols validate, fresh transports each round, more ranks (or threads) than the machine has
// cores so that readers and writers are preempted at every point. The fan-out buffer's headers,
// a rank's published failure, and the doorbells every wait sleeps on.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/error.h"
#include "exchange.h"
#include "multiproc.h"
#include "transport/factory.h"
#include "transport/peer_monitor.h"
#include "transport/shm/shm_layout.h"
#include "transport/transport.h"
#include "wait_policy.h"

namespace chorus::testing {
namespace {

constexpr std::chrono::milliseconds kTimeout{30000};
constexpr uint64_t kLine = sizeof(transport::shm::SlotHeader);
constexpr size_t kFanSlotBytes = 128;
constexpr size_t kFanDepth = 2;

transport::OpStamp stamp_for(uint64_t seq, size_t words) {
  return {seq,
          words,
          static_cast<uint8_t>(Collective::kAllGather),
          static_cast<uint8_t>(DataType::kI64),
          0,
          6,
          0};
}

// The fan-out buffer: a reader polls the `seq` word at its position and takes the piece when
// the word holds that position + 1. Headers do not sit at fixed places in the ring, so the line
// a reader polls next may hold payload of an earlier lap; the writer zeroes that line before it
// publishes the piece before it. Here every payload word holds exactly the value a reader one
// lap later would accept at its place: a writer that did not zero the next line shows as a
// reader taking payload for a header (a stamp mismatch or wrong bytes), not as a lucky pass.
//
// One writer's fan-out buffer as shm_layout.h lays it out: a message of more than 16 bytes goes
// in pieces of at most kFanSlotBytes, each a header line and its payload rounded up to a line,
// preceded by a skip to the ring's start where it would cross the end. message() returns the
// message whose every word holds (its absolute position in the ring + capacity + 1): the `seq` a
// reader one lap later expects at that place.
class RingModel {
 public:
  explicit RingModel(uint64_t capacity) : capacity_(capacity) {}
  std::vector<uint64_t> message(size_t words) {
    std::vector<uint64_t> m(words);
    const size_t bytes = words * sizeof(uint64_t);
    if (bytes <= transport::shm::kInlineBytes) {
      pos_ += place(kLine);
      for (size_t i = 0; i < words; ++i) m[i] = pos_ + i;  // inline: no payload line
      return m;
    }
    for (size_t done = 0; done < bytes;) {
      const size_t n = std::min(kFanSlotBytes, bytes - done);
      const uint64_t piece = kLine + (n + kLine - 1) / kLine * kLine;
      const uint64_t at = place(piece);
      for (size_t b = 0; b < n; b += sizeof(uint64_t))
        m[(done + b) / sizeof(uint64_t)] = at + kLine + b + capacity_ + 1;
      pos_ = at + piece;
      done += n;
    }
    return m;
  }

 private:
  // The header's position of a piece of `piece` bytes; skips to the start where needed.
  uint64_t place(uint64_t piece) {
    const uint64_t here = pos_ % capacity_;
    if (here + piece > capacity_) pos_ += capacity_ - here;
    return pos_;
  }
  uint64_t capacity_;
  uint64_t pos_ = 0;
};

// Every rank fans out a message to every other, through a buffer of 7 lines, with message sizes
// that grow and shrink (inline, one piece, several pieces and skips), by the small-message path
// and by posted requests in turn; a reader falls behind at times. Fresh transports each round,
// four ranks on however few cores.
TEST(ShmStress, FanReadersNeverTakeAnEarlierLapForAHeader) {
  RunOptions options;
  options.env["CHORUS_SHM_FAN_SLOT_BYTES"] = std::to_string(kFanSlotBytes);
  options.env["CHORUS_SHM_FAN_DEPTH"] = std::to_string(kFanDepth);
  const transport::shm::Layout layout{1, 128, 2, kFanSlotBytes, kFanDepth};
  const uint64_t capacity = layout.fan_capacity();
  constexpr int n = 4;
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(::testing::Message() << "round " << round);
    run_wired(
        n,
        [&](int rank, transport::Wiring& w, Exchange& ex) {
          ASSERT_TRUE(w.transport->capabilities().fans_out);
          std::vector<RingModel> rings(n, RingModel(capacity));
          for (uint64_t seq = 1; seq <= 150; ++seq) {
            // Growing, then starting again small: 3..63 words, the start moving each round.
            const size_t words = 3 + (seq * 7 + static_cast<uint64_t>(round) * 5) % 61;
            const size_t bytes = words * sizeof(uint64_t);
            SCOPED_TRACE(::testing::Message() << "message " << seq << " words " << words);
            std::vector<std::vector<uint64_t>> want(n);
            for (int p = 0; p < n; ++p) want[p] = rings[p].message(words);
            std::vector<uint64_t> mine = want[rank];
            std::vector<uint64_t> all(words * n, 0);
            ex.begin("allgather", static_cast<int64_t>(seq), "test", kTimeout,
                     stamp_for(seq, words));
            if (rank == static_cast<int>(seq % n) && seq % 9 == 0)
              std::this_thread::sleep_for(std::chrono::milliseconds(2));
            if (seq % 4 == 0) {
              ex.post_fan_out(mine.data(), bytes, all.data() + rank * words);
              for (int p = 0; p < n; ++p)
                if (p != rank) ex.post_fan_in(p, all.data() + p * words, bytes);
              ex.wait_all();
            } else {
              ex.fan_small(mine.data(), all.data() + rank * words, Exchange::kAllPeers,
                           reinterpret_cast<std::byte*>(all.data()), bytes, bytes);
            }
            for (int p = 0; p < n; ++p)
              ASSERT_TRUE(std::equal(want[p].begin(), want[p].end(), all.begin() + p * words))
                  << "rank " << rank << ": block of rank " << p;
          }
        },
        options);
  }
}

// A rank's failure is published once: its cause and text, then its status (shm_layout.h), which
// peers read first. Two threads of one rank may announce at once (abort() from the application
// while the progress thread's operation fails): whichever publishes, the text the peers read is
// the one its announcer wrote, whole, with its cause, never a mix or one overwritten after the
// status went out.
TEST(ShmStress, ConcurrentFailureAnnouncementsPublishOneWholeText) {
  constexpr size_t kTextBytes = 1000;
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE(::testing::Message() << "round " << round);
    SharedBetweenRanks<std::atomic<int>> announced;
    run_wired(2, [&](int rank, transport::Wiring& w, Exchange&) {
      transport::PeerMonitor& monitor = w.transport->monitor();
      if (rank == 1) {
        std::atomic<bool> go{false};
        auto announcer = [&](int cause, char c) {
          const std::string text(kTextBytes, c);
          while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
          monitor.announce_failure(cause, text);
        };
        std::thread a(announcer, 1, 'a'), b(announcer, 0, 'b');
        go.store(true, std::memory_order_release);
        a.join();
        b.join();
        announced->store(1);
        return;
      }
      // What a peer reads as soon as the status says failed, and again once both announcers
      // are done: one whole text with its cause, the same both times. ("gone": rank 1 ended
      // without publishing anything.)
      transport::OpStamp p2p{};
      p2p.coll = static_cast<uint8_t>(Collective::kSend);
      const std::vector<int> rank1{1};
      auto read = [&] {
        try {
          return monitor.check_peers(rank1, p2p).empty() ? std::string() : std::string("gone");
        } catch (const PeerFailure& e) {
          return std::string(e.what());
        }
      };
      std::string first;
      while ((first = read()).empty()) std::this_thread::yield();
      ASSERT_NE(first, "gone") << "rank 1 ended without publishing its failure";
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (announced->load() == 0 && std::chrono::steady_clock::now() < give_up)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ASSERT_EQ(announced->load(), 1) << "rank 1's announcers did not finish";
      const std::string last = read();
      for (const std::string& what : {first, last}) {
        const bool own = what.find("rank 1 failed: ") != std::string::npos;
        const bool other =
            what.find("rank 0 failed first (reported by rank 1): ") != std::string::npos;
        ASSERT_TRUE(own != other) << what;
        EXPECT_EQ(what.substr(what.size() - kTextBytes), std::string(kTextBytes, own ? 'a' : 'b'))
            << "the text of cause " << (own ? 1 : 0) << " is not whole";
      }
      EXPECT_EQ(first, last) << "a published failure changed after peers read it";
    });
  }
}

// A waiting rank sleeps on its doorbell (transport/futex.h) right after one last look, and every
// publication it may wait for rings it: a slot, room in a FIFO, a fan-out piece, room in the
// fan-out buffer. Here ranks sleep at once (no spinning, no yields) and a sleep lasts up to 10 s
// unless rung, so a wake-up lost anywhere shows as a step taking that long (a loaded host's
// slowest step stays far below it). Three ranks pass
// messages round a ring and all-gather through buffers of two small slots, sizes growing from
// inline to many slots, on two cores; fresh transports each round.
TEST(ShmStress, SleepingRanksAreWokenByEveryPublication) {
  RunOptions options;
  options.env["CHORUS_SHM_SLOT_BYTES"] = "128";
  options.env["CHORUS_SHM_DEPTH"] = "2";
  options.env["CHORUS_SHM_FAN_SLOT_BYTES"] = std::to_string(kFanSlotBytes);
  options.env["CHORUS_SHM_FAN_DEPTH"] = std::to_string(kFanDepth);
  WaitPolicy sleep_at_once;
  sleep_at_once.sleep_ns = 10'000'000'000L;
  constexpr auto kLostWake = std::chrono::seconds(5);
  constexpr int n = 3;
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(::testing::Message() << "round " << round);
    run_wired(
        n,
        [&](int rank, transport::Wiring& w, Exchange&) {
          Exchange ex(*w.transport, rank, n, sleep_at_once);
          for (uint64_t seq = 1; seq <= 240; ++seq) {
            const size_t words = 1 + (seq * 13 + static_cast<uint64_t>(round) * 7) % 160;
            const size_t bytes = words * sizeof(uint64_t);
            auto block = [&](int p) {
              std::vector<uint64_t> v(words);
              for (size_t i = 0; i < words; ++i)
                v[i] = seq << 32 | static_cast<uint64_t>(p) << 24 | i;
              return v;
            };
            const auto t0 = std::chrono::steady_clock::now();
            ex.begin("ring", static_cast<int64_t>(seq), "test", kTimeout, stamp_for(seq, words));
            const std::vector<uint64_t> mine = block(rank);
            if (seq % 3 == 0) {
              std::vector<uint64_t> all(words * n, 0);
              ex.post_fan_out(mine.data(), bytes, all.data() + rank * words);
              for (int p = 0; p < n; ++p)
                if (p != rank) ex.post_fan_in(p, all.data() + p * words, bytes);
              ex.wait_all();
              for (int p = 0; p < n; ++p) {
                const std::vector<uint64_t> want = block(p);
                ASSERT_TRUE(std::equal(want.begin(), want.end(), all.begin() + p * words))
                    << "message " << seq << ", rank " << rank << ": block of rank " << p;
              }
            } else {
              const int from = (rank + n - 1) % n;
              std::vector<uint64_t> got(words, 0);
              ex.post_send((rank + 1) % n, mine.data(), bytes);
              ex.post_recv(from, got.data(), bytes);
              ex.wait_all();
              ASSERT_EQ(got, block(from)) << "message " << seq << " at rank " << rank;
            }
            ASSERT_LT(std::chrono::steady_clock::now() - t0, kLostWake)
                << "rank " << rank << " slept through a wake-up at message " << seq;
          }
        },
        options);
  }
}

}  // namespace
}  // namespace chorus::testing
