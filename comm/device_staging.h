// chorus — where a device operation's data sits in pinned host staging memory (pure layout math,
// tested on its own).
//
// The pinned-host path runs a collective on device buffers as: copy the device inputs into one
// staging block, run the host algorithm on the block, copy the outputs back. Every collective
// that has an in-place form runs in place on the block, whatever the caller's layout, so one
// block of the larger side suffices and the algorithm makes no extra copy:
//
//   collective       block (elements)        in: device -> block        out: block -> device
//   all_reduce       c                       send -> [0, c)             [0, c) -> recv
//   reduce_scatter   n c                     send -> [0, n c)           [r c, r c + c) -> recv
//   all_gather       n c                     send -> [r c, r c + c)     [0, n c) -> recv
//   broadcast        c                       send -> [0, c) (root)      [0, c) -> recv
//   reduce           c                       send -> [0, c)             [0, c) -> recv (root)
//   gather           n c root, else c        send -> [root c, ...)      [0, n c) -> recv (root)
//   scatter          n c root, else c        send -> [0, n c) (root)    [root c, ...) -> recv
//   all_to_all       2 n c (send | recv)     send -> first half         second half -> recv
//   send / recv      c                       send -> [0, c)             [0, c) -> recv
//   send_recv        c_s | c_r               send -> first part         second part -> recv
//
// (c = count, n = world size, r = rank; a second part starts 64-byte aligned.) Copies of 0 bytes
// are left out; the wire carries the same bytes as for host buffers, so ranks with device and
// host buffers mix freely.
#pragma once

#include <cstddef>
#include <optional>

#include "algo/algorithm.h"

namespace chorus {

struct StagingPlan {
  struct CopyIn {
    const std::byte* src;  // the caller's device memory
    size_t offset;         // into the staging block
    size_t bytes;
  };
  struct CopyOut {
    size_t offset;
    std::byte* dst;  // the caller's device memory
    size_t bytes;
  };
  size_t bytes = 0;  // the staging block the call needs
  std::optional<CopyIn> in;
  std::optional<CopyOut> out;
  // The call's buffers as offsets into the block; nullopt: a null pointer (unused buffer).
  std::optional<size_t> send_offset, recv_offset;
};

// The plan for a validated call `a` on rank `rank` of `world`.
StagingPlan plan_staging(const algo::CollArgs& a, int rank, int world);

// `a` with its buffers moved into the staging block at `base` (at least plan.bytes bytes).
algo::CollArgs staged_args(const algo::CollArgs& a, const StagingPlan& plan, std::byte* base);

}  // namespace chorus
