#include "chorus/error.h"
#include "chorus/tensor/autograd.h"
#include "chorus/tensor/nn.h"
#include "chorus/tensor/random.h"

namespace chorus::tensor::nn {

Tensor Module::register_parameter(std::string name, Tensor value) {
  for (const auto& [n, t] : params_) CHORUS_ARG_CHECK(n != name, "parameter '", name, "' registered twice");
  value.set_requires_grad(true);
  params_.emplace_back(std::move(name), value);
  return value;
}

void Module::collect(const std::string& prefix, NamedTensors& out) const {
  for (const auto& [name, t] : params_) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& t : parameters()) n += t.numel();
  return n;
}

void Module::zero_grad() {
  for (Tensor t : parameters()) t.set_grad({});
}

void Module::reset_parameters(const std::string& prefix, uint64_t seed) {
  for (auto& [name, t] : params_) {
    const RngKey key{seed, stream_id(prefix + name)};
    if (t.dim() >= 2)
      fill_normal_(t, key, 0.0, 0.02);
    else
      t.fill_(name == "bias" ? 0.0 : 1.0);
  }
}

void Module::init_recursive(const std::string& prefix, uint64_t seed) {
  reset_parameters(prefix, seed);
  for (auto& [name, child] : children_) child->init_recursive(prefix + name + ".", seed);
}

void Module::init(uint64_t seed) {
  NoGradGuard no_grad;
  init_recursive("", seed);
}

void Module::load_state_dict(const NamedTensors& state) {
  NoGradGuard no_grad;
  NamedTensors mine = named_parameters();
  CHORUS_ARG_CHECK(state.size() == mine.size(), "load_state_dict: ", state.size(),
                   " tensors for a module with ", mine.size(), " parameters");
  for (auto& [name, t] : mine) {
    const Tensor* src = nullptr;
    for (const auto& [n, s] : state)
      if (n == name) src = &s;
    CHORUS_ARG_CHECK(src != nullptr, "load_state_dict: missing '", name, "'");
    CHORUS_ARG_CHECK(src->shape() == t.shape(), "load_state_dict: '", name, "' has shape ",
                     to_string(src->shape()), ", expected ", to_string(t.shape()));
    t.copy_(*src);
  }
}

}  // namespace chorus::tensor::nn
