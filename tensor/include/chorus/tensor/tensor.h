// chorus::tensor — Tensor: a strided view of a shared Storage, plus its autograd state.
//
// A Tensor is a handle (shared_ptr to TensorImpl): copying a Tensor aliases it, like a
// torch.Tensor. Shape and strides are in elements; `offset` is the element index of [0,...,0]
// inside the storage. Views (view/reshape/transpose/narrow/select) share storage and are
// differentiable; contiguous(), clone() and to() copy.
//
// The storage lives on a device (device.h): "cpu" by default, or a GPU ("cuda:0"); factories take
// the device, to(device) moves a copy there, and ops run where their inputs are.
//
// Element types: f32 and f64 for compute (every op), bf16 and f16 for storage and for the
// matmuls under autocast (amp.h), i32 and i64 for indices (embedding, cross-entropy targets).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "chorus/error.h"
#include "chorus/half.h"
#include "chorus/tensor/device.h"
#include "chorus/tensor/storage.h"
#include "chorus/types.h"

namespace chorus::tensor {

using Shape = std::vector<int64_t>;

int64_t numel_of(const Shape& shape);
// Row-major strides for `shape`.
Shape contiguous_strides(const Shape& shape);
// "[2, 3, 4]".
std::string to_string(const Shape& shape);

class Node;
class Tensor;
struct TensorImpl;

// Called with a leaf's gradient the moment it is final for the running backward (see autograd.h).
using GradReadyHook = std::function<void(Tensor& grad)>;

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor: defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories -------------------------------------------------------------------------
  static Tensor empty(Shape shape, DataType dtype = DataType::kF32, Device device = {});
  static Tensor zeros(Shape shape, DataType dtype = DataType::kF32, Device device = {});
  static Tensor full(Shape shape, double value, DataType dtype = DataType::kF32,
                     Device device = {});
  static Tensor ones(Shape shape, DataType dtype = DataType::kF32, Device device = {}) {
    return full(std::move(shape), 1.0, dtype, device);
  }
  // Copies `values` (converted to dtype) into a new contiguous CPU tensor of `shape` (then
  // to(device) for another device).
  static Tensor from_vector(std::span<const double> values, Shape shape,
                            DataType dtype = DataType::kF32);
  static Tensor from_vector(std::span<const float> values, Shape shape,
                            DataType dtype = DataType::kF32);
  static Tensor from_vector(std::span<const int64_t> values, Shape shape,
                            DataType dtype = DataType::kI64);
  static Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.dtype(), t.device()); }
  static Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype(), t.device()); }

  // ---- metadata --------------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Shape& strides() const;
  int64_t offset() const;
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t stride(int64_t d) const;
  int64_t numel() const;
  DataType dtype() const;
  Device device() const;
  bool is_contiguous() const;
  // A process-unique id, fixed at construction (views get their own).
  uint64_t id() const;
  const std::shared_ptr<Storage>& storage() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }

  // Pointer to element [0, ..., 0]: a device address for a tensor on a GPU (for kernels and
  // device-aware calls such as the Communicator's; the host must not dereference it).
  // data<T>() checks that T matches dtype().
  void* data_ptr() const;
  template <class T>
  T* data() const;

  // ---- views (share storage; differentiable) ----------------------------------------------
  // Same elements, new shape; one entry may be -1. Requires a contiguous tensor.
  Tensor view(Shape shape) const;
  // view() when contiguous, else contiguous().view().
  Tensor reshape(Shape shape) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  // Elements [start, start + length) along dim.
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  // Index `index` along dim; the dim disappears.
  Tensor select(int64_t dim, int64_t index) const;

  // ---- copies (differentiable) -----------------------------------------------------------
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DataType dtype) const;  // a cast; returns *this when the dtype already matches
  // A copy on `device` ("cuda:0", Device::cpu()); returns *this when it is already there. The
  // gradient flows back to this tensor's device. InvalidArgument, saying why, for a device this
  // process cannot use (device_unavailable_reason()).
  Tensor to(Device device) const;

  // ---- in-place, outside autograd (initialisation, optimizers, tests) -----------------------
  // Copies src (same shape, any dtype, strides and device) into this tensor's elements.
  void copy_(const Tensor& src);
  void fill_(double value);
  void zero_() { fill_(0.0); }

  // Rebinds this tensor to `src`'s bytes: from now on it views src's storage with src's strides,
  // offset and dtype (the shape must match). Every handle on this tensor sees the change, its
  // autograd state (requires_grad, hooks, grad) stays. This is how a parameter becomes a view
  // into a flat buffer (data parallelism's buckets, ZeRO's shards) or changes dtype or device
  // (Module::to); a gradient of another dtype or device is dropped.
  void set_data(const Tensor& src);

  // Element values as doubles in row-major order (tests, logging); a GPU tensor is copied to the
  // host first (waiting for the work that computes it).
  std::vector<double> to_vector() const;
  // The value of a one-element tensor.
  double item() const;

  // ---- autograd --------------------------------------------------------------------------
  bool requires_grad() const;
  // Marks a leaf as a parameter-like tensor whose gradient backward() accumulates into grad().
  Tensor& set_requires_grad(bool requires_grad);
  bool is_leaf() const;
  // The accumulated gradient of a leaf (undefined until a backward reaches it).
  const Tensor& grad() const;
  Tensor& mutable_grad();
  void set_grad(Tensor grad);
  // Binds the gradient to `grad`'s bytes (contiguous, this tensor's shape and dtype; usually a
  // view into a bucket that a data-parallel wrapper reduces in place): backward accumulates into
  // it, and zero_grad() zeroes it in place instead of dropping it. set_grad() unbinds.
  void bind_grad(Tensor grad);
  bool grad_bound() const;
  // The gradient reset for the next accumulation: zeroed in place when bound, else dropped (the
  // next backward allocates a fresh one, and assigns instead of accumulating).
  void zero_grad();
  const std::shared_ptr<Node>& grad_fn() const;
  // The same data, cut from the graph (requires_grad false, shares storage).
  Tensor detach() const;
  // Back-propagates from this tensor. A scalar's default seed is 1; otherwise pass `grad` with
  // this tensor's shape. Gradients accumulate (+=) into the leaves' grad().
  void backward(const Tensor& grad = {}) const;
  // Hook on a leaf: runs during each backward, the moment this leaf's gradient is final.
  // Returns a handle for remove_grad_ready_hook.
  int register_grad_ready_hook(GradReadyHook hook);
  void remove_grad_ready_hook(int handle);

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// Autograd state of one tensor.
struct AutogradMeta {
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;  // null for leaves
  Tensor grad;                    // leaves only
  bool grad_bound = false;        // grad lives in memory someone else owns (bind_grad)
  std::vector<std::pair<int, GradReadyHook>> hooks;  // (handle, hook)
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;
  int64_t offset = 0;
  DataType dtype = DataType::kF32;
  uint64_t id = 0;
  AutogradMeta autograd;

  TensorImpl(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset,
             DataType dtype);
};

// A tensor viewing `base`'s storage with new geometry (no autograd link; ops add it).
Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset);

template <class T>
T* Tensor::data() const {
  CHORUS_ARG_CHECK(defined(), "data() of an undefined tensor");
  CHORUS_ARG_CHECK(dtype() == kDataTypeOf<T>, "data<", to_string(kDataTypeOf<T>), ">() of a ",
                   to_string(dtype()), " tensor");
  return static_cast<T*>(data_ptr());
}

}  // namespace chorus::tensor
