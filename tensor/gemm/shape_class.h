// Internal: the shape classes of a GEMM, the vocabulary both measured choices share (the f32
// backend in gemm.cc, the autocast bf16 method in bf16_selection.cc).
//
//   a class      the transposition pattern (nn, nt, tn, tt) times small or large (fewer or more
//                than 2^21 multiply-adds: a training step's attention products are small, its
//                linear layers large); eight in all, index pattern * 2 + large;
//   its name     "nt.large";
//   its shape    the product each class is measured on: a linear layer's products (large) or
//                one attention head's (small);
//   a plan       one choice per class, written as one name when every class takes it, else as
//                "nn.small=a,nn.large=b,..." naming all eight; the knobs and setters take a name
//                (every class) or a list "class=name,..." (classes left out are left open).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace chorus::tensor::gemm_impl {

constexpr int kShapeClasses = 8;

// The class of op(a) (m x k) times op(b) (k x n).
int shape_class(bool ta, bool tb, int64_t m, int64_t n, int64_t k);
std::string class_name(int c);
// Whether a class's A and B are transposed.
bool class_ta(int c);
bool class_tb(int c);
// The measurement shape of a class for the autocast bf16 methods: 512x768x256 (large) or
// 128x128x64 (small), whatever the pattern.
void class_shape(int c, int64_t* m, int64_t* n, int64_t* k);
// The measurement shape of a class for the f32 backends: a large class as a linear layer of 256
// inputs and 768 outputs on 512 tokens uses it (nt: the forward, 512x768x256; nn: the input
// gradient, 512x256x768; tn: the weight gradient, 768x256x512, the tokens its inner dimension;
// tt as nt), a small one as class_shape. The libraries' rates differ most with the inner
// dimension, so the weight gradient's is measured at its own.
void f32_class_shape(int c, int64_t* m, int64_t* n, int64_t* k);

// Parses a plan string into one index per class (-1: left open). "auto" leaves every class
// open; a bare name sets every class; otherwise a comma-separated "class=name" list. `resolve`
// turns a name into its index (throwing InvalidArgument when it is unknown or unavailable);
// `what` names the knob or setter in errors (a malformed item or an unknown class).
std::array<int, kShapeClasses> parse_class_plan(
    const std::string& plan, const char* what,
    const std::function<int(const std::string&)>& resolve);
// The plan string of one choice per class: the name alone when every class has it.
std::string class_plan_string(const std::vector<int>& choice,
                              const std::function<std::string(int)>& name_of);

}  // namespace chorus::tensor::gemm_impl
