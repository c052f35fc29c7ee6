// Fused causal attention (kernels.h; tiles and thread layout: flash.h), FlashAttention-2's
// schedule on plain CUDA cores:
//   forward, per query tile (a block):  for each key tile the mask leaves:
//       S = q k^T * scale (masked to -inf), m' = max(m, rowmax S), P = exp(S - m'),
//       l = l exp(m - m') + rowsum P, acc = acc exp(m - m') + P v
//     out = acc / l, lse = m + log l.
//   backward: D = rowsum(dy * out) (a warp per row); then
//     per key tile (a block) over the query tiles that see it:  P = exp(S - lse),
//       dP = dy v^T, dS = P (dP - D) * scale;  dv += P^T dy,  dk += dS^T q
//     per query tile (a block) over its key tiles:  the same dS;  dq += dS k.
// Every sum runs in an order fixed by the shapes (explicit FMAs, no atomics): the same inputs give
// the same bits. Tiles live in shared memory (rows padded by one element); each thread keeps its
// row's accumulators (kD / kGroup head columns) in registers, kD = 64 or 128 the head-size bound.
// Query tiles are scheduled last first: they visit the most key tiles.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/flash.h"
#include "cuda/kernels.h"

namespace chorus::tensor::cuda {
namespace {

using flash::col_of;
using flash::kCols;
using flash::keep;
using flash::kGroup;
using flash::kPerThread;
using flash::kRows;

template <class P>
struct Heads {
  P* data;
  int64_t s0, s1, s2;
  __device__ P* head(int64_t b, int64_t h) const { return data + b * s0 + h * s1; }
};

template <class T>
Heads<T> heads(HeadsOperand o) {
  return {static_cast<T*>(o.data), o.s0, o.s1, o.s2};
}

template <class T>
__device__ __forceinline__ T fma_of(T a, T b, T c) {
  if constexpr (std::is_same_v<T, float>)
    return __fmaf_rn(a, b, c);
  else
    return __fma_rn(a, b, c);
}

template <class T>
__device__ __forceinline__ T max_of(T a, T b) {
  return a > b ? a : b;
}

// Over the kGroup threads of one row (consecutive lanes; every lane of the warp takes part).
template <class T>
__device__ __forceinline__ T group_max(T v) {
  for (int o = kGroup / 2; o > 0; o /= 2) v = max_of(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <class T>
__device__ __forceinline__ T group_sum(T v) {
  for (int o = kGroup / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Rows [r0, r0 + n) of one head's (T, HS) matrix (row stride s2) into shared memory at row stride
// ld; rows at or past T read as zeros.
template <class T>
__device__ void load_tile(T* dst, int ld, const T* src, int64_t s2, int64_t r0, int n, int64_t T_,
                          int HS) {
  for (int i = threadIdx.x; i < n * HS; i += blockDim.x) {
    const int r = i / HS, c = i % HS;
    const int64_t t = r0 + r;
    dst[r * ld + c] = t < T_ ? src[t * s2 + c] : T(0);
  }
}

template <class T>
__device__ __forceinline__ T dot(const T* a, const T* b, int HS) {
  T s = 0;
  for (int d = 0; d < HS; ++d) s = fma_of(a[d], b[d], s);
  return s;
}

template <class T>
__device__ __forceinline__ T neg_inf() {
  return T(-INFINITY);
}

// grid (B * NH, query tiles), 256 threads (flash::kThreads); shared:
// flash::forward_shared_elements(HS).
template <class T, int kD>
__global__ void __launch_bounds__(flash::kThreads)
    flash_forward_kernel(Heads<T> out, T* lse, Heads<const T> q, Heads<const T> k, Heads<const T> v,
                         int64_t NH, int64_t T_, int HS, T scale) {
  extern __shared__ __align__(16) unsigned char shared[];
  constexpr int kC = kD / kGroup;
  const int ld = HS + 1;
  T* Qs = reinterpret_cast<T*>(shared);
  T* KVs = Qs + kRows * ld;
  T* Ps = KVs + kCols * ld;  // kRows x (kCols + 1)
  const int64_t bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int64_t q0 = (int64_t(gridDim.y) - 1 - blockIdx.y) * kRows;
  const int r = threadIdx.x / kGroup, lane = threadIdx.x % kGroup;
  const int64_t t = q0 + r;
  const T* kh = k.head(b, h);
  const T* vh = v.head(b, h);
  load_tile(Qs, ld, q.head(b, h), q.s2, q0, kRows, T_, HS);
  T acc[kC];
#pragma unroll
  for (int i = 0; i < kC; ++i) acc[i] = T(0);
  T m = neg_inf<T>(), l = T(0);
  const int64_t key_tiles = flash::key_tiles_for(q0, T_);
  for (int64_t j = 0; j < key_tiles; ++j) {
    const int64_t k0 = j * kCols;
    __syncthreads();  // Q is in; the previous tile's V and P are read
    load_tile(KVs, ld, kh, k.s2, k0, kCols, T_, HS);
    __syncthreads();
    T sv[kPerThread];
    T tile_max = neg_inf<T>();
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int s = col_of(lane, i);
      sv[i] = keep(t, k0 + s, T_) ? dot(Qs + r * ld, KVs + s * ld, HS) * scale : neg_inf<T>();
      tile_max = max_of(tile_max, sv[i]);
    }
    const T m_new = max_of(m, group_max(tile_max));
    // A row with nothing kept so far (only padding rows past T) stays at m = -inf: shift by 0
    // so that its exponentials are 0, not NaN.
    const T shift = m_new == neg_inf<T>() ? T(0) : m_new;
    const T alpha = exp_of(m - shift);
    T tile_sum = 0;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const T p = exp_of(sv[i] - shift);
      Ps[r * (kCols + 1) + col_of(lane, i)] = p;
      tile_sum += p;
    }
    l = l * alpha + group_sum(tile_sum);
    m = m_new;
    __syncthreads();  // every score of the tile is made: KVs takes V
    load_tile(KVs, ld, vh, v.s2, k0, kCols, T_, HS);
    __syncthreads();
    const T* prow = Ps + r * (kCols + 1);
#pragma unroll
    for (int i = 0; i < kC; ++i) {
      const int c = col_of(lane, i);
      if (c < HS) {
        T s = 0;
        for (int kk = 0; kk < kCols; ++kk) s = fma_of(prow[kk], KVs[kk * ld + c], s);
        acc[i] = acc[i] * alpha + s;
      }
    }
  }
  if (t >= T_) return;
  T* orow = out.head(b, h) + t * out.s2;
#pragma unroll
  for (int i = 0; i < kC; ++i) {
    const int c = col_of(lane, i);
    if (c < HS) orow[c] = acc[i] / l;
  }
  if (lane == 0) lse[bh * T_ + t] = m + log_of(l);
}

// D[row] = sum over the head dimension of dy * out; a warp per row, grid-stride over the rows.
template <class T>
__global__ void flash_row_dot_kernel(T* D, Heads<const T> dy, Heads<const T> out, int64_t NH,
                                     int64_t T_, int HS, int64_t rows) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t row = int64_t(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp; row < rows;
       row += warps) {
    const int64_t t = row % T_, bh = row / T_, b = bh / NH, h = bh % NH;
    const T* g = dy.head(b, h) + t * dy.s2;
    const T* o = out.head(b, h) + t * out.s2;
    T s = 0;
    for (int c = lane; c < HS; c += kWarp) s = fma_of(g[c], o[c], s);
    s = warp_sum(s);
    if (lane == 0) D[row] = s;
  }
}

// dst row (HS) = acc [assign] or dst + acc.
template <class T, int kC>
__device__ __forceinline__ void store_row(T* dst, const T (&acc)[kC], int lane, int HS,
                                          bool assign) {
#pragma unroll
  for (int i = 0; i < kC; ++i) {
    const int c = col_of(lane, i);
    if (c < HS) dst[c] = assign ? acc[i] : dst[c] + acc[i];
  }
}

// grid (B * NH, key tiles), 256 threads (flash::kThreads); shared: flash::dkdv_shared_elements(HS).
// Thread row r of the block is key k0 + r; its score columns are query rows of the query tile.
template <class T, int kD>
__global__ void __launch_bounds__(flash::kThreads)
    flash_dkdv_kernel(Heads<T> dk, Heads<T> dv, bool assign, Heads<const T> dy, const T* lse,
                      const T* D, Heads<const T> q, Heads<const T> k, Heads<const T> v, int64_t NH,
                      int64_t T_, int HS, T scale) {
  extern __shared__ __align__(16) unsigned char shared[];
  constexpr int kC = kD / kGroup;
  const int ld = HS + 1;
  T* Ks = reinterpret_cast<T*>(shared);
  T* Vs = Ks + kCols * ld;
  T* Qs = Vs + kCols * ld;
  T* dOs = Qs + kRows * ld;
  T* Pt = dOs + kRows * ld;           // kCols x (kRows + 1): P transposed
  T* dSt = Pt + kCols * (kRows + 1);  // kCols x (kRows + 1): dS transposed
  T* Ls = dSt + kCols * (kRows + 1);  // kRows: lse of the query tile's rows
  T* Ds = Ls + kRows;                 // kRows: D of the query tile's rows
  const int64_t bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int64_t k0 = int64_t(blockIdx.y) * kCols;
  const int r = threadIdx.x / kGroup, lane = threadIdx.x % kGroup;
  const int64_t key = k0 + r;
  const T* qh = q.head(b, h);
  const T* gh = dy.head(b, h);
  load_tile(Ks, ld, k.head(b, h), k.s2, k0, kCols, T_, HS);
  load_tile(Vs, ld, v.head(b, h), v.s2, k0, kCols, T_, HS);
  T dk_acc[kC], dv_acc[kC];
#pragma unroll
  for (int i = 0; i < kC; ++i) dk_acc[i] = dv_acc[i] = T(0);
  const int64_t query_tiles = flash::tiles(T_, kRows);
  for (int64_t i0 = flash::query_tile_begin(k0); i0 < query_tiles; ++i0) {
    const int64_t q0 = i0 * kRows;
    __syncthreads();  // K, V are in; the previous tile's Q, dy, P, dS are read
    load_tile(Qs, ld, qh, q.s2, q0, kRows, T_, HS);
    load_tile(dOs, ld, gh, dy.s2, q0, kRows, T_, HS);
    for (int i = threadIdx.x; i < kRows; i += blockDim.x) {
      const int64_t t = q0 + i;
      Ls[i] = t < T_ ? lse[bh * T_ + t] : T(0);
      Ds[i] = t < T_ ? D[bh * T_ + t] : T(0);
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int rr = col_of(lane, i);
      T p = 0, ds = 0;
      if (keep(q0 + rr, key, T_)) {
        p = exp_of(dot(Qs + rr * ld, Ks + r * ld, HS) * scale - Ls[rr]);
        ds = p * (dot(dOs + rr * ld, Vs + r * ld, HS) - Ds[rr]) * scale;
      }
      Pt[r * (kRows + 1) + rr] = p;
      dSt[r * (kRows + 1) + rr] = ds;
    }
    __syncthreads();
    const T* prow = Pt + r * (kRows + 1);
    const T* srow = dSt + r * (kRows + 1);
#pragma unroll
    for (int i = 0; i < kC; ++i) {
      const int c = col_of(lane, i);
      if (c < HS) {
        T sv = 0, sk = 0;
        for (int rr = 0; rr < kRows; ++rr) {
          sv = fma_of(prow[rr], dOs[rr * ld + c], sv);
          sk = fma_of(srow[rr], Qs[rr * ld + c], sk);
        }
        dv_acc[i] += sv;
        dk_acc[i] += sk;
      }
    }
  }
  if (key >= T_) return;
  store_row(dk.head(b, h) + key * dk.s2, dk_acc, lane, HS, assign);
  store_row(dv.head(b, h) + key * dv.s2, dv_acc, lane, HS, assign);
}

// grid (B * NH, query tiles), 256 threads (flash::kThreads); shared: flash::dq_shared_elements(HS).
template <class T, int kD>
__global__ void __launch_bounds__(flash::kThreads)
    flash_dq_kernel(Heads<T> dq, bool assign, Heads<const T> dy, const T* lse, const T* D,
                    Heads<const T> q, Heads<const T> k, Heads<const T> v, int64_t NH, int64_t T_,
                    int HS, T scale) {
  extern __shared__ __align__(16) unsigned char shared[];
  constexpr int kC = kD / kGroup;
  const int ld = HS + 1;
  T* Qs = reinterpret_cast<T*>(shared);
  T* dOs = Qs + kRows * ld;
  T* Ks = dOs + kRows * ld;
  T* Vs = Ks + kCols * ld;
  T* dSs = Vs + kCols * ld;  // kRows x (kCols + 1)
  const int64_t bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int64_t q0 = (int64_t(gridDim.y) - 1 - blockIdx.y) * kRows;
  const int r = threadIdx.x / kGroup, lane = threadIdx.x % kGroup;
  const int64_t t = q0 + r;
  const T* kh = k.head(b, h);
  const T* vh = v.head(b, h);
  load_tile(Qs, ld, q.head(b, h), q.s2, q0, kRows, T_, HS);
  load_tile(dOs, ld, dy.head(b, h), dy.s2, q0, kRows, T_, HS);
  const T row_lse = t < T_ ? lse[bh * T_ + t] : T(0);
  const T row_d = t < T_ ? D[bh * T_ + t] : T(0);
  T acc[kC];
#pragma unroll
  for (int i = 0; i < kC; ++i) acc[i] = T(0);
  const int64_t key_tiles = flash::key_tiles_for(q0, T_);
  for (int64_t j = 0; j < key_tiles; ++j) {
    const int64_t k0 = j * kCols;
    __syncthreads();  // Q, dy are in; the previous tile's K and dS are read
    load_tile(Ks, ld, kh, k.s2, k0, kCols, T_, HS);
    load_tile(Vs, ld, vh, v.s2, k0, kCols, T_, HS);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int s = col_of(lane, i);
      T ds = 0;
      if (keep(t, k0 + s, T_)) {
        const T p = exp_of(dot(Qs + r * ld, Ks + s * ld, HS) * scale - row_lse);
        ds = p * (dot(dOs + r * ld, Vs + s * ld, HS) - row_d) * scale;
      }
      dSs[r * (kCols + 1) + s] = ds;
    }
    __syncthreads();
    const T* srow = dSs + r * (kCols + 1);
#pragma unroll
    for (int i = 0; i < kC; ++i) {
      const int c = col_of(lane, i);
      if (c < HS) {
        T s = 0;
        for (int kk = 0; kk < kCols; ++kk) s = fma_of(srow[kk], Ks[kk * ld + c], s);
        acc[i] += s;
      }
    }
  }
  if (t >= T_) return;
  store_row(dq.head(b, h) + t * dq.s2, acc, lane, HS, assign);
}

size_t shared_bytes(int64_t elements, size_t element_bytes) {
  return static_cast<size_t>(elements) * element_bytes;
}

// Lets `kernel` take `bytes` of dynamic shared memory (beyond the default 48 KiB per block).
template <class K>
void allow_shared(K kernel, size_t bytes, const char* what) {
  if (bytes <= 48 * 1024) return;
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(bytes));
  if (err != cudaSuccess) check_launch(what);
}

// The launch grid: x the B * NH heads, y the tiles of T.
dim3 grid_of(const HeadsShape& s, const char* what) {
  const int64_t heads = s.B * s.NH, tiles = flash::tiles(s.T, kRows);
  CHORUS_ARG_CHECK(heads < (int64_t{1} << 31) && tiles <= 65535, what, ": ", heads, " heads of ",
                   s.T, " rows (at most 2^31 - 1 heads of ", 65535 * kRows, " rows)");
  return dim3(static_cast<unsigned>(heads), static_cast<unsigned>(tiles));
}

// Calls f(T{}, std::integral_constant<int, kD>{}) for the dtype and the head-size bound.
template <class F>
void dispatch_flash(DataType dt, int64_t HS, const char* what, F&& f) {
  CHORUS_ARG_CHECK(HS >= 1 && HS <= flash::kMaxHeadSize, what, ": head size ", HS, " (1 to ",
                   flash::kMaxHeadSize, ")");
  dispatch_float(dt, what, [&](auto tag) {
    if (HS <= 64)
      f(tag, std::integral_constant<int, 64>{});
    else
      f(tag, std::integral_constant<int, 128>{});
  });
}

}  // namespace

