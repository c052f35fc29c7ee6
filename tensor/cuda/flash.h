// Internal: the tiling of the fused causal attention (cuda/flash_attention.cu), shared by the
// kernels and by a host emulation of them (tests/tensor/flash_tiles_test.cc), so that the tile
// ranges and the causal mask the kernels use also run, and are checked, on a CPU.
//
// A head is a (T, HS) matrix per operand. Query rows go in tiles of kRows, keys in tiles of
// kCols; a block of kThreads threads works on one tile, kGroup consecutive threads (one eighth
// of a warp) per row of it: the thread at `threadIdx.x` owns row threadIdx.x / kGroup of the tile
// and, within that row, the columns col_of(threadIdx.x % kGroup, i) of a score tile (i <
// kPerThread) and of the head dimension.
#pragma once

#include <cstdint>

#include "runtime/host_device.h"

namespace chorus::tensor::flash {

constexpr int kRows = 32;                   // query rows per tile
constexpr int kCols = 32;                   // keys per tile
constexpr int kGroup = 8;                   // threads per row
constexpr int kThreads = kRows * kGroup;    // threads per block (the key tile's too)
constexpr int kPerThread = kCols / kGroup;  // score columns per thread
constexpr int kMaxHeadSize = 128;           // the largest head size the kernels take
static_assert(kRows == kCols, "a block owns one tile of either kind with the same threads");
static_assert(kCols % kGroup == 0 && 32 % kGroup == 0, "a row's threads lie in one warp");

CHORUS_HOST_DEVICE inline int64_t tiles(int64_t n, int64_t tile) { return (n + tile - 1) / tile; }

// The i-th column (score column or head-dimension column) of the thread at `lane` of its row.
CHORUS_HOST_DEVICE inline int col_of(int lane, int i) { return lane + kGroup * i; }

// Whether query row t sees key s: the causal mask (s <= t) and the ragged last tiles (rows and
// keys at or past T are padding). Row t always sees key 0 and itself, so no real row is fully
// masked and its logsumexp is finite.
CHORUS_HOST_DEVICE inline bool keep(int64_t t, int64_t s, int64_t T) { return s <= t && t < T; }

// The key tiles the query tile starting at row q0 visits: [0, key_tiles_for(q0, T)), those
// holding a key at or before the tile's last real row.
CHORUS_HOST_DEVICE inline int64_t key_tiles_for(int64_t q0, int64_t T) {
  const int64_t last = (q0 + kRows < T ? q0 + kRows : T) - 1;
  return last / kCols + 1;
}

// The query tiles the key tile starting at key k0 visits: [query_tile_begin(k0), tiles(T,
// kRows)), those holding a row at or after k0.
CHORUS_HOST_DEVICE inline int64_t query_tile_begin(int64_t k0) { return k0 / kRows; }

// Shared memory of the three kernels, in elements of `element_bytes`, for head size HS (rows of
// HS + 1 elements: consecutive rows fall in different banks).
CHORUS_HOST_DEVICE inline int64_t forward_shared_elements(int64_t HS) {
  return (kRows + kCols) * (HS + 1) + kRows * (kCols + 1);
}
CHORUS_HOST_DEVICE inline int64_t dq_shared_elements(int64_t HS) {
  return 2 * (kRows + kCols) * (HS + 1) + kRows * (kCols + 1);
}
CHORUS_HOST_DEVICE inline int64_t dkdv_shared_elements(int64_t HS) {
  return 2 * (kRows + kCols) * (HS + 1) + 2 * kCols * (kRows + 1) + 2 * kRows;
}

}  // namespace chorus::tensor::flash
