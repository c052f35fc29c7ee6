#include "checkpoint/region.h"

#include <algorithm>

#include "chorus/parallel/tensor_parallel.h"

namespace chorus::parallel {

Region whole_region(int64_t numel) {
  if (numel == 0) return {};
  return {{0, 0, numel}};
}

Region sub_region(const Region& r, int64_t begin, int64_t end) {
  Region out;
  for (const Run& run : r) {
    const int64_t a = std::max(begin, run.local), b = std::min(end, run.local + run.length);
    if (a < b) out.push_back({a - begin, run.logical + (a - run.local), b - a});
  }
  return out;
}

Region param_region(tensor::nn::Module& model, const std::string& name, const tensor::Tensor& local,
                    tensor::Shape* full_shape) {
  const size_t dot = name.rfind('.');
  tensor::nn::Module& m = model.module_at(dot == std::string::npos ? "" : name.substr(0, dot));
  const std::string member = name.substr(dot + 1);
  *full_shape = local.shape();
  if (auto* col = dynamic_cast<ColumnParallelLinear*>(&m)) {
    // Rows: `parts` blocks, of which this rank holds its run of each.
    const int64_t in = member == "weight" ? col->full_in() : 1;
    const int64_t block = col->full_out() / col->parts(), l = block / col->tp_size();
    (*full_shape)[0] = col->full_out();
    Region r;
    for (int p = 0; p < col->parts(); ++p)
      r.push_back({p * l * in, (p * block + col->tp_rank() * l) * in, l * in});
    return r;
  }
  if (auto* row = dynamic_cast<RowParallelLinear*>(&m); row != nullptr && member == "weight") {
    // Columns: every row holds its run of the full row.
    const int64_t out = row->full_out(), in = row->full_in(), l = in / row->tp_size();
    (*full_shape)[1] = in;
    Region r;
    for (int64_t o = 0; o < out; ++o) r.push_back({o * l, o * in + row->tp_rank() * l, l});
    return r;
  }
  if (auto* emb = dynamic_cast<VocabParallelEmbedding*>(&m)) {
    const int64_t dim = local.size(1);
    (*full_shape)[0] = emb->vocab();
    if (emb->real_rows() == 0) return {};
    return {{0, emb->vocab_start() * dim, emb->real_rows() * dim}};
  }
  return whole_region(local.numel());
}

}  // namespace chorus::parallel
