// Point-to-point matching by source, tag and order (chorus/communicator.h, "Point-to-point
// matching"): bodies run on 3 ranks over whichever transport the run chooses (shm in
// p2p_tags_test.cc, UCX in tests/comm_ucx). Every message carries its sender, tag and number in
// its payload, so a message taken by the wrong receive fails the check that names it.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "chorus/communicator.h"

namespace chorus::testing {

struct P2pTagCase {
  std::string name;
  std::function<void(Communicator&)> body;  // every rank of a 3-rank communicator
};
// gtest's name for a case in test listings (the test's own name carries it too).
inline void PrintTo(const P2pTagCase& c, std::ostream* os) { *os << c.name; }

// Tags received out of the order sent (small and large messages, the large set aside), tag 0
// beside other tags, send_recv with tags, any-source receives (with and without tags, and
// Work::source), messages to self by tag, zero-byte messages; then a collective, to show the
// links are left in step.
std::vector<P2pTagCase> p2p_tag_cases();

}  // namespace chorus::testing