bool flash_attention_supported(DataType dt, int64_t HS, int ordinal) {
  if (dt != DataType::kF32 && dt != DataType::kF64) return false;
  if (HS < 1 || HS > flash::kMaxHeadSize) return false;
  int limit = 0;
  if (cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, ordinal) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  const int64_t most = std::max({flash::forward_shared_elements(HS), flash::dq_shared_elements(HS),
                                 flash::dkdv_shared_elements(HS)});
  return shared_bytes(most, dtype_size(dt)) <= static_cast<size_t>(limit);
}

void flash_attention_forward(DataType dt, HeadsOperand out, void* lse, HeadsOperand q,
                             HeadsOperand k, HeadsOperand v, const HeadsShape& s, double scale,
                             Stream stream) {
  if (s.B * s.NH == 0 || s.T == 0) return;
  const dim3 grid = grid_of(s, "flash_attention_forward");
  dispatch_flash(dt, s.HS, "flash_attention_forward", [&](auto tag, auto bound) {
    using T = decltype(tag);
    constexpr int kD = decltype(bound)::value;
    const size_t bytes = shared_bytes(flash::forward_shared_elements(s.HS), sizeof(T));
    allow_shared(flash_forward_kernel<T, kD>, bytes, "flash_attention_forward");
    flash_forward_kernel<T, kD><<<grid, flash::kThreads, bytes, native(stream)>>>(
        heads<T>(out), static_cast<T*>(lse), heads<const T>(q), heads<const T>(k),
        heads<const T>(v), s.NH, s.T, static_cast<int>(s.HS), static_cast<T>(scale));
  });
  check_launch("flash_attention_forward");
}

