#include <cxxabi.h>

#include <cstdlib>
#include <memory>

#include "chorus/error.h"
#include "chorus/tensor/autograd.h"
#include "chorus/tensor/nn.h"
#include "chorus/tensor/random.h"

namespace chorus::tensor::nn {

Tensor Module::register_parameter(std::string name, Tensor value) {
  for (const auto& [n, t] : params_)
    CHORUS_ARG_CHECK(n != name, "parameter '", name, "' registered twice");
  value.set_requires_grad(true);
  params_.emplace_back(std::move(name), value);
  return value;
}

void Module::collect(const std::string& prefix, NamedTensors& out) const {
  for (const auto& [name, t] : params_) out.emplace_back(prefix + name, t);
  for (const Child& c : children_) c.module->collect(prefix + c.name + ".", out);
}

void Module::collect_modules(const std::string& prefix,
                             std::vector<std::pair<std::string, Module*>>& out) {
  out.emplace_back(prefix, this);
  for (const Child& c : children_)
    c.module->collect_modules(prefix.empty() ? c.name : prefix + "." + c.name, out);
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  collect_modules("", out);
  return out;
}

std::string Module::demangle(const char* name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name, nullptr, nullptr, &status),
                                           std::free);
  return status == 0 && d ? std::string(d.get()) : std::string(name);
}

void Module::add_child(std::string name, std::shared_ptr<Module> module, std::string type,
                       Assign assign) {
  CHORUS_ARG_CHECK(module != nullptr, "module '", name, "' registered as null");
  for (const Child& c : children_)
    CHORUS_ARG_CHECK(c.name != name, "module '", name, "' registered twice");
  children_.push_back({std::move(name), std::move(module), std::move(type), std::move(assign)});
}

Module& Module::module_at(const std::string& path) {
  for (auto& [name, m] : named_modules())
    if (name == path) return *m;
  throw InvalidArgument("no module at '" + path + "'");
}

void Module::replace_module(const std::string& path, std::shared_ptr<Module> module) {
  CHORUS_ARG_CHECK(module != nullptr, "replace_module('", path, "') with a null module");
  for (auto& [prefix, parent] : named_modules())
    for (Child& c : parent->children_) {
      if ((prefix.empty() ? c.name : prefix + "." + c.name) != path) continue;
      const Module& replacement = *module;
      CHORUS_ARG_CHECK(c.assign(module), "replace_module('", path, "'): a ",
                       demangle(typeid(replacement).name()), " is not a ", c.type);
      c.module = std::move(module);
      return;
    }
  throw InvalidArgument("replace_module: no module at '" + path + "'");
}

int Module::add_forward_pre_hook(ForwardPreHook hook) {
  pre_hooks_.emplace_back(next_hook_, std::move(hook));
  return next_hook_++;
}

int Module::add_forward_hook(ForwardHook hook) {
  hooks_.emplace_back(next_hook_, std::move(hook));
  return next_hook_++;
}

void Module::remove_hook(int handle) {
  std::erase_if(pre_hooks_, [&](const auto& h) { return h.first == handle; });
  std::erase_if(hooks_, [&](const auto& h) { return h.first == handle; });
}

Module& Module::to(DataType dtype) {
  CHORUS_ARG_CHECK(is_floating(dtype), "Module::to(", to_string(dtype),
                   "): parameters are floating point");
  NoGradGuard no_grad;
  for (auto& [name, t] : named_parameters()) {
    if (t.dtype() == dtype) continue;
    Tensor converted = t.detach().to(dtype);
    t.set_data(converted);
  }
  return *this;
}

Module& Module::to(Device device) {
  NoGradGuard no_grad;
  NamedTensors params = named_parameters();
  std::vector<Tensor> moved;
  moved.reserve(params.size());
  for (auto& [name, t] : params)
    moved.push_back(t.device() == device ? Tensor() : t.detach().to(device));
  for (size_t i = 0; i < params.size(); ++i)
    if (moved[i].defined()) params[i].second.set_data(moved[i]);
  return *this;
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
  for (Tensor t : parameters()) t.zero_grad();
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
  for (const Child& c : children_) c.module->init_recursive(prefix + c.name + ".", seed);
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
