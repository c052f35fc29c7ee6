// The fused attention's tiling (tensor/cuda/flash.h, the tile ranges and mask the CUDA kernels of
// cuda/flash_attention.cu use), run on the host: every (row, key) pair of the causal triangle is
// visited exactly once by each kernel's loops, and an emulation of the kernels' loops (tile by
// tile, a row's threads one after another, padding rows and keys read as zeros, the online
// softmax) gives causal_attention's output and gradients on the CPU (the weights materialised).
// Off-by-one tile ranges fail both checks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "chorus/tensor/ops.h"
#include "cuda/flash.h"
#include "gradcheck.h"

namespace chorus::tensor {
namespace {

using namespace flash;

// The kernels' tile ranges, replaceable by wrong ones for the negative checks.
struct Tiling {
  int64_t (*key_tiles)(int64_t q0, int64_t T) = key_tiles_for;
  int64_t (*query_begin)(int64_t k0) = query_tile_begin;
};

// How often the forward (and dq) loops and the dk/dv loops reach each kept (t, s) pair.
struct Visits {
  std::vector<int> rows, keys;  // T x T
};

Visits count_visits(int64_t T, const Tiling& tiling) {
  Visits v{std::vector<int>(T * T), std::vector<int>(T * T)};
  for (int64_t q0 = 0; q0 < T; q0 += kRows)  // a block per query tile
    for (int64_t j = 0; j < tiling.key_tiles(q0, T); ++j)
      for (int r = 0; r < kRows; ++r)
        for (int lane = 0; lane < kGroup; ++lane)
          for (int i = 0; i < kPerThread; ++i) {
            const int64_t t = q0 + r, s = j * kCols + col_of(lane, i);
            if (keep(t, s, T)) ++v.rows[t * T + s];
          }
  for (int64_t k0 = 0; k0 < T; k0 += kCols)  // a block per key tile
    for (int64_t i0 = tiling.query_begin(k0); i0 < tiles(T, kRows); ++i0)
      for (int r = 0; r < kCols; ++r)
        for (int lane = 0; lane < kGroup; ++lane)
          for (int i = 0; i < kPerThread; ++i) {
            const int64_t t = i0 * kRows + col_of(lane, i), s = k0 + r;
            if (keep(t, s, T)) ++v.keys[t * T + s];
          }
  return v;
}

bool covers_triangle_once(const Visits& v, int64_t T) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0; s < T; ++s) {
      const int want = s <= t ? 1 : 0;
      if (v.rows[t * T + s] != want || v.keys[t * T + s] != want) return false;
    }
  return true;
}

TEST(FlashTiles, EachKernelVisitsTheCausalTriangleOnce) {
  for (int64_t T : {1, 2, 31, 32, 33, 63, 64, 65, 100, 129})
    EXPECT_TRUE(covers_triangle_once(count_visits(T, {}), T)) << "T = " << T;
  // The thread layout covers a tile's columns once each.
  std::vector<int> seen(kCols);
  for (int lane = 0; lane < kGroup; ++lane)
    for (int i = 0; i < kPerThread; ++i) ++seen[col_of(lane, i)];
  for (int c = 0; c < kCols; ++c) EXPECT_EQ(seen[c], 1) << c;
}

TEST(FlashTiles, WrongTileRangesMissPairs) {
  const Tiling short_keys{[](int64_t q0, int64_t T) { return key_tiles_for(q0, T) - 1; },
                          query_tile_begin};
  const Tiling late_queries{key_tiles_for, [](int64_t k0) { return query_tile_begin(k0) + 1; }};
  EXPECT_FALSE(covers_triangle_once(count_visits(70, short_keys), 70));
  EXPECT_FALSE(covers_triangle_once(count_visits(70, late_queries), 70));
}

