// The tensor-parallel layers: column- and row-parallel Linear, the vocabulary-parallel
// embedding with its tied lm_head and loss (tensor_parallel.h states the scheme).
#include <limits>
#include <vector>

#include "chorus/error.h"
#include "chorus/parallel/tensor_parallel.h"
#include "chorus/tensor/autograd.h"
#include "chorus/tensor/random.h"
#include "common/fault_injection.h"
#include "common/tensor_comm.h"

namespace chorus::parallel {

using tensor::Tensor;

namespace {

Tensor as_dtype(const Tensor& p, DataType dtype) {
  return !p.defined() || p.dtype() == dtype ? p : p.to(dtype);
}

int64_t divide(int64_t n, int tp, const char* what, const std::string& layer) {
  CHORUS_ARG_CHECK(n % tp == 0, layer, ": ", what, " ", n, " does not divide over tp=", tp);
  return n / tp;
}

}  // namespace

// ---- ColumnParallelLinear ------------------------------------------------------------------

ColumnParallelLinear::ColumnParallelLinear(int64_t in, int64_t out, Communicator& tp, bool bias,
                                           double init_std)
    : Linear(in, divide(out, tp.size(), "out features", "ColumnParallelLinear"), bias, init_std),
      tp_(&tp),
      in_(in),
      out_(out) {}

std::shared_ptr<ColumnParallelLinear> ColumnParallelLinear::slice_of(const tensor::nn::Linear& full,
                                                                     Communicator& tp, int parts) {
  const int64_t out = full.weight.size(0), in = full.weight.size(1);
  CHORUS_ARG_CHECK(parts >= 1 && out % parts == 0, "ColumnParallelLinear: ", out,
                   " out features are not ", parts, " equal blocks");
  const int n = tp.size(), r = tp.rank();
  const int64_t block = out / parts;
  const int64_t local = divide(block, n, "block of out features", "ColumnParallelLinear");
  auto m =
      std::make_shared<ColumnParallelLinear>(in, out, tp, full.bias.defined(), full.init_std());
  m->parts_ = parts;
  m->to(full.weight.dtype());
  tensor::NoGradGuard no_grad;
  for (int p = 0; p < parts; ++p) {
    // Tests only: the k block (of attention's [q | k | v]) taken from the next rank's heads.
    const int from =
        parts == 3 && p == 1 && injected_fault() == Fault::kHeadSlice ? (r + 1) % n : r;
    const int64_t src = p * block + from * local;
    m->weight.narrow(0, p * local, local).copy_(full.weight.narrow(0, src, local));
    if (full.bias.defined())
      m->bias.narrow(0, p * local, local).copy_(full.bias.narrow(0, src, local));
  }
  m->to(full.weight.device());  // the slice lives where the whole layer did
  return m;
}

Tensor ColumnParallelLinear::forward(const Tensor& x) const {
  return hooked([&] {
    return tensor::linear(copy_to_tensor_parallel(x, *tp_), as_dtype(weight, x.dtype()),
                          as_dtype(bias, x.dtype()));
  });
}

void ColumnParallelLinear::reset_parameters(const std::string& prefix, uint64_t seed) {
  // Each block of rows is a contiguous run of the full matrix: draw it at its full indices.
  const int64_t block = out_ / parts_, local = block / tp_->size();
  for (int p = 0; p < parts_; ++p) {
    const int64_t first_row = p * block + tp_->rank() * local;
    Tensor rows = weight.narrow(0, p * local, local);
    tensor::fill_normal_(rows, {seed, tensor::stream_id(prefix + "weight")}, 0.0, init_std(),
                         static_cast<uint64_t>(first_row * in_));
  }
  if (bias.defined()) bias.zero_();
}

// ---- RowParallelLinear ----------------------------------------------------------------------

RowParallelLinear::RowParallelLinear(int64_t in, int64_t out, Communicator& tp, bool bias,
                                     double init_std)
    : Linear(divide(in, tp.size(), "in features", "RowParallelLinear"), out, bias, init_std),
      tp_(&tp),
      in_(in),
      out_(out) {}

std::shared_ptr<RowParallelLinear> RowParallelLinear::slice_of(const tensor::nn::Linear& full,
                                                               Communicator& tp) {
  const int64_t out = full.weight.size(0), in = full.weight.size(1);
  auto m = std::make_shared<RowParallelLinear>(in, out, tp, full.bias.defined(), full.init_std());
  m->to(full.weight.dtype());
  const int64_t local = in / tp.size();
  tensor::NoGradGuard no_grad;
  m->weight.copy_(full.weight.narrow(1, tp.rank() * local, local));
  if (full.bias.defined()) m->bias.copy_(full.bias);
  m->to(full.weight.device());  // the slice lives where the whole layer did
  return m;
}

Tensor RowParallelLinear::forward(const Tensor& x) const {
  return hooked([&] {
    Tensor y = reduce_from_tensor_parallel(tensor::linear(x, as_dtype(weight, x.dtype())), *tp_);
    return bias.defined() ? tensor::add_bias(y, as_dtype(bias, x.dtype())) : y;
  });
}

void RowParallelLinear::reset_parameters(const std::string& prefix, uint64_t seed) {
  // Row o of this slice is the run [o * in + r * in/tp, ...) of the full matrix.
  const int64_t local = in_ / tp_->size();
  for (int64_t o = 0; o < out_; ++o) {
    Tensor row = weight.narrow(0, o, 1);
    tensor::fill_normal_(row, {seed, tensor::stream_id(prefix + "weight")}, 0.0, init_std(),
                         static_cast<uint64_t>(o * in_ + tp_->rank() * local));
  }
  if (bias.defined()) bias.zero_();
}

// ---- VocabParallelEmbedding -----------------------------------------------------------------

namespace {
int64_t padded_rows(int64_t vocab, int tp) { return (vocab + tp - 1) / tp; }
}  // namespace

VocabParallelEmbedding::VocabParallelEmbedding(int64_t vocab, int64_t dim, Communicator& tp)
    : Embedding(padded_rows(vocab, tp.size()), dim),
      tp_(&tp),
      vocab_(vocab),
      dim_(dim),
      start_(tp.rank() * padded_rows(vocab, tp.size())),
      rows_(padded_rows(vocab, tp.size())) {}

std::shared_ptr<VocabParallelEmbedding> VocabParallelEmbedding::slice_of(
    const tensor::nn::Embedding& full, Communicator& tp) {
  const int64_t vocab = full.weight.size(0), dim = full.weight.size(1);
  auto m = std::make_shared<VocabParallelEmbedding>(vocab, dim, tp);
  m->to(full.weight.dtype());
  tensor::NoGradGuard no_grad;
  m->weight.zero_();
  const int64_t real = std::max<int64_t>(0, std::min(m->rows_, vocab - m->start_));
  if (real > 0) m->weight.narrow(0, 0, real).copy_(full.weight.narrow(0, m->start_, real));
  m->to(full.weight.device());  // the slice lives where the whole layer did
  return m;
}

Tensor VocabParallelEmbedding::forward(const Tensor& idx) const {
  return hooked([&] {
    // Local rows for the indices this rank holds, row 0 (masked to zeros) for the others.
    const std::vector<double> ids = idx.to_vector();
    std::vector<int64_t> local(ids.size());
    std::vector<float> keep(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      const auto id = static_cast<int64_t>(ids[i]);
      CHORUS_ARG_CHECK(id >= 0 && id < vocab_, "embedding: index ", id, " outside [0, ", vocab_,
                       ")");
      const bool mine = id >= start_ && id < start_ + rows_;
      local[i] = mine ? id - start_ : 0;
      keep[i] = mine ? 1.f : 0.f;
    }
    const Tensor local_idx =
        Tensor::from_vector(std::span<const int64_t>(local), idx.shape()).to(weight.device());
    const DataType dt = weight.dtype() == DataType::kF64 ? DataType::kF64 : DataType::kF32;
    Tensor rows = tensor::embedding(local_idx, as_dtype(weight, dt));  // (..., C)
    // The mask (..., C): 1 for rows this rank holds.
    tensor::Shape mshape = idx.shape();
    mshape.push_back(dim_);
    std::vector<float> m(keep.size() * static_cast<size_t>(dim_));
    for (size_t i = 0; i < keep.size(); ++i)
      std::fill(m.begin() + static_cast<std::ptrdiff_t>(i * dim_),
                m.begin() + static_cast<std::ptrdiff_t>((i + 1) * dim_), keep[i]);
    const Tensor mask =
        Tensor::from_vector(std::span<const float>(m), mshape, dt).to(weight.device());
    return reduce_from_tensor_parallel(tensor::mul(rows, mask), *tp_);
  });
}

Tensor VocabParallelEmbedding::tied_logits(const Tensor& x) const {
  Tensor logits = tensor::linear(copy_to_tensor_parallel(x, *tp_), as_dtype(weight, x.dtype()));
  const int64_t real = std::max<int64_t>(0, std::min(rows_, vocab_ - start_));
  if (real == rows_) return logits;
  // Padding rows: -inf logits, no probability, no gradient.
  std::vector<double> pad(static_cast<size_t>(logits.numel()), 0.0);
  for (size_t i = 0; i < pad.size(); ++i)
    if (static_cast<int64_t>(i) % rows_ >= real) pad[i] = -std::numeric_limits<double>::infinity();
  return tensor::add(
      logits, Tensor::from_vector(std::span<const double>(pad), logits.shape(), logits.dtype())
                  .to(logits.device()));
}

Tensor VocabParallelEmbedding::tied_loss(const Tensor& logits, const Tensor& targets) const {
  for (double t : targets.to_vector())
    CHORUS_ARG_CHECK(t >= 0 && t < static_cast<double>(vocab_), "cross_entropy: target ", t,
                     " outside [0, ", vocab_, ")");
  Communicator* group = tp_;
  tensor::VocabReductions reductions;
  reductions.max_all_reduce = [group](Tensor& row_max) {
    TensorComm(*group, row_max.device(), CommOrder::kInline)
        .all_reduce(row_max.data_ptr(), row_max.data_ptr(), static_cast<size_t>(row_max.numel()),
                    row_max.dtype(), ReduceOp::kMax);
  };
  reductions.sum_all_reduce = [group](Tensor& sums) {
    TensorComm(*group, sums.device(), CommOrder::kInline)
        .all_reduce(sums.data_ptr(), sums.data_ptr(), static_cast<size_t>(sums.numel()),
                    sums.dtype(), ReduceOp::kSum);
  };
  return tensor::cross_entropy_vocab_parallel(logits, targets, start_, reductions);
}

void VocabParallelEmbedding::reset_parameters(const std::string& prefix, uint64_t seed) {
  weight.zero_();
  const int64_t real = std::max<int64_t>(0, std::min(rows_, vocab_ - start_));
  if (real == 0) return;
  Tensor rows = weight.narrow(0, 0, real);
  tensor::fill_normal_(rows, {seed, tensor::stream_id(prefix + "weight")}, 0.0, 0.02,
                       static_cast<uint64_t>(start_ * dim_));
}

}  // namespace chorus::parallel
