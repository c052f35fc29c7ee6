// What a rank of the shm+ucx composite transport sleeps on, from the peers it waits for.
#include <gtest/gtest.h>

#include <vector>

#include "transport/composite_transport.h"

namespace chorus::transport {
namespace {

// Ranks 0 and 1 share this rank's host (rank 0 is this one); 2 and 3 are on another.
const std::vector<bool> kLocal = {true, true, false, false};

TEST(CompositeSleep, OnlyShmPeersSleepOnTheDoorbell) {
  const std::vector<int> awaited = {1};
  EXPECT_EQ(composite_sleep(awaited, kLocal), CompositeSleep::kDoorbell);
}

TEST(CompositeSleep, OnlyUcxPeersSleepOnTheEventFd) {
  const std::vector<int> awaited = {3, 2};
  EXPECT_EQ(composite_sleep(awaited, kLocal), CompositeSleep::kEvents);
}

TEST(CompositeSleep, BothKindsOrNoneSleepOnTheEventFdCapped) {
  const std::vector<int> both = {2, 1}, none = {};
  EXPECT_EQ(composite_sleep(both, kLocal), CompositeSleep::kEventsCapped);
  EXPECT_EQ(composite_sleep(none, kLocal), CompositeSleep::kEventsCapped);
}

}  // namespace
}  // namespace chorus::transport
