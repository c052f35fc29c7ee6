// Internal: faults the equivalence tests inject to prove that they catch them
// (CHORUS_PARALLEL_FAULT; never set outside tests).
#pragma once

namespace chorus::parallel {

enum class Fault {
  kNone,
  kReduceTwice,  // "ddp_reduce_twice": DDP reduces its first bucket twice (summed, then averaged)
  kShardShift,   // "zero_shard_shift": ZeRO's optimizer updates its shard one element off
  kWrongGroup,   // "zero_wrong_group": hybrid ZeRO reduces a shard across groups with the
                 // ranks of another shard index (shard i of group g meets shard i + g)
  kHeadSlice,    // "tp_head_slice": tensor parallelism gives attention's keys the next rank's heads
  kCheckpointWrite,  // "checkpoint_write": world rank 1 fails to write its checkpoint file
  kExpertWrongRank,  // "ep_wrong_rank": ep rank 0 sends its first token for expert 0 to the next
                     // rank's first expert (and gates it as that expert)
  kExpertCountOffByOne,  // "ep_count_off_by_one": exchange_rows starts the rows for every rank
                         // after the first one row early (a row to the wrong rank, one never sent)
};

// The fault CHORUS_PARALLEL_FAULT names: read once per process (a fork reads it again), so that
// the checks cost a load where they sit in the hot path; InvalidArgument for an unknown name.
Fault injected_fault();

}  // namespace chorus::parallel
