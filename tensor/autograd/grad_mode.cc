#include "chorus/tensor/autograd.h"

namespace chorus::tensor {
namespace {
thread_local bool t_grad_enabled = true;
thread_local bool t_hooks_suppressed = false;
}  // namespace

bool grad_enabled() { return t_grad_enabled; }
bool hooks_suppressed() { return t_hooks_suppressed; }

NoGradGuard::NoGradGuard() : prev_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = prev_; }
EnableGradGuard::EnableGradGuard() : prev_(t_grad_enabled) { t_grad_enabled = true; }
EnableGradGuard::~EnableGradGuard() { t_grad_enabled = prev_; }
HookSuppressGuard::HookSuppressGuard() : prev_(t_hooks_suppressed) { t_hooks_suppressed = true; }
HookSuppressGuard::~HookSuppressGuard() { t_hooks_suppressed = prev_; }

}  // namespace chorus::tensor
