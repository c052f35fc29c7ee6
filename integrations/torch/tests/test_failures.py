"""Failures surface as Python exceptions carrying chorus's text, never as hangs: a killed rank
(chorus_torch.PeerFailure naming it, also under DDP), a rank that never arrives
(chorus_torch.Timeout after the group's timeout), ranks that disagree (chorus_torch.Mismatch),
calls or arguments the backend does not support (an error naming the call, after which the
group still works), and the group's monitored_barrier naming the ranks that did not arrive."""
import os
import signal

from harness import run_ranks, values


def killed_rank(rank, n):
    import torch
    import torch.distributed as dist
    t = torch.ones(1000)
    dist.all_reduce(t)
    if rank == n - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        for _ in range(3):
            dist.all_reduce(t)
    except Exception as e:
        return type(e).__name__, type(e).__module__, str(e)
    return None


def test_killed_rank_raises_peer_failure_on_the_others():
    res = run_ranks(killed_rank, 3, timeout=90, pg_timeout_s=120)
    assert res[2].exitcode == -signal.SIGKILL
    for r in res[:2]:
        assert r.ok(), r
        assert r.value is not None, "rank %d: no error after its peer died" % r.rank
        cls, module, text = r.value
        assert (module, cls) == ("chorus_torch", "PeerFailure"), r.value
        assert "rank 2" in text, text


def killed_rank_in_ddp(rank, n):
    import torch
    import torch.distributed as dist
    import train_gpt
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    ddp = DDP(train_gpt.GPT(256, 32, 2, 64, 4))
    data = train_gpt.batches(4, 32, 256, rank)
    try:
        for step in range(10):
            if step == 3 and rank == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            x, y = next(data)
            ddp(x, y).backward()
            dist.barrier()
    except Exception as e:
        return step, type(e).__name__, str(e)
    return None


def test_killed_rank_in_ddp_backward_raises():
    res = run_ranks(killed_rank_in_ddp, 2, timeout=120, pg_timeout_s=120)
    assert res[1].exitcode == -signal.SIGKILL
    assert res[0].ok(), res[0]
    assert res[0].value is not None, "rank 0 trained on after rank 1 died"
    step, cls, text = res[0].value
    assert step == 3 and "rank 1" in text, res[0].value


def absent_rank(rank, n):
    import time
    import torch
    import torch.distributed as dist
    if rank == 1:
        time.sleep(4)     # never calls all_reduce; rank 0's deadline (2 s) passes first
        return None
    t0 = time.monotonic()
    try:
        dist.all_reduce(torch.ones(10))
    except Exception as e:
        return type(e).__name__, str(e), time.monotonic() - t0
    return None


def test_group_timeout_raises_chorus_timeout_naming_the_absent_rank():
    res = values(run_ranks(absent_rank, 2, timeout=60, pg_timeout_s=2))
    cls, text, waited = res[0]
    assert cls == "Timeout", res[0]
    assert "rank 1" in text, text
    assert 1.5 < waited < 20, waited


def mismatched(rank, n):
    import torch
    import torch.distributed as dist
    try:
        dist.all_reduce(torch.ones(10 + rank))
    except Exception as e:
        return type(e).__name__, str(e)
    return None


def test_mismatched_counts_raise_mismatch():
    res = values(run_ranks(mismatched, 2, timeout=60, pg_timeout_s=30))
    for r, v in enumerate(res):
        assert v is not None and v[0] == "Mismatch", (r, v)


def unsupported(rank, n):
    import warnings
    import torch
    import torch.distributed as dist
    warnings.simplefilter("ignore")
    calls = {
        "allreduce": lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32),
                                             op=dist.ReduceOp.BAND),
        "allreduce int16": lambda: dist.all_reduce(torch.ones(4, dtype=torch.int16)),
        "allreduce bool": lambda: dist.all_reduce(torch.ones(4, dtype=torch.bool)),
        "allreduce sparse": lambda: dist.all_reduce(torch.ones(4).to_sparse()),
        "allgather_coalesced": lambda: dist.all_gather_coalesced([[torch.ones(2)]] * n,
                                                                 [torch.ones(3)]),
        # torch itself refuses this one for every backend but gloo:
        "monitored_barrier": lambda: dist.monitored_barrier(),
        "send": lambda: dist.send(torch.ones(2), (rank + 1) % n, tag=-1),
        "allreduce multigpu": lambda: dist.all_reduce_multigpu([torch.ones(2), torch.ones(2)]),
        "allgather": lambda: dist.all_gather([torch.ones(3)] * n, torch.ones(2)),
        "_reduce_scatter_base": lambda: dist.reduce_scatter_tensor(torch.ones(2), torch.ones(3)),
    }
    out = {}
    for name, call in calls.items():
        try:
            call()
            out[name] = None
        except Exception as e:
            out[name] = (type(e).__name__, str(e))
    # The group still works: the errors came before anything reached chorus.
    t = torch.ones(5)
    dist.all_reduce(t)
    out["after"] = t.tolist()
    return out


def test_unsupported_calls_raise_errors_naming_the_call():
    for r, out in enumerate(values(run_ranks(unsupported, 2, timeout=90))):
        assert out.pop("after") == [2.0] * 5
        for name, err in out.items():
            assert err is not None, "rank %d: %s did not raise" % (r, name)
            cls, text = err
            assert name.split()[0] in text, (name, err)
            assert cls in ("InvalidArgument", "NotImplementedError", "RuntimeError"), (name, err)


def monitored(rank, n):
    import datetime
    import time
    import torch
    import torch.distributed as dist
    # torch 1.13's dist.monitored_barrier admits gloo only: the group's own method is the way in.
    pg = dist.distributed_c10d._get_default_group()
    out = {}
    for name, wait_all, away, late, _ in MONITORED_ROUNDS:
        pg.monitored_barrier(datetime.timedelta(seconds=30))  # everyone arrives
        if rank in away:
            time.sleep(3)  # past the barrier's 1 s
        elif rank in late:
            time.sleep(0.5)  # within it: rank 0's verdict comes 0.5 s after the others' 1 s
        try:
            pg.monitored_barrier(datetime.timedelta(seconds=1), wait_all_ranks=wait_all)
            out[name] = None
        except Exception as e:
            out[name] = (type(e).__name__, str(e))
    t = torch.ones(3)
    dist.all_reduce(t)
    out["after"] = t.tolist()
    return out


# (name, wait_all_ranks, the ranks that never arrive in time, the ranks that arrive late but in
# time, the ranks every rank's error names)
MONITORED_ROUNDS = (("first missing", False, {2}, set(), "Rank 2 "),
                    ("all missing", True, {1, 2}, set(), "Ranks 1, 2 "),
                    ("rank 0 late", False, {2}, {0}, "Rank 2 "))


def test_monitored_barrier_names_the_ranks_that_did_not_arrive():
    for r, out in enumerate(values(run_ranks(monitored, 3, timeout=90))):
        assert out.pop("after") == [3.0] * 3, (r, out)  # the group still works
        for name, _, _, _, named in MONITORED_ROUNDS:
            got = out[name]
            assert got is not None, (r, name, "did not raise")
            cls, text = got
            assert cls == "Timeout", (r, name, got)
            assert named + "failed to pass monitoredBarrier in 1000 ms" in text, (r, name, text)
