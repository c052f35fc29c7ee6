// The Communicator's typed forms: every collective, blocking and async, on vectors, arrays and
// spans of T and const T (Half and BFloat16 through communicator.h alone), with their size checks;
// and, at compile time, which buffers they accept.
#include <gtest/gtest.h>

#include <array>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "chorus/communicator.h"
#include "error_helpers.h"
#include "multiproc.h"

namespace chorus::testing {
namespace {

using F = std::vector<float>;

// What the forms accept: const inputs, not const outputs; element types chorus has; one element
// type per call. (Concepts, so that a refused call is a false answer, not an error.)
template <class B>
concept CanAllReduceInPlace = requires(Communicator& c, B&& b) {
  c.all_reduce(std::forward<B>(b), ReduceOp::kSum);
};
template <class In, class Out>
concept CanAllGather = requires(Communicator& c, In&& in, Out&& out) {
  c.all_gather(std::forward<In>(in), std::forward<Out>(out));
};
template <class B>
concept CanSend = requires(Communicator& c, B&& b) {
  c.send(std::forward<B>(b), 0);
};
template <class B>
concept CanBroadcastInPlace = requires(Communicator& c, B&& b) {
  c.broadcast(std::forward<B>(b), 0);
};

static_assert(CanAllGather<const F&, F&>);
static_assert(CanAllGather<std::span<float>, std::span<float>>);
static_assert(CanAllGather<std::span<const float>, F&>);
static_assert(
    CanAllGather<decltype(std::span{std::declval<F&>()}), decltype(std::span{std::declval<F&>()})>);
static_assert(CanAllReduceInPlace<std::vector<Half>&>);
static_assert(CanBroadcastInPlace<std::array<BFloat16, 4>&>);
static_assert(CanSend<const std::vector<int64_t>&>);
static_assert(!CanAllReduceInPlace<const F&>);
static_assert(!CanAllReduceInPlace<std::span<const float>>);
static_assert(!CanAllGather<F&, std::span<const float>>);
static_assert(!CanAllGather<F&, std::vector<double>&>);
static_assert(!CanSend<std::vector<char>&>);
static_assert(!CanSend<float*>);
// The async forms return the Work (and it must be used: [[nodiscard]]).
static_assert(requires(Communicator & c, F& v, gpu::Stream s) {
  { c.all_reduce_async(v, ReduceOp::kSum, s) } -> std::same_as<Work>;
});

TEST(TypedForms, EveryCollectiveBlockingAndAsync) {
  run_ranks(3, [](Communicator& comm) {
    const int n = comm.size(), r = comm.rank();
    const size_t c = 5;
    const float me = static_cast<float>(r + 1);  // 1, 2, 3: sum 6
    for (bool async : {false, true}) {
      auto done = [&](Work w) { w.wait(); };
      {  // all_reduce in place and out of place, from a const vector
        F x(c, me);
        if (async)
          done(comm.all_reduce_async(x, ReduceOp::kSum));
        else
          comm.all_reduce(x, ReduceOp::kSum);
        EXPECT_EQ(x, F(c, 6.0f));
        const F in(c, me);
        F out(c);
        if (async)
          done(comm.all_reduce_async(in, out, ReduceOp::kMax));
        else
          comm.all_reduce(in, out, ReduceOp::kMax);
        EXPECT_EQ(out, F(c, 3.0f));
      }
      {  // reduce_scatter: n * c in, c out
        F in(n * c, me), out(c);
        if (async)
          done(comm.reduce_scatter_async(std::span<const float>(in), std::span{out},
                                         ReduceOp::kSum));
        else
          comm.reduce_scatter(std::span<const float>(in), std::span{out}, ReduceOp::kSum);
        EXPECT_EQ(out, F(c, 6.0f));
      }
      {  // all_gather with spans deduced from vectors
        F in(c, me), out(n * c);
        if (async)
          done(comm.all_gather_async(std::span{in}, std::span{out}));
        else
          comm.all_gather(std::span{in}, std::span{out});
        for (int k = 0; k < n; ++k) EXPECT_EQ(out[k * c], static_cast<float>(k + 1));
      }
      {  // broadcast in place and out of place (in unused and empty off the root)
        F x(c, me);
        if (async)
          done(comm.broadcast_async(x, 1));
        else
          comm.broadcast(x, 1);
        EXPECT_EQ(x, F(c, 2.0f));
        const F in = r == 2 ? F(c, 9.0f) : F();
        F out(c);
        if (async)
          done(comm.broadcast_async(in, out, 2));
        else
          comm.broadcast(in, out, 2);
        EXPECT_EQ(out, F(c, 9.0f));
      }
      {  // reduce in place and out of place (out empty off the root)
        F x(c, me);
        if (async)
          done(comm.reduce_async(x, ReduceOp::kSum, 0));
        else
          comm.reduce(x, ReduceOp::kSum, 0);
        if (r == 0) EXPECT_EQ(x, F(c, 6.0f));
        const F in(c, me);
        F out = r == 1 ? F(c) : F();
        if (async)
          done(comm.reduce_async(in, out, ReduceOp::kMin, 1));
        else
          comm.reduce(in, out, ReduceOp::kMin, 1);
        if (r == 1) EXPECT_EQ(out, F(c, 1.0f));
      }
      {  // gather and scatter at root 2
        const F in(c, me);
        F all = r == 2 ? F(n * c) : F();
        if (async)
          done(comm.gather_async(in, all, 2));
        else
          comm.gather(in, all, 2);
        if (r == 2)
          for (int k = 0; k < n; ++k) EXPECT_EQ(all[k * c + c - 1], static_cast<float>(k + 1));
        F part(c);
        if (async)
          done(comm.scatter_async(all, part, 2));
        else
          comm.scatter(all, part, 2);
        EXPECT_EQ(part, F(c, me));
      }
      {  // all_to_all: block j goes to rank j
        F in(n * c), out(n * c);
        for (int j = 0; j < n; ++j)
          for (size_t e = 0; e < c; ++e) in[j * c + e] = static_cast<float>(10 * r + j);
        if (async)
          done(comm.all_to_all_async(in, out));
        else
          comm.all_to_all(in, out);
        for (int i = 0; i < n; ++i) EXPECT_EQ(out[i * c], static_cast<float>(10 * i + r));
      }
      {  // point-to-point on a ring, and with itself
        const F mine(c, me);
        F from_prev(c), own(c);
        const int next = (r + 1) % n, prev = (r + n - 1) % n;
        if (async) {
          done(comm.send_recv_async(mine, next, from_prev, prev));
          done(comm.send_async(mine, r));
          done(comm.recv_async(own, r));
        } else {
          comm.send_recv(mine, next, from_prev, prev);
          comm.send(mine, r);
          comm.recv(own, r);
        }
        EXPECT_EQ(from_prev, F(c, static_cast<float>(prev + 1)));
        EXPECT_EQ(own, mine);
        if (r == 0) {
          if (async)
            done(comm.send_async(std::span<const float>(mine), 1));
          else
            comm.send(mine, 1);
        } else if (r == 1) {
          F got(c);
          if (async)
            done(comm.recv_async(got, 0));
          else
            comm.recv(got, 0);
          EXPECT_EQ(got, F(c, 1.0f));
        }
      }
    }
    // Half and BFloat16 need nothing but communicator.h.
    std::vector<Half> h(4, Half(me));
    comm.all_reduce(h, ReduceOp::kSum);
    EXPECT_EQ(static_cast<float>(h[0]), 6.0f);
    std::array<BFloat16, 2> b{BFloat16(me), BFloat16(me)};
    comm.all_reduce(b, ReduceOp::kMax);
    EXPECT_EQ(static_cast<float>(b[1]), 3.0f);
  });
}

TEST(TypedForms, SizesAreCheckedBeforeAnythingIsIssued) {
  run_ranks(2, [](Communicator& comm) {
    F four(4), five(5), eight(8), three(3);
    EXPECT_NE(invalid_message([&] {
                comm.all_reduce(four, five, ReduceOp::kSum);
              }).find("all_reduce: out has 5 elements but needs 4"),
              std::string::npos);
    EXPECT_NE(invalid_message([&] {
                comm.all_gather(four, five);
              }).find("all_gather: out has 5 elements but needs 8 (2 ranks x 4)"),
              std::string::npos);
    EXPECT_NE(invalid_message([&] {
                (void)comm.reduce_scatter_async(five, four, ReduceOp::kSum);
              }).find("reduce_scatter: in has 5 elements but needs 8"),
              std::string::npos);
    EXPECT_NE(invalid_message([&] { comm.all_to_all(three, three); }).find("not a multiple"),
              std::string::npos);
    EXPECT_NE(invalid_message([&] { comm.all_to_all(four, eight); }).find("out has 8"),
              std::string::npos);
    if (comm.rank() == 0)  // the root's out is checked (off the root it may be anything)
      EXPECT_NE(invalid_message([&] { comm.gather(four, five, 0); }).find("out has 5"),
                std::string::npos);
    float v = 1;
    comm.all_reduce(std::span{&v, 1}, ReduceOp::kSum);
    EXPECT_EQ(v, 2.0f);
  });
}

}  // namespace
}  // namespace chorus::testing
