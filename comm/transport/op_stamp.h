// chorus — the stamp every message carries: the operation it belongs to.
//
// The receiver compares the sender's stamp with its own: ranks that call different collectives
// (or the same one with another count, type, op or root) fail with chorus::Mismatch on both sides
// instead of exchanging bytes that mean different things. 24 bytes: it rides in the slot header
// at no cost.
#pragma once

#include <cstdint>
#include <string>

namespace chorus::transport {

struct OpStamp {
  uint64_t seq = 0;    // collective sequence number; for send/recv the per-pair message number
  uint64_t count = 0;  // elements as the call names them (send/recv: bytes)
  uint8_t coll = 0;    // chorus::Collective (send and recv both as kSend)
  uint8_t dtype = 0;   // chorus::DataType (send/recv: 0)
  uint8_t op = 0;      // chorus::ReduceOp for reducing collectives, else 0
  uint8_t algo = 0;    // chorus::algo::Algorithm + 1 (0 for send/recv): ranks must agree
  int32_t root = 0;    // rooted collectives; send/recv: the message's tag; else 0
  bool operator==(const OpStamp&) const = default;
};
static_assert(sizeof(OpStamp) == 24);

// "all_reduce #12 (count 1000, float, sum)"; defined by the communicator, which knows the names.
std::string describe(const OpStamp& stamp);

// Thrown by a link whose peer's message belongs to another operation; the Exchange, which knows
// this rank's recent operations, turns it into the chorus::Mismatch users see.
struct StampMismatch {
  int peer;
  OpStamp theirs, mine;
};

}  // namespace chorus::transport