// Heads (BH, T, HS) as flat doubles; row t past T reads as zeros (the kernels' padded tiles).
struct Heads {
  std::vector<double> data;
  int64_t T, HS;
  double at(int64_t bh, int64_t t, int64_t c) const {
    return t < T ? data[(bh * T + t) * HS + c] : 0.0;
  }
};

double dot(const Heads& a, int64_t at, const Heads& b, int64_t bt, int64_t bh) {
  double s = 0;
  for (int64_t d = 0; d < a.HS; ++d) s = std::fma(a.at(bh, at, d), b.at(bh, bt, d), s);
  return s;
}

struct Emulated {
  std::vector<double> out, lse, dq, dk, dv;
};

// The three kernels' loops on the host: forward, then backward with dy.
Emulated emulate(const Heads& q, const Heads& k, const Heads& v, const Heads& dy, int64_t BH,
                 const Tiling& tiling) {
  const int64_t T = q.T, HS = q.HS, n = BH * T * HS;
  const double scale = 1.0 / std::sqrt(double(HS)), inf = std::numeric_limits<double>::infinity();
  Emulated e{std::vector<double>(n), std::vector<double>(BH * T), std::vector<double>(n),
             std::vector<double>(n), std::vector<double>(n)};
  // forward: a block per (head, query tile)
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t q0 = 0; q0 < T; q0 += kRows) {
      std::vector<double> m(kRows, -inf), l(kRows, 0.0), acc(kRows * HS, 0.0);
      for (int64_t j = 0; j < tiling.key_tiles(q0, T); ++j) {
        const int64_t k0 = j * kCols;
        for (int r = 0; r < kRows; ++r) {
          const int64_t t = q0 + r;
          double sv[kCols], tile_max = -inf;
          for (int lane = 0; lane < kGroup; ++lane)
            for (int i = 0; i < kPerThread; ++i) {
              const int s = col_of(lane, i);
              sv[s] = keep(t, k0 + s, T) ? dot(q, t, k, k0 + s, bh) * scale : -inf;
              tile_max = std::max(tile_max, sv[s]);
            }
          const double m_new = std::max(m[r], tile_max);
          const double shift = m_new == -inf ? 0.0 : m_new;
          const double alpha = std::exp(m[r] - shift);
          double p[kCols], tile_sum = 0;
          for (int s = 0; s < kCols; ++s) tile_sum += p[s] = std::exp(sv[s] - shift);
          l[r] = l[r] * alpha + tile_sum;
          m[r] = m_new;
          for (int64_t c = 0; c < HS; ++c) {
            double sum = 0;
            for (int s = 0; s < kCols; ++s) sum = std::fma(p[s], v.at(bh, k0 + s, c), sum);
            acc[r * HS + c] = acc[r * HS + c] * alpha + sum;
          }
        }
      }
      for (int r = 0; r < kRows && q0 + r < T; ++r) {
        const int64_t t = q0 + r;
        for (int64_t c = 0; c < HS; ++c) e.out[(bh * T + t) * HS + c] = acc[r * HS + c] / l[r];
        e.lse[bh * T + t] = m[r] + std::log(l[r]);
      }
    }
  // D = rowsum(dy * out)
  std::vector<double> D(BH * T, 0.0);
  for (int64_t row = 0; row < BH * T; ++row)
    for (int64_t c = 0; c < HS; ++c) D[row] += dy.data[row * HS + c] * e.out[row * HS + c];
  auto row_value = [&](const std::vector<double>& x, int64_t bh, int64_t t) {
    return t < T ? x[bh * T + t] : 0.0;
  };
  // P and dS of one (row, key) pair, 0 where the mask drops it.
  auto weights = [&](int64_t bh, int64_t t, int64_t s, double* p, double* ds) {
    *p = *ds = 0;
    if (!keep(t, s, T)) return;
    *p = std::exp(dot(q, t, k, s, bh) * scale - row_value(e.lse, bh, t));
    *ds = *p * (dot(dy, t, v, s, bh) - row_value(D, bh, t)) * scale;
  };
  // dk, dv: a block per (head, key tile), over the query tiles that see it
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t k0 = 0; k0 < T; k0 += kCols)
      for (int r = 0; r < kCols && k0 + r < T; ++r) {
        const int64_t s = k0 + r;
        for (int64_t i0 = tiling.query_begin(k0); i0 < tiles(T, kRows); ++i0)
          for (int rr = 0; rr < kRows; ++rr) {
            const int64_t t = i0 * kRows + rr;
            double p, ds;
            weights(bh, t, s, &p, &ds);
            for (int64_t c = 0; c < HS; ++c) {
              e.dv[(bh * T + s) * HS + c] += p * dy.at(bh, t, c);
              e.dk[(bh * T + s) * HS + c] += ds * q.at(bh, t, c);
            }
          }
      }
  // dq: a block per (head, query tile), over its key tiles
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t q0 = 0; q0 < T; q0 += kRows)
      for (int r = 0; r < kRows && q0 + r < T; ++r) {
        const int64_t t = q0 + r;
        for (int64_t j = 0; j < tiling.key_tiles(q0, T); ++j)
          for (int s = 0; s < kCols; ++s) {
            double p, ds;
            weights(bh, t, j * kCols + s, &p, &ds);
            for (int64_t c = 0; c < HS; ++c)
              e.dq[(bh * T + t) * HS + c] += ds * k.at(bh, j * kCols + s, c);
          }
      }
  return e;
}

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(a[i] - b[i]);
    if (std::isnan(d)) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, d);
  }
  return worst;
}

