// chorus::tensor — reverse-mode autograd: a define-by-run tape of Nodes.
//
// Vocabulary
//   Node      one recorded op: its backward function and one Edge per input.
//   Edge      where an input's gradient goes: the input's producing Node (interior tensor), the
//             input itself (a leaf that requires grad), or nowhere.
//   GradSink  what a backward function writes into: grad(i) is a buffer shaped like input i.
//
// The gradient rule, stated once: backward functions ACCUMULATE (+=) into grad(i), never
// assign. An interior tensor's buffer starts at zero and collects every consumer's contribution
// before its producer runs. A leaf's gradients add up across backward calls until the caller
// zeroes them, one backward at a time: a backward collects its whole contribution to a leaf in
// a buffer of its own, summed as an interior tensor's gradient is, and when the leaf is final
// makes it the leaf's grad() or, when there is one, adds it in one step (accumulate_grad: one
// rounding per element). So a gradient accumulated over micro-batches is ((g_0 + g_1) + g_2) + ...,
// each g_k one backward's complete gradient, whatever pieces each backward adds up inside: the
// grouping a data-parallel reduction of the micro-batches' gradients can reproduce
// (docs/PARALLELISM.md, "What is bit-identical to what"). Backwards nested in another (checkpointed
// regions) add to the outer one's contribution.
//
// Engine: backward() counts, for every Node and leaf reachable from the root, how many
// consumers will send it a gradient, then runs Nodes whose count reached zero, newest first
// (reverse creation order, so the tape unwinds like the forward ran). When a leaf's count
// reaches zero its gradient is final for this backward and its grad-ready hooks run right
// there, in the middle of backward: this is the seam data-parallel training launches its
// gradient all-reduce from. After a Node runs, its saved tensors are released.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "chorus/tensor/tensor.h"

namespace chorus::tensor {

struct Edge {
  std::shared_ptr<Node> node;        // set for an interior input
  std::shared_ptr<TensorImpl> leaf;  // set for a leaf that requires grad
  bool needed() const { return node || leaf; }
};

class GradSink;

// The backward of one op: accumulate d(loss)/d(input i) into sink.grad(i) given grad_out.
using BackwardFn = std::function<void(const Tensor& grad_out, GradSink& sink)>;

class Node {
 public:
  Node(std::string name, BackwardFn fn, std::vector<Edge> edges, std::vector<Shape> input_shapes,
       std::vector<DataType> input_dtypes, std::vector<Device> input_devices, Shape out_shape,
       DataType out_dtype, Device out_device);

  const std::string& name() const { return name_; }
  const std::vector<Edge>& edges() const { return edges_; }
  const Shape& out_shape() const { return out_shape_; }
  DataType out_dtype() const { return out_dtype_; }
  // Where the output lives (its gradient is made there; each input's gradient is made on that
  // input's device, which differs only for to()).
  Device out_device() const { return out_device_; }
  // Drops the backward function and what it captured (saved activations).
  void release() { fn_ = nullptr; }
  bool released() const { return !fn_; }

 private:
  friend class Engine;
  friend class GradSink;
  std::string name_;
  uint64_t seq_;
  BackwardFn fn_;
  std::vector<Edge> edges_;
  // Shape/dtype/device of each input, to allocate its gradient buffer (storage not kept).
  std::vector<Shape> input_shapes_;
  std::vector<DataType> input_dtypes_;
  std::vector<Device> input_devices_;
  Shape out_shape_;
  DataType out_dtype_;
  Device out_device_;
  Tensor grad_;  // the gradient of this node's output, accumulated during backward
};

class GradSink {
 public:
  // Buffer to accumulate input i's gradient into: contiguous, input i's shape and dtype. An
  // undefined tensor when input i needs no gradient (skip that computation).
  Tensor grad(size_t i);
  // grad(i) without the zero fill: when input i has no buffer yet, it is allocated
  // uninitialised and *fresh is set, and the caller must then ASSIGN every element instead of
  // accumulating (a GEMM with beta = 0, a copy). Saves a memset and a read per element on the
  // first (usually only) contribution.
  Tensor grad_for_write(size_t i, bool* fresh);
  bool needs(size_t i) const;

 private:
  friend class Engine;
  explicit GradSink(Node& node) : node_(node) {}
  Node& node_;
};

// Records `out` as the result of an op over `inputs` when grad mode is on and some input
// requires grad; returns `out` (with grad_fn set in that case). Ops call this last.
Tensor record(const char* name, Tensor out, std::initializer_list<Tensor> inputs,
              BackwardFn backward);
Tensor record(const char* name, Tensor out, const std::vector<Tensor>& inputs, BackwardFn backward);
// True when an op over these inputs must be recorded.
bool needs_grad(std::initializer_list<Tensor> inputs);

// grad += contribution, element by element with one rounding each (16-bit types added in f32):
// how a backward's contribution joins a leaf's accumulated gradient, and how anything that must
// add gradients the way the engine does (a data-parallel fold) adds them. Same shape and dtype.
void accumulate_grad(const Tensor& grad, const Tensor& contribution);

// Runs backward from `roots` (each with its seed gradient). Engine::backward is what
// Tensor::backward calls.
class Engine {
 public:
  static void backward(const Tensor& root, const Tensor& seed);
};

// Whether a backward is running on this thread (a grad-ready hook or a backward function is
// being called).
bool backward_running();
// A number unique to the outermost backward running on this thread (0 when none runs): a hook
// tells a new backward from the one it already saw.
uint64_t backward_id();
// Runs `callback` once the outermost backward running on this thread has finished every node
// and hook, on this thread, before backward() returns; callbacks run in the order queued (one
// queued by a callback runs too). The seam where a data-parallel wrapper finishes what the
// backward's hooks started. Throws InvalidArgument outside a backward. When the backward throws,
// its queued callbacks are dropped.
void queue_backward_callback(std::function<void()> callback);

// ---- grad mode -----------------------------------------------------------------------------
bool grad_enabled();

// Disables recording in this thread for the scope (like torch.no_grad()).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Re-enables recording for the scope (used by checkpoint recomputation).
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

// Suppresses grad-ready hooks in this thread for the scope (a nested backward inside a
// checkpointed region: the outer backward fires them once the region's node has run).
class HookSuppressGuard {
 public:
  HookSuppressGuard();
  ~HookSuppressGuard();
  HookSuppressGuard(const HookSuppressGuard&) = delete;
  HookSuppressGuard& operator=(const HookSuppressGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace chorus::tensor
