"""The backend-name gates of PyTorch's distributed suite that the runner lifts for chorus.

distributed_test.py decides at import which tests a backend is asked, by its name: feature sets
in common_distributed.DistTestCases, and decorators such as
`@sandcastle_skip_if(BACKEND != "gloo", ...)`. A plugin backend is asked only the tests that name
no backend. Each gate below is lifted because chorus claims the feature behind it
(docs/TORCH.md, "What is supported"), so chorus is asked what gloo is asked on the CPU; every
other gate stays, and the tests behind it are skipped on chorus with the suite's own reason.

FEATURES: names added to DistTestCases.backend_feature[<feature>] before the suite is imported.
LIFTS: a gate in the decorators of the named tests, rewritten from `old` to `new`; the runner
fails when a gate is not found where it is expected (another torch), so nothing is lifted by
accident or silently left in place.
"""
from dataclasses import dataclass
from typing import Tuple

BACKEND = "chorus"

# feature -> why chorus is in it
FEATURES = {
    "plugin": "chorus is a third-party backend registered through "
              "torch.distributed.Backend.register_backend, which is what the suite's plugin set "
              "stands for (init_process_group with it, new_group with gloo beside it)",
    "ddp": "DistributedDataParallel over chorus is claimed: DDP's reducer runs on allreduce, "
           "broadcast, allgather and getFuture, all provided",
    "subgroup": "new_group over any subset of ranks is claimed: every group is its own "
                "communicator; the gate's tests that need CUDA devices skip on their own",
    "gpu": "despite its name the suite's 'gpu' set also gates CPU tests that gloo runs (the "
           "object collectives: all_gather_object, gather_object, broadcast_object_list, over "
           "all_gather, gather and broadcast, all claimed); its tests that need CUDA devices "
           "skip on their own (Debian's torch has no CUDA)",
}


@dataclass(frozen=True)
class Lift:
    tests: Tuple[str, ...]
    old: str
    new: str
    reason: str


def _gloo_or_chorus(tests, old_reason, reason):
    return Lift(tuple(tests), f'BACKEND != "gloo", "{old_reason}"',
                f'BACKEND not in ("gloo", "chorus"), "{old_reason}"', reason)


LIFTS = [
    _gloo_or_chorus(
        ["test_barrier_timeout_global", "test_barrier_timeout_group",
         "test_barrier_timeout_full_group"],
        "Only gloo backend supports timeouts",
        "the group's timeout (init_process_group / new_group timeout=) bounds every chorus "
        "operation, which then fails with chorus_torch.Timeout"),
    _gloo_or_chorus(
        ["test_batch_isend_irecv_gloo", "test_batch_isend_irecv_gloo_tags"],
        "GLOO Batch Send Recv CPU",
        "batch_isend_irecv on CPU tensors is claimed (startCoalescing/endCoalescing), with tags"),
    Lift(tuple(f"test_all_reduce_coalesced_{g}{op}" for g in ("", "group_", "full_group_")
               for op in ("sum", "product", "min", "max")) + ("test_scatter_object_list",),
         'require_backend({"gloo"})', 'require_backend({"gloo", "chorus"})',
         "all_reduce_coalesced (one all_reduce over the packed tensors) and scatter (what "
         "scatter_object_list runs on) are claimed"),
    Lift(("test_accumulate_gradients_no_sync", "test_accumulate_gradients_no_sync_grad_is_view",
          "test_accumulate_gradients_no_sync_allreduce_hook",
          "test_accumulate_gradients_no_sync_allreduce_with_then_hook", "test_get_future"),
         'BACKEND != "mpi" and BACKEND != "nccl" and BACKEND != "gloo",',
         'BACKEND != "mpi" and BACKEND != "nccl" and BACKEND != "gloo" and BACKEND != "chorus",',
         "Work.get_future() is claimed: a Future completed when chorus's Work is, what DDP's "
         "communication hooks run on"),
]

# Tests that pass on gloo and not on chorus, each with the reason; run.py fails on any other such
# test, and on a test listed here that passes on chorus (so the list stays true).
_MONITORED = ("torch 1.13's dist.monitored_barrier refuses every backend but gloo by name "
              "(\"monitored_barrier is only implemented for GLOO backend\") before any process "
              "group is asked, so the suite cannot reach a plugin's; chorus's is the group's own "
              "monitored_barrier (tests/test_failures.py); the gate stays")
_SPARSE = ("sparse all_reduce is refused (chorus_torch.InvalidArgument naming the layout): "
           "chorus reduces dense buffers only; the gate stays (docs/TORCH.md says why)")
KNOWN_GAPS = {
    **{f"test_monitored_barrier_{t}": _MONITORED
       for t in ("gloo", "gloo_rank_0_timeout", "gloo_subgroup", "failure_order",
                 "wait_all_ranks", "allreduce_hang", "allreduce_hang_wait_all_ranks")},
    "test_sparse_all_reduce_sum": _SPARSE,
}
