#include "common/flat_layout.h"

#include "chorus/error.h"

namespace chorus::parallel {
namespace {

constexpr size_t kAlignBytes = 64;

int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

}  // namespace

FlatLayout plan_buckets(const std::vector<ParamShape>& params, const std::vector<size_t>& order,
                        size_t first_bucket_bytes, size_t bucket_bytes, int64_t pad_to) {
  CHORUS_ARG_CHECK(pad_to >= 1, "plan_buckets: pad_to must be positive, got ", pad_to);
  CHORUS_ARG_CHECK(bucket_bytes > 0 && first_bucket_bytes > 0,
                   "plan_buckets: bucket sizes must be positive");
  FlatLayout layout;
  layout.where.assign(params.size(), {SIZE_MAX, 0});
  FlatBucket open;
  bool have_open = false;
  auto close = [&] {
    if (!have_open) return;
    open.numel = round_up(open.numel, pad_to);
    layout.buckets.push_back(std::move(open));
    open = FlatBucket{};
    have_open = false;
  };
  for (size_t i : order) {
    CHORUS_ARG_CHECK(i < params.size(), "plan_buckets: index ", i, " of ", params.size());
    CHORUS_ARG_CHECK(layout.where[i].first == SIZE_MAX, "plan_buckets: parameter ", i,
                     " listed twice");
    const ParamShape& p = params[i];
    const int64_t es = static_cast<int64_t>(dtype_size(p.dtype));
    const int64_t align = static_cast<int64_t>(kAlignBytes) / es;
    const size_t limit = layout.buckets.empty() ? first_bucket_bytes : bucket_bytes;
    if (have_open) {
      const int64_t start = round_up(open.numel, align);
      const bool fits = static_cast<size_t>((start + p.numel) * es) <= limit;
      if (open.dtype != p.dtype || !fits) close();
    }
    if (!have_open) {
      open.dtype = p.dtype;
      have_open = true;
    }
    const int64_t start = round_up(open.numel, align);
    layout.where[i] = {layout.buckets.size(), open.slots.size()};
    open.slots.push_back({i, start, p.numel});
    open.numel = start + p.numel;
  }
  close();
  return layout;
}

void rebind_into_bucket(tensor::Tensor& param, const tensor::Tensor& grad, tensor::Tensor view) {
  if (grad.defined() && grad.data_ptr() == view.data_ptr()) return;
  if (grad.defined())
    view.copy_(grad);
  else
    view.zero_();
  param.bind_grad(view);
}

}  // namespace chorus::parallel
