// chorus — the transport seam: what moves bytes between two ranks.
//
// A Transport owns one Link per peer and the Doorbell its rank sleeps on. A Link advances posted
// Requests without ever blocking: progress_*() does whatever is possible now and returns whether
// anything moved. Requests in one direction of one link complete in posting order, so the engine
// (comm/exchange.h) only ever hands a link the oldest unfinished request of each direction.
// Algorithms never see a Transport: they post requests to an Exchange.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "chorus/types.h"
#include "transport/futex.h"

namespace chorus::transport {

struct Request {
  enum class Kind : uint8_t {
    kSend,        // send `bytes` from src
    kRecv,        // receive `bytes` into dst
    kRecvReduce,  // dst = local op incoming, element-wise (dst may equal local)
  };
  Kind kind = Kind::kSend;
  int peer = -1;
  const std::byte* src = nullptr;
  std::byte* dst = nullptr;
  const std::byte* local = nullptr;
  size_t bytes = 0;
  DataType dtype = DataType::kU8;
  ReduceOp op = ReduceOp::kSum;  // never kAvg here: the algorithm divides at the end
  // Progress state, owned by the transport.
  size_t offset = 0;
  uint64_t token = 0;
  uint8_t phase = 0;
  bool done = false;
};

class Link {
 public:
  virtual ~Link() = default;
  // Advance the oldest unfinished send / receive of this link. Return true if anything moved.
  // Throw chorus::Error on a broken link or a size mismatch (naming the peer).
  virtual bool progress_send(Request& r) = 0;
  virtual bool progress_recv(Request& r) = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual Link& link(int peer) = 0;
  // Rung by peers whenever they change state this rank may be waiting on.
  virtual Doorbell& doorbell() = 0;
  virtual std::string name() const = 0;
};

}  // namespace chorus::transport
