// The backward engine: dependency counting, then a newest-first walk of ready nodes.
//
// Phase 1 (discover): a DFS from the root's grad_fn counts, for every reachable Node, the edges
// that point at it, and for every reachable leaf, the edges that point at it. Phase 2 (run):
// a max-heap on sequence number holds nodes whose count is zero; running a node hands its
// accumulated output gradient to its backward function, then decrements the counts of its
// edges' targets. A leaf whose count reaches zero has its final gradient: its hooks run then.
#include <atomic>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "backend/backend.h"
#include "chorus/tensor/autograd.h"
#include "runtime/transfer.h"

namespace chorus::tensor {

bool hooks_suppressed();  // grad_mode.cc

namespace {
std::atomic<uint64_t> g_next_seq{1};

// Callbacks of the outermost backward running on this thread (queue_backward_callback).
thread_local int t_backward_depth = 0;
thread_local uint64_t t_backward_id = 0;  // of the outermost backward running, 0 outside
std::atomic<uint64_t> g_next_backward_id{1};
thread_local std::vector<std::function<void()>> t_callbacks;
// This backward's contribution to each leaf it reaches, collected apart from the leaf's grad()
// and added to it in one step (or made its grad(), when it has none) when the leaf is final.
// Shared by the backwards nested in the outermost one (checkpointed regions), so that a leaf
// gets one contribution per outermost backward.
thread_local std::unordered_map<TensorImpl*, Tensor> t_contributions;
// The leaves the outermost backward running counts (its phase 1), null outside one.
thread_local const std::unordered_map<TensorImpl*, int>* t_outer_leaves = nullptr;

// Makes a leaf's pending contribution its grad() or adds it there. A nested backward leaves the
// outermost one's leaves to it (their contribution is not complete yet); its own (a
// checkpointed region's stand-in input) it finishes at once.
void add_contribution(TensorImpl& leaf) {
  if (t_backward_depth > 1 && t_outer_leaves != nullptr && t_outer_leaves->count(&leaf) > 0) return;
  auto it = t_contributions.find(&leaf);
  if (it == t_contributions.end()) return;
  Tensor c = std::move(it->second);
  t_contributions.erase(it);
  if (leaf.autograd.grad.defined())
    accumulate_grad(leaf.autograd.grad, c);
  else
    leaf.autograd.grad = std::move(c);
}

// Marks one backward on this thread; the outermost runs the queued callbacks when it ends
// normally (finish()) and drops them when it unwinds.
class BackwardScope {
 public:
  BackwardScope() {
    if (t_backward_depth++ == 0) t_backward_id = g_next_backward_id.fetch_add(1);
  }
  ~BackwardScope() {
    if (--t_backward_depth == 0) {
      t_callbacks.clear();
      t_contributions.clear();
      t_outer_leaves = nullptr;
      t_backward_id = 0;
    }
  }
  BackwardScope(const BackwardScope&) = delete;
  BackwardScope& operator=(const BackwardScope&) = delete;
  void finish() {
    if (t_backward_depth != 1) return;
    // Leaves that only nested backwards reached: their contributions go in now.
    while (!t_contributions.empty()) {
      auto it = t_contributions.begin();
      TensorImpl* leaf = it->first;
      add_contribution(*leaf);
    }
    for (size_t i = 0; i < t_callbacks.size(); ++i) {
      std::function<void()> cb = std::move(t_callbacks[i]);
      cb();
    }
    t_callbacks.clear();
  }
};
}  // namespace

bool backward_running() { return t_backward_depth > 0; }
uint64_t backward_id() { return t_backward_id; }

void queue_backward_callback(std::function<void()> callback) {
  CHORUS_ARG_CHECK(t_backward_depth > 0, "queue_backward_callback outside a backward");
  t_callbacks.push_back(std::move(callback));
}

Node::Node(std::string name, BackwardFn fn, std::vector<Edge> edges,
           std::vector<Shape> input_shapes, std::vector<DataType> input_dtypes,
           std::vector<Device> input_devices, Shape out_shape, DataType out_dtype,
           Device out_device)
    : name_(std::move(name)),
      seq_(g_next_seq.fetch_add(1, std::memory_order_relaxed)),
      fn_(std::move(fn)),
      edges_(std::move(edges)),
      input_shapes_(std::move(input_shapes)),
      input_dtypes_(std::move(input_dtypes)),
      input_devices_(std::move(input_devices)),
      out_shape_(std::move(out_shape)),
      out_dtype_(out_dtype),
      out_device_(out_device) {}

bool GradSink::needs(size_t i) const { return i < node_.edges_.size() && node_.edges_[i].needed(); }

Tensor GradSink::grad(size_t i) {
  bool fresh = false;
  Tensor g = grad_for_write(i, &fresh);
  if (fresh) backend_for(g.device()).zero(g);  // fresh buffers are contiguous
  return g;
}

Tensor GradSink::grad_for_write(size_t i, bool* fresh) {
  *fresh = false;
  if (!needs(i)) return {};
  const Edge& e = node_.edges_[i];
  if (e.node) {
    Tensor& g = e.node->grad_;
    if (!g.defined()) {
      g = Tensor::empty(node_.input_shapes_[i], node_.input_dtypes_[i], node_.input_devices_[i]);
      *fresh = true;
    }
    return g;
  }
  const Tensor& g = e.leaf->autograd.grad;
  CHORUS_CHECK(!g.defined() || (g.is_contiguous() && g.shape() == e.leaf->shape),
               "a leaf's grad must be a contiguous tensor of its shape");
  // The contribution collects in a buffer of its own (as an interior tensor's gradient does),
  // which becomes grad() or is added to it once the leaf is final.
  auto [it, inserted] = t_contributions.try_emplace(e.leaf.get());
  if (inserted) {
    it->second = Tensor::empty(e.leaf->shape, e.leaf->dtype, e.leaf->storage->device());
    *fresh = true;
  }
  return it->second;
}

void accumulate_grad(const Tensor& grad, const Tensor& contribution) {
  CHORUS_ARG_CHECK(grad.shape() == contribution.shape() && grad.dtype() == contribution.dtype(),
                   "accumulate_grad: ", to_string(grad.shape()), " ", to_string(grad.dtype()),
                   " vs ", to_string(contribution.shape()), " ", to_string(contribution.dtype()));
  // On the grad's device: f32 and f64 through the element-wise add (vectorised), anything else
  // (16-bit types: added in f32 and rounded once; strided grads) as an accumulating copy.
  if (grad.is_contiguous() && contribution.is_contiguous() &&
      (grad.dtype() == DataType::kF32 || grad.dtype() == DataType::kF64)) {
    backend_for(grad.device()).add(grad, grad, contribution);
    return;
  }
  copy_tensor(grad, contribution, /*accumulate=*/true);
}

bool needs_grad(std::initializer_list<Tensor> inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Tensor record(const char* name, Tensor out, const std::vector<Tensor>& inputs,
              BackwardFn backward) {
  if (!grad_enabled()) return out;
  bool any = false;
  for (const Tensor& t : inputs) any = any || (t.defined() && t.requires_grad());
  if (!any) return out;
  std::vector<Edge> edges;
  std::vector<Shape> shapes;
  std::vector<DataType> dtypes;
  std::vector<Device> devices;
  edges.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    Edge e;
    if (t.defined() && t.requires_grad()) {
      if (t.grad_fn())
        e.node = t.grad_fn();
      else
        e.leaf = t.impl_ptr();
    }
    edges.push_back(std::move(e));
    shapes.push_back(t.defined() ? t.shape() : Shape{});
    dtypes.push_back(t.defined() ? t.dtype() : DataType::kF32);
    devices.push_back(t.defined() ? t.device() : Device::cpu());
  }
  auto node = std::make_shared<Node>(name, std::move(backward), std::move(edges), std::move(shapes),
                                     std::move(dtypes), std::move(devices), out.shape(),
                                     out.dtype(), out.device());
  auto& meta = out.impl()->autograd;
  meta.requires_grad = true;
  meta.grad_fn = std::move(node);
  return out;
}

Tensor record(const char* name, Tensor out, std::initializer_list<Tensor> inputs,
              BackwardFn backward) {
  return record(name, std::move(out), std::vector<Tensor>(inputs), std::move(backward));
}

namespace {

void run_hooks(TensorImpl& leaf) {
  if (hooks_suppressed()) return;
  for (auto& [handle, hook] : leaf.autograd.hooks) hook(leaf.autograd.grad);
}

}  // namespace

void Engine::backward(const Tensor& root, const Tensor& seed_in) {
  CHORUS_ARG_CHECK(root.defined() && root.requires_grad(),
                   "backward() of a tensor that does not require grad");
  Tensor seed = seed_in;
  if (!seed.defined()) {
    CHORUS_ARG_CHECK(root.numel() == 1, "backward() without a gradient needs a scalar, got ",
                     to_string(root.shape()));
    seed = Tensor::full(root.shape(), 1.0, root.dtype(), root.device());
  }
  CHORUS_ARG_CHECK(seed.shape() == root.shape(), "backward: gradient shape ",
                   to_string(seed.shape()), " vs ", to_string(root.shape()));
  NoGradGuard no_grad;  // backward functions are not themselves recorded
  BackwardScope scope;

  if (root.is_leaf()) {
    TensorImpl& leaf = *root.impl();
    if (!leaf.autograd.grad.defined()) {
      leaf.autograd.grad = Tensor::empty(root.shape(), root.dtype(), root.device());
      copy_tensor(leaf.autograd.grad, seed);
    } else {
      copy_tensor(leaf.autograd.grad, seed, /*accumulate=*/true);
    }
    run_hooks(leaf);
    scope.finish();
    return;
  }

  // Phase 1: count consumers of every reachable node and leaf.
  std::unordered_map<Node*, int> node_deps;
  std::unordered_map<TensorImpl*, int> leaf_deps;
  std::vector<Node*> stack{root.grad_fn().get()};
  std::unordered_set<Node*> seen{root.grad_fn().get()};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    CHORUS_ARG_CHECK(!n->released(), "backward through '", n->name(),
                     "' a second time: its saved tensors were freed by the first backward");
    for (const Edge& e : n->edges_) {
      if (e.node) {
        ++node_deps[e.node.get()];
        if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
      } else if (e.leaf) {
        ++leaf_deps[e.leaf.get()];
      }
    }
  }

  if (t_backward_depth == 1) t_outer_leaves = &leaf_deps;

  // Phase 2: run ready nodes, newest first.
  Node* first = root.grad_fn().get();
  first->grad_ = Tensor::empty(root.shape(), root.dtype(), root.device());
  copy_tensor(first->grad_, seed);
  auto newer = [](const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) {
    return a->seq_ < b->seq_;
  };
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, decltype(newer)>
      ready(newer);
  ready.push(root.grad_fn());
  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    Tensor grad_out = std::move(node->grad_);
    node->grad_ = Tensor();
    if (!grad_out.defined())
      grad_out = Tensor::zeros(node->out_shape_, node->out_dtype_, node->out_device_);
    {
      GradSink sink(*node);
      node->fn_(grad_out, sink);
    }
    grad_out = Tensor();
    node->release();
    for (const Edge& e : node->edges_) {
      if (e.node) {
        if (--node_deps[e.node.get()] == 0) ready.push(e.node);
      } else if (e.leaf) {
        if (--leaf_deps[e.leaf.get()] == 0) {
          add_contribution(*e.leaf);
          run_hooks(*e.leaf);
        }
      }
    }
  }
  scope.finish();
}

}  // namespace chorus::tensor
