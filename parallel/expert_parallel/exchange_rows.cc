// exchange_rows: the uneven all-to-all of an expert-parallel layer's rows (expert_parallel.h),
// and its backward, the same exchange with the counts reversed.
#include <numeric>

#include "chorus/parallel/expert_parallel.h"
#include "chorus/tensor/autograd.h"
#include "common/fault_injection.h"
#include "common/tensor_comm.h"

namespace chorus::parallel {
namespace {

using tensor::Tensor;

// x (S, C) dense -> (R, C) on x's device: pairwise steps s = 1 .. P-1, each sending to me + s and
// receiving from me - s at once (send_recv, in the engine's order: common/tensor_comm.h), after
// this rank's own block is copied.
Tensor exchange(const Tensor& x, int64_t C, const std::vector<int64_t>& send_rows,
                const std::vector<int64_t>& recv_rows, Communicator& comm) {
  const int P = comm.size(), me = comm.rank();
  std::vector<int64_t> send_at(static_cast<size_t>(P) + 1, 0), recv_at(send_at);
  for (int p = 0; p < P; ++p) {
    send_at[p + 1] = send_at[p] + send_rows[p];
    recv_at[p + 1] = recv_at[p] + recv_rows[p];
  }
  // Tests only: the rows for every rank after the first start one row early.
  if (P > 1 && send_rows[0] > 0 && injected_fault() == Fault::kExpertCountOffByOne)
    for (int p = 1; p < P; ++p) --send_at[p];
  Tensor out = Tensor::empty({recv_at[P], C}, x.dtype(), x.device());
  const size_t row_bytes = static_cast<size_t>(C) * dtype_size(x.dtype());
  const auto* src = static_cast<const char*>(x.data_ptr());
  auto* dst = static_cast<char*>(out.data_ptr());
  if (send_rows[me] > 0)
    out.narrow(0, recv_at[me], recv_rows[me]).copy_(x.narrow(0, send_at[me], send_rows[me]));
  TensorComm ordered(comm, x.device(), CommOrder::kInline);
  for (int s = 1; s < P; ++s) {
    const int to = (me + s) % P, from = (me - s + P) % P;
    Work w = ordered.send_recv_async(
        src + send_at[to] * row_bytes, static_cast<size_t>(send_rows[to] * C), to,
        dst + recv_at[from] * row_bytes, static_cast<size_t>(recv_rows[from] * C), from, x.dtype());
    ordered.complete(w);
  }
  return out;
}

}  // namespace

Tensor exchange_rows(const Tensor& x_in, const std::vector<int64_t>& send_rows,
                     const std::vector<int64_t>& recv_rows, Communicator& comm) {
  const size_t P = static_cast<size_t>(comm.size());
  CHORUS_ARG_CHECK(x_in.defined() && x_in.dim() == 2, "exchange_rows: x must be (S, C)");
  CHORUS_ARG_CHECK(x_in.dtype() == DataType::kF32 || x_in.dtype() == DataType::kF64,
                   "exchange_rows: dtype ", to_string(x_in.dtype()), " (f32 or f64)");
  CHORUS_ARG_CHECK(send_rows.size() == P && recv_rows.size() == P,
                   "exchange_rows: ", send_rows.size(), " send and ", recv_rows.size(),
                   " receive counts for ", P, " ranks");
  for (size_t p = 0; p < P; ++p)
    CHORUS_ARG_CHECK(send_rows[p] >= 0 && recv_rows[p] >= 0, "exchange_rows: a negative count");
  CHORUS_ARG_CHECK(std::accumulate(send_rows.begin(), send_rows.end(), int64_t{0}) == x_in.size(0),
                   "exchange_rows: the send counts add up to ",
                   std::accumulate(send_rows.begin(), send_rows.end(), int64_t{0}), ", x has ",
                   x_in.size(0), " rows");
  CHORUS_ARG_CHECK(
      send_rows[static_cast<size_t>(comm.rank())] == recv_rows[static_cast<size_t>(comm.rank())],
      "exchange_rows: this rank sends itself ", send_rows[comm.rank()], " rows but expects ",
      recv_rows[comm.rank()]);
  const int64_t C = x_in.size(1);
  const Tensor x = x_in.detach().contiguous();
  Tensor out = exchange(x, C, send_rows, recv_rows, comm);
  // backward: the gradients go back where the rows came from. Every rank runs it (a rank whose x
  // needs no gradient still sends and receives), so peers never wait for a missing partner.
  return tensor::record("exchange_rows", out, {x_in},
                        [send_rows, recv_rows, C, &comm](const Tensor& dy, tensor::GradSink& g) {
                          const Tensor back =
                              exchange(dy.contiguous(), C, recv_rows, send_rows, comm);
                          bool fresh = false;
                          Tensor dx = g.grad_for_write(0, &fresh);
                          if (!dx.defined()) return;
                          if (fresh)
                            dx.copy_(back);
                          else
                            tensor::accumulate_grad(dx, back);
                        });
}

}  // namespace chorus::parallel
