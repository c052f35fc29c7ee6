#include "chorus/tensor/tensor.h"

#include <atomic>
#include <cstring>
#include <sstream>

#include "backend/backend.h"
#include "chorus/tensor/autograd.h"
#include "chorus/tensor/ops.h"
#include "cpu/dispatch.h"
#include "cpu/strided.h"
#include "runtime/transfer.h"

namespace chorus::tensor {
namespace {

std::atomic<uint64_t> g_next_id{1};

const TensorImpl& impl_of(const Tensor& t) {
  CHORUS_ARG_CHECK(t.defined(), "use of an undefined tensor");
  return *t.impl();
}

}  // namespace

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

std::string to_string(const Shape& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

TensorImpl::TensorImpl(std::shared_ptr<Storage> storage_, Shape shape_, Shape strides_,
                       int64_t offset_, DataType dtype_)
    : storage(std::move(storage_)),
      shape(std::move(shape_)),
      strides(std::move(strides_)),
      offset(offset_),
      dtype(dtype_),
      id(g_next_id.fetch_add(1, std::memory_order_relaxed)) {}

Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  return Tensor(std::make_shared<TensorImpl>(base.storage(), std::move(shape), std::move(strides),
                                             offset, base.dtype()));
}

// ---- factories -------------------------------------------------------------------------------

Tensor Tensor::empty(Shape shape, DataType dtype, Device device) {
  CHORUS_ARG_CHECK(is_valid(dtype), "empty: invalid dtype");
  for (int64_t d : shape) CHORUS_ARG_CHECK(d >= 0, "empty: negative size in ", to_string(shape));
  const size_t bytes = static_cast<size_t>(numel_of(shape)) * dtype_size(dtype);
  auto storage = std::make_shared<Storage>(bytes, device);
  Shape strides = contiguous_strides(shape);
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), std::move(shape),
                                             std::move(strides), 0, dtype));
}

Tensor Tensor::zeros(Shape shape, DataType dtype, Device device) {
  Tensor t = empty(std::move(shape), dtype, device);
  backend_for(device).zero(t);
  return t;
}

Tensor Tensor::full(Shape shape, double value, DataType dtype, Device device) {
  Tensor t = empty(std::move(shape), dtype, device);
  t.fill_(value);
  return t;
}

namespace {
template <class V>
Tensor from_values(std::span<const V> values, Shape shape, DataType dtype) {
  CHORUS_ARG_CHECK(static_cast<int64_t>(values.size()) == numel_of(shape),
                   "from_vector: ", values.size(), " values for shape ", to_string(shape));
  Tensor t = Tensor::empty(std::move(shape), dtype);
  dispatch_any(dtype, "from_vector", [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = store_as<T>(values[i]);
  });
  return t;
}
}  // namespace

Tensor Tensor::from_vector(std::span<const double> v, Shape s, DataType t) {
  return from_values(v, std::move(s), t);
}
Tensor Tensor::from_vector(std::span<const float> v, Shape s, DataType t) {
  return from_values(v, std::move(s), t);
}
Tensor Tensor::from_vector(std::span<const int64_t> v, Shape s, DataType t) {
  return from_values(v, std::move(s), t);
}

// ---- metadata --------------------------------------------------------------------------------

const Shape& Tensor::shape() const { return impl_of(*this).shape; }
const Shape& Tensor::strides() const { return impl_of(*this).strides; }
int64_t Tensor::offset() const { return impl_of(*this).offset; }
DataType Tensor::dtype() const { return impl_of(*this).dtype; }
Device Tensor::device() const { return impl_of(*this).storage->device(); }
uint64_t Tensor::id() const { return impl_of(*this).id; }
const std::shared_ptr<Storage>& Tensor::storage() const { return impl_of(*this).storage; }
int64_t Tensor::numel() const { return numel_of(shape()); }

int64_t Tensor::size(int64_t d) const {
  const int64_t nd = dim();
  if (d < 0) d += nd;
  CHORUS_ARG_CHECK(d >= 0 && d < nd, "size(", d, ") of a ", nd, "-dim tensor");
  return shape()[d];
}

int64_t Tensor::stride(int64_t d) const {
  const int64_t nd = dim();
  if (d < 0) d += nd;
  CHORUS_ARG_CHECK(d >= 0 && d < nd, "stride(", d, ") of a ", nd, "-dim tensor");
  return strides()[d];
}

bool Tensor::is_contiguous() const {
  const auto& sh = shape();
  const auto& st = strides();
  int64_t expected = 1;
  for (size_t i = sh.size(); i-- > 0;) {
    if (sh[i] == 1) continue;  // a size-1 dim's stride is irrelevant
    if (st[i] != expected) return false;
    expected *= sh[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  const auto& im = impl_of(*this);
  char* base = static_cast<char*>(im.storage->data());
  if (base == nullptr) [[unlikely]]
    throw InvalidArgument(detail::concat("the data of a ", to_string(im.shape), " ",
                                         to_string(im.dtype),
                                         " tensor whose storage was released (a sharded "
                                         "parameter used outside the window where it is "
                                         "gathered?)"));
  return base + im.offset * dtype_size(im.dtype);
}

// ---- views and copies: the differentiable versions live in ops/ -----------------------------

Tensor Tensor::view(Shape shape) const { return view_op(*this, std::move(shape)); }
Tensor Tensor::reshape(Shape shape) const {
  return is_contiguous() ? view_op(*this, std::move(shape))
                         : view_op(contiguous_op(*this), std::move(shape));
}
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return transpose_op(*this, d0, d1); }
Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  return narrow_op(*this, d, start, length);
}
Tensor Tensor::select(int64_t d, int64_t index) const { return select_op(*this, d, index); }
Tensor Tensor::contiguous() const { return is_contiguous() ? *this : contiguous_op(*this); }
Tensor Tensor::clone() const { return contiguous_op(*this); }
Tensor Tensor::to(DataType dtype) const {
  return dtype == this->dtype() ? *this : cast_op(*this, dtype);
}
Tensor Tensor::to(Device device) const {
  return device == this->device() ? *this : to_device_op(*this, device);
}