// The largest difference between the emulation and causal_attention (f64, the CPU's
// materialised weights) over the output and the three gradients.
double emulation_error(int64_t B, int64_t NH, int64_t T, int64_t HS, const Tiling& tiling) {
  Tensor x[3];
  for (int i = 0; i < 3; ++i) {
    x[i] = testing::randn({B, NH, T, HS}, 10 + i);
    x[i].set_requires_grad(true);
  }
  const Tensor dy = testing::randn({B, NH, T, HS}, 20);
  const Tensor out = causal_attention(x[0], x[1], x[2]);
  out.backward(dy);
  const Emulated e = emulate({x[0].to_vector(), T, HS}, {x[1].to_vector(), T, HS},
                             {x[2].to_vector(), T, HS}, {dy.to_vector(), T, HS}, B * NH, tiling);
  return std::max({max_diff(e.out, out.to_vector()), max_diff(e.dq, x[0].grad().to_vector()),
                   max_diff(e.dk, x[1].grad().to_vector()),
                   max_diff(e.dv, x[2].grad().to_vector())});
}

TEST(FlashTiles, EmulatedKernelsMatchTheMaterialisedAttention) {
  struct Case {
    int64_t B, NH, T, HS;
  };
  // T = 1, T within one tile, at and around tile edges, several tiles; HS 1, odd, 64.
  for (const Case c : {Case{1, 1, 1, 8}, Case{2, 3, 17, 8}, Case{1, 2, 32, 5}, Case{1, 1, 33, 64},
                       Case{2, 1, 70, 3}, Case{1, 1, 97, 1}})
    EXPECT_LT(emulation_error(c.B, c.NH, c.T, c.HS, {}), 1e-12)
        << c.B << "x" << c.NH << "x" << c.T << "x" << c.HS;
}

TEST(FlashTiles, EmulationWithWrongTileRangesDiffers) {
  const Tiling short_keys{[](int64_t q0, int64_t T) { return key_tiles_for(q0, T) - 1; },
                          query_tile_begin};
  const Tiling late_queries{key_tiles_for, [](int64_t k0) { return query_tile_begin(k0) + 1; }};
  EXPECT_GT(emulation_error(1, 1, 70, 4, short_keys), 1e-3);
  EXPECT_GT(emulation_error(1, 1, 70, 4, late_queries), 1e-3);
}

}  // namespace
}  // namespace chorus::tensor
