// The GPT made tensor parallel in place, and its slices gathered back into full parameters.
#include "chorus/parallel/tensor_parallel.h"

#include <string>

#include "chorus/error.h"
#include "chorus/log.h"
#include "chorus/tensor/autograd.h"
#include "common/tensor_comm.h"

namespace chorus::parallel {

using tensor::Tensor;

void tensor_parallel(tensor::nn::GPT& model, Communicator& tp) {
  const tensor::nn::GPTConfig& cfg = model.config();
  const int n = tp.size();
  CHORUS_ARG_CHECK(cfg.heads % n == 0, "tensor parallel: ", cfg.heads,
                   " attention heads do not divide over tp=", n,
                   " (every rank takes the same number of heads)");
  CHORUS_ARG_CHECK(dynamic_cast<const VocabParallelEmbedding*>(model.wte.get()) == nullptr,
                   "tensor parallel: the model is tensor parallel already");
  for (size_t i = 0; i < model.h.size(); ++i) {
    const std::string b = "h." + std::to_string(i) + ".";
    tensor::nn::Block& blk = *model.h[i];
    // Attention: heads split (every rank the same heads of q, k and v), output projection by rows.
    model.replace_module(b + "attn.c_attn",
                         ColumnParallelLinear::slice_of(*blk.attn->c_attn, tp, 3));
    model.replace_module(b + "attn.c_proj", RowParallelLinear::slice_of(*blk.attn->c_proj, tp));
    blk.attn->heads = cfg.heads / n;
    // MLP: the 4C hidden units split. An MoE layer stays replicated (tensor_parallel.h).
    if (!blk.mlp) continue;
    model.replace_module(b + "mlp.c_fc", ColumnParallelLinear::slice_of(*blk.mlp->c_fc, tp));
    model.replace_module(b + "mlp.c_proj", RowParallelLinear::slice_of(*blk.mlp->c_proj, tp));
  }
  model.replace_module("wte", VocabParallelEmbedding::slice_of(*model.wte, tp));
  CHORUS_INFO(kLogPar, "tensor parallel over ", n, " ranks: ", cfg.heads / n, " heads, ",
              4 * cfg.width / n, " MLP units and ", (cfg.vocab + n - 1) / n,
              " vocabulary rows per rank");
}

namespace {

// Every rank's copy of `t` side by side: (n, t's elements), contiguous.
Tensor gather(const Tensor& t, Communicator& tp) {
  const Tensor in = t.detach().contiguous();
  Tensor out = Tensor::empty({tp.size(), in.numel()}, in.dtype(), in.device());
  TensorComm(tp, in.device(), CommOrder::kInline)
      .all_gather(in.data_ptr(), out.data_ptr(), static_cast<size_t>(in.numel()), in.dtype());
  return out;
}

// Column slices: rank r holds rows [p*local, (p+1)*local) of block p for each of `parts` blocks.
Tensor gather_rows(const Tensor& t, int parts, Communicator& tp) {
  const int n = tp.size();
  const Tensor all = gather(t, tp);  // (n, rows * cols)
  const int64_t rows = t.size(0), cols = t.dim() > 1 ? t.size(1) : 1, local = rows / parts;
  tensor::Shape shape = t.shape();
  shape[0] = rows * n;
  Tensor full = Tensor::empty(shape, t.dtype(), t.device());
  Tensor flat = full.view({rows * n, cols});
  for (int p = 0; p < parts; ++p)
    for (int r = 0; r < n; ++r)
      flat.narrow(0, (p * n + r) * local, local)
          .copy_(all.select(0, r).view({rows, cols}).narrow(0, p * local, local));
  return full;
}

}  // namespace

tensor::nn::NamedTensors gather_tensor_parallel(tensor::nn::Module& model, Communicator& tp) {
  tensor::NoGradGuard no_grad;
  tensor::nn::NamedTensors out;
  for (const auto& [name, p] : model.named_parameters()) {
    const size_t dot = name.rfind('.');
    const std::string path = dot == std::string::npos ? "" : name.substr(0, dot);
    const std::string member = name.substr(dot + 1);
    tensor::nn::Module& m = model.module_at(path);
    Tensor full;
    if (auto* col = dynamic_cast<ColumnParallelLinear*>(&m)) {
      full = gather_rows(p, col->parts(), tp);
    } else if (dynamic_cast<RowParallelLinear*>(&m) != nullptr && member == "weight") {
      const Tensor all = gather(p, tp);  // (n, out * local)
      const int64_t rows = p.size(0), local = p.size(1);
      full = Tensor::empty({rows, local * tp.size()}, p.dtype(), p.device());
      for (int r = 0; r < tp.size(); ++r)
        full.narrow(1, r * local, local).copy_(all.select(0, r).view({rows, local}));
    } else if (auto* emb = dynamic_cast<VocabParallelEmbedding*>(&m)) {
      full = gather_rows(p, 1, tp).narrow(0, 0, emb->vocab()).contiguous();
    } else {
      full = p.detach().clone();  // replicated
    }
    out.emplace_back(name, full);
  }
  return out;
}

bool is_tensor_parallel_slice(tensor::nn::Module& model, const std::string& name) {
  const size_t dot = name.rfind('.');
  tensor::nn::Module& m = model.module_at(dot == std::string::npos ? "" : name.substr(0, dot));
  const std::string member = name.substr(dot + 1);
  if (dynamic_cast<ColumnParallelLinear*>(&m) != nullptr) return true;
  if (dynamic_cast<VocabParallelEmbedding*>(&m) != nullptr) return true;
  return dynamic_cast<RowParallelLinear*>(&m) != nullptr && member == "weight";
}

}  // namespace chorus::parallel
