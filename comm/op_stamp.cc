// How an OpStamp reads in error messages: "all_reduce #12 (count 1000, float, sum)".
#include "algo/algorithm.h"
#include "chorus/communicator.h"
#include "chorus/error.h"
#include "transport/transport.h"

namespace chorus::transport {

std::string describe(const OpStamp& s) {
  const auto coll = static_cast<Collective>(s.coll);
  if (coll == Collective::kSend)
    return detail::concat("send/recv message #", s.seq, " (", s.count, " bytes",
                          s.root != 0 ? detail::concat(", tag ", s.root) : std::string(), ")");
  if (coll == Collective::kBarrier) return detail::concat("barrier #", s.seq);
  std::string text = detail::concat(to_string(coll), " #", s.seq, " (count ", s.count, ", ",
                                    to_string(static_cast<DataType>(s.dtype)));
  if (coll == Collective::kAllReduce || coll == Collective::kReduceScatter ||
      coll == Collective::kReduce)
    text += detail::concat(", ", to_string(static_cast<ReduceOp>(s.op)));
  if (coll == Collective::kBroadcast || coll == Collective::kReduce ||
      coll == Collective::kGather || coll == Collective::kScatter)
    text += detail::concat(", root ", s.root);
  if (s.algo != 0)
    text += detail::concat(", ", algo::to_string(static_cast<algo::Algorithm>(s.algo - 1)),
                           " algorithm");
  return text + ")";
}

}  // namespace chorus::transport