// ---- in-place (outside autograd) -----------------------------------------------------------

void Tensor::copy_(const Tensor& src) { copy_tensor(*this, src); }

void Tensor::fill_(double value) {
  CHORUS_ARG_CHECK(defined(), "fill_ of an undefined tensor");
  backend_for(device()).fill(*this, value);
}

void Tensor::set_data(const Tensor& src) {
  CHORUS_ARG_CHECK(defined() && src.defined(), "set_data with an undefined tensor");
  TensorImpl& im = *impl_;
  const TensorImpl& from = *src.impl();
  CHORUS_ARG_CHECK(from.shape == im.shape, "set_data: shape ", to_string(from.shape), " for a ",
                   to_string(im.shape), " tensor");
  CHORUS_ARG_CHECK(!im.autograd.requires_grad || is_floating(from.dtype),
                   "set_data: a tensor that requires grad cannot take ", to_string(from.dtype),
                   " data");
  if (from.dtype != im.dtype || from.storage->device() != im.storage->device()) {
    im.autograd.grad = Tensor();
    im.autograd.grad_bound = false;
  }
  im.storage = from.storage;
  im.strides = from.strides;
  im.offset = from.offset;
  im.dtype = from.dtype;
}

std::vector<double> Tensor::to_vector() const {
  if (!device().is_cpu()) return detach().to(Device::cpu()).to_vector();
  std::vector<double> out;
  out.reserve(static_cast<size_t>(numel()));
  dispatch_any(dtype(), "to_vector", [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(data_ptr());
    for_each_row2(shape(), strides(), strides(),
                  [&](int64_t o, int64_t, int64_t n, int64_t s, int64_t) {
                    for (int64_t i = 0; i < n; ++i) out.push_back(load_as<double>(p[o + i * s]));
                  });
  });
  return out;
}

double Tensor::item() const {
  CHORUS_ARG_CHECK(numel() == 1, "item() of a tensor with ", numel(), " elements");
  return to_vector()[0];
}

// ---- autograd accessors ---------------------------------------------------------------------

bool Tensor::requires_grad() const { return impl_of(*this).autograd.requires_grad; }

Tensor& Tensor::set_requires_grad(bool requires_grad) {
  auto& meta = impl_->autograd;
  CHORUS_ARG_CHECK(meta.grad_fn == nullptr, "set_requires_grad on a non-leaf tensor");
  CHORUS_ARG_CHECK(!requires_grad || is_floating(dtype()),
                   "only floating-point tensors can require grad, not ", to_string(dtype()));
  meta.requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const { return impl_of(*this).autograd.grad_fn == nullptr; }
const Tensor& Tensor::grad() const { return impl_of(*this).autograd.grad; }
Tensor& Tensor::mutable_grad() { return impl_->autograd.grad; }
void Tensor::set_grad(Tensor grad) {
  if (grad.defined())
    CHORUS_ARG_CHECK(grad.shape() == shape(), "set_grad: shape ", to_string(grad.shape()), " vs ",
                     to_string(shape()));
  impl_->autograd.grad = std::move(grad);
  impl_->autograd.grad_bound = false;
}

void Tensor::bind_grad(Tensor grad) {
  CHORUS_ARG_CHECK(
      grad.defined() && grad.shape() == shape() && grad.dtype() == dtype() && grad.is_contiguous(),
      "bind_grad: the gradient must be a contiguous ", to_string(shape()), " ", to_string(dtype()),
      " tensor, got ",
      grad.defined() ? detail::concat(to_string(grad.shape()), " ", to_string(grad.dtype()))
                     : std::string("an undefined one"));
  impl_->autograd.grad = std::move(grad);
  impl_->autograd.grad_bound = true;
}

bool Tensor::grad_bound() const { return impl_of(*this).autograd.grad_bound; }

void Tensor::zero_grad() {
  auto& meta = impl_->autograd;
  if (meta.grad_bound)
    meta.grad.zero_();
  else
    meta.grad = Tensor();
}
const std::shared_ptr<Node>& Tensor::grad_fn() const { return impl_of(*this).autograd.grad_fn; }

Tensor Tensor::detach() const {
  const auto& im = impl_of(*this);
  return make_view(*this, im.shape, im.strides, im.offset);
}

void Tensor::backward(const Tensor& grad) const { Engine::backward(*this, grad); }

int Tensor::register_grad_ready_hook(GradReadyHook hook) {
  static std::atomic<int> next_handle{1};
  CHORUS_ARG_CHECK(is_leaf() && requires_grad(), "grad-ready hooks go on leaves that require grad");
  const int handle = next_handle.fetch_add(1, std::memory_order_relaxed);
  impl_->autograd.hooks.emplace_back(handle, std::move(hook));
  return handle;
}

void Tensor::remove_grad_ready_hook(int handle) {
  CHORUS_ARG_CHECK(defined(), "remove_grad_ready_hook on an undefined tensor");
  std::erase_if(impl_->autograd.hooks, [&](const auto& h) { return h.first == handle; });
}

}  // namespace chorus::tensor
