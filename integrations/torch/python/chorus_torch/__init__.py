"""chorus_torch: chorus as a torch.distributed backend.

    import chorus_torch                                  # registers the backend "chorus"
    torch.distributed.init_process_group("chorus")       # torchrun, env://, tcp:// or file://

The process group sets chorus up through the store torch hands it (no second rendezvous) and
runs every collective on chorus's Communicator. Errors of chorus are raised as the exceptions
below (all RuntimeError, InvalidArgument also ValueError), with chorus's own text.
"""
import torch.distributed as _dist

if not _dist.is_available():
    raise ImportError("chorus_torch needs torch.distributed, which this torch was built without")

from ._C import (  # noqa: E402
    ChorusError,
    InvalidArgument,
    Mismatch,
    PeerFailure,
    ProcessGroupChorus,
    Timeout,
)

__all__ = ["ChorusError", "InvalidArgument", "Mismatch", "PeerFailure", "ProcessGroupChorus",
           "Timeout", "BACKEND"]

BACKEND = "chorus"

for _cls in (ChorusError, InvalidArgument, Mismatch, PeerFailure, ProcessGroupChorus, Timeout):
    _cls.__module__ = __name__   # chorus_torch.PeerFailure, not chorus_torch._C.PeerFailure


def _create_process_group(store, rank, world_size, timeout):
    # torch calls this as creator(prefix_store, group_rank, group_size, timeout) for the default
    # group and for every new_group(backend="chorus").
    return ProcessGroupChorus(store, rank, world_size, timeout)


if not hasattr(_dist.Backend, BACKEND.upper()):
    _dist.Backend.register_backend(BACKEND, _create_process_group)