size_t flash_attention_scratch_bytes(DataType dt, const HeadsShape& s) {
  return static_cast<size_t>(s.B * s.NH * s.T) * dtype_size(dt);
}

void flash_attention_backward(DataType dt, HeadsOperand dq, HeadsOperand dk, HeadsOperand dv,
                              bool assign, HeadsOperand dy, HeadsOperand out, const void* lse,
                              HeadsOperand q, HeadsOperand k, HeadsOperand v, const HeadsShape& s,
                              double scale, void* scratch, Stream stream) {
  if (s.B * s.NH == 0 || s.T == 0) return;
  const dim3 grid = grid_of(s, "flash_attention_backward");
  dispatch_flash(dt, s.HS, "flash_attention_backward", [&](auto tag, auto bound) {
    using T = decltype(tag);
    constexpr int kD = decltype(bound)::value;
    const int HS = static_cast<int>(s.HS);
    const T sc = static_cast<T>(scale);
    T* D = static_cast<T*>(scratch);
    const T* L = static_cast<const T*>(lse);
    const int64_t rows = s.B * s.NH * s.T;
    constexpr int kRowsPerBlock = flash::kThreads / kWarp;
    const int64_t blocks = std::min<int64_t>((rows + kRowsPerBlock - 1) / kRowsPerBlock, 65535 * 8);
    flash_row_dot_kernel<T><<<static_cast<unsigned>(blocks), flash::kThreads, 0, native(stream)>>>(
        D, heads<const T>(dy), heads<const T>(out), s.NH, s.T, HS, rows);
    check_launch("flash_attention_backward (row dots)");
    const size_t dkdv_bytes = shared_bytes(flash::dkdv_shared_elements(s.HS), sizeof(T));
    allow_shared(flash_dkdv_kernel<T, kD>, dkdv_bytes, "flash_attention_backward");
    flash_dkdv_kernel<T, kD><<<grid, flash::kThreads, dkdv_bytes, native(stream)>>>(
        heads<T>(dk), heads<T>(dv), assign, heads<const T>(dy), L, D, heads<const T>(q),
        heads<const T>(k), heads<const T>(v), s.NH, s.T, HS, sc);
    check_launch("flash_attention_backward (dk, dv)");
    const size_t dq_bytes = shared_bytes(flash::dq_shared_elements(s.HS), sizeof(T));
    allow_shared(flash_dq_kernel<T, kD>, dq_bytes, "flash_attention_backward");
    flash_dq_kernel<T, kD><<<grid, flash::kThreads, dq_bytes, native(stream)>>>(
        heads<T>(dq), assign, heads<const T>(dy), L, D, heads<const T>(q), heads<const T>(k),
        heads<const T>(v), s.NH, s.T, HS, sc);
  });
  check_launch("flash_attention_backward (dq)");
}

}  // namespace chorus::tensor::cuda
