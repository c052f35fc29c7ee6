// The topology exchange over a communicator or the bootstrap store (chorus/topology_exchange.h).
#include <algorithm>

#include "chorus/error.h"
#include "chorus/topology_exchange.h"

namespace chorus {

std::vector<topo::Topology> all_gather_topologies(Communicator& comm, const topo::Topology& local) {
  const std::string mine = topo::serialize(local);
  const size_t n = static_cast<size_t>(comm.size());
  const int64_t my_size = static_cast<int64_t>(mine.size());
  std::vector<int64_t> sizes(n);
  comm.all_gather(&my_size, sizes.data(), 1, DataType::kI64);
  const size_t width = static_cast<size_t>(*std::max_element(sizes.begin(), sizes.end()));

  std::string padded = mine;
  padded.resize(width);
  std::string all(width * n, '\0');
  comm.all_gather(padded.data(), all.data(), width, DataType::kU8);
  std::vector<topo::Topology> out;
  out.reserve(n);
  for (size_t r = 0; r < n; ++r)
    out.push_back(
        topo::deserialize(std::string_view(all).substr(r * width, static_cast<size_t>(sizes[r]))));
  return out;
}

std::vector<topo::Topology> exchange_topologies(Store& store, int rank, int world_size,
                                                const topo::Topology& local, Millis timeout,
                                                const std::string& prefix) {
  CHORUS_ARG_CHECK(rank >= 0 && rank < world_size, "exchange_topologies: rank ", rank,
                   " outside world size ", world_size);
  store.set(prefix + std::to_string(rank), topo::serialize(local));
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back(prefix + std::to_string(r));
  store.wait(keys, timeout);
  std::vector<topo::Topology> out;
  out.reserve(static_cast<size_t>(world_size));
  for (int r = 0; r < world_size; ++r)
    out.push_back(r == rank ? local
                            : topo::deserialize(store.get(keys[static_cast<size_t>(r)], timeout)));
  return out;
}

}  // namespace chorus
