// Replicas agree: one hash per rank finds a difference, then the texts of rank 0 and of the
// first rank that differs name it, identically on every rank.
#include "common/replica_check.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <vector>

#include "chorus/error.h"
#include "chorus/tensor/autograd.h"
#include "common/tensor_comm.h"

namespace chorus::parallel {
namespace {

std::string describe(const std::string& name, const tensor::Tensor& t) {
  return "'" + name + "' " + std::string(to_string(t.dtype())) + " " + tensor::to_string(t.shape());
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Rank `root`'s lines on every rank.
std::vector<std::string> broadcast_lines(Communicator& group, const std::vector<std::string>& mine,
                                         int root) {
  std::string joined;
  for (const std::string& l : mine) joined += l + '\n';
  int64_t bytes = static_cast<int64_t>(joined.size());
  group.broadcast(&bytes, &bytes, 1, DataType::kI64, root);
  joined.resize(static_cast<size_t>(bytes));
  group.broadcast(joined.data(), joined.data(), joined.size(), DataType::kU8, root);
  std::vector<std::string> lines;
  std::istringstream in(joined);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

}  // namespace

void check_same_parameters(Communicator& group, const tensor::nn::NamedTensors& params,
                           std::string_view who) {
  std::vector<std::string> lines;
  for (const auto& [name, t] : params) lines.push_back(describe(name, t));
  std::string all;
  for (const std::string& l : lines) all += l + '\n';
  const int n = group.size();
  const uint64_t mine = fnv1a(all);
  std::vector<uint64_t> hashes(static_cast<size_t>(n));
  group.all_gather(&mine, hashes.data(), 1, DataType::kI64);  // bits, not arithmetic
  int differing = -1;
  for (int r = 1; r < n && differing < 0; ++r)
    if (hashes[static_cast<size_t>(r)] != hashes[0]) differing = r;
  if (differing < 0) return;
  // Every rank computed the same `differing`: both texts travel to everyone.
  const std::vector<std::string> first = broadcast_lines(group, lines, 0);
  const std::vector<std::string> other = broadcast_lines(group, lines, differing);
  size_t i = 0;
  while (i < first.size() && i < other.size() && first[i] == other[i]) ++i;
  std::ostringstream msg;
  msg << who << ": the ranks hold different models: parameter #" << i << " is ";
  msg << (i < first.size() ? first[i] : std::string("missing")) << " on rank 0 but ";
  msg << (i < other.size() ? other[i] : std::string("missing")) << " on rank " << differing << " ("
      << first.size() << " and " << other.size()
      << " parameters); every rank must wrap the same model";
  throw InvalidArgument(msg.str());
}

void broadcast_parameters(Communicator& group, const tensor::nn::NamedTensors& params,
                          size_t chunk_bytes) {
  if (group.size() == 1) return;
  tensor::NoGradGuard no_grad;
  TensorComm comm(group, common_device(params, "broadcast_parameters"), CommOrder::kInline);
  for (const auto& [name, p] : params) {
    if (p.is_contiguous()) {
      const size_t es = dtype_size(p.dtype());
      const size_t per = std::max<size_t>(1, chunk_bytes / es);
      auto* base = static_cast<std::byte*>(p.data_ptr());
      for (size_t off = 0; off < static_cast<size_t>(p.numel()); off += per) {
        const size_t cnt = std::min(per, static_cast<size_t>(p.numel()) - off);
        comm.broadcast(base + off * es, base + off * es, cnt, p.dtype(), 0);
      }
    } else {
      tensor::Tensor tmp = p.contiguous();
      comm.broadcast(tmp.data_ptr(), tmp.data_ptr(), static_cast<size_t>(tmp.numel()), tmp.dtype(),
                     0);
      tensor::Tensor(p).copy_(tmp);
    }
  }
}

}  // namespace chorus::parallel
