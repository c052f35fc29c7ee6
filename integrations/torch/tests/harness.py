"""Runs a function on N real processes with a process group, with a hard time bound.

    results = run_ranks(fn, world_size, init="file", timeout=60, args=(...))

Each rank is a fresh process (multiprocessing's spawn: no state shared with pytest), which sets
up torch.distributed with `backend` through the init method (file://, tcp:// or env://), calls
fn(rank, world_size, *args), and reports its return value or its exception. run_ranks returns
one RankResult per rank. A rank still running at the deadline is killed and the call fails, so
a hang fails the test instead of blocking it. Ranks may also die on purpose (the failure tests):
their result then has `exitcode` set and no value.
"""
import datetime
import multiprocessing
import os
import queue
import socket
import tempfile
import time
import traceback
from dataclasses import dataclass
from typing import Any, Optional


@dataclass
class RankResult:
    rank: int
    value: Any = None
    error_type: Optional[str] = None   # the exception's class name ("PeerFailure", ...)
    error: Optional[str] = None        # str() of the exception
    traceback: Optional[str] = None
    exitcode: Optional[int] = None     # set when the process ended without reporting

    def ok(self):
        return self.error_type is None and self.exitcode in (None, 0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(fn, rank, world_size, backend, init_method, env, pg_timeout_s, args, results):
    os.environ.update(env)
    try:
        import torch
        import torch.distributed as dist
        torch.set_num_threads(1)
        import chorus_torch  # noqa: F401  (registers "chorus")
        if backend is not None:
            kw = {}
            if pg_timeout_s is not None:
                kw["timeout"] = datetime.timedelta(seconds=pg_timeout_s)
            if init_method == "env://":
                dist.init_process_group(backend, **kw)
            else:
                dist.init_process_group(backend, init_method=init_method, rank=rank,
                                        world_size=world_size, **kw)
        value = fn(rank, world_size, *args)
        results.put(RankResult(rank, value=value))
        if backend is not None:
            dist.destroy_process_group()
    except BaseException as e:  # report everything, including KeyboardInterrupt-like exits
        results.put(RankResult(rank, error_type=type(e).__name__, error=str(e),
                               traceback=traceback.format_exc()))


def run_ranks(fn, world_size, *, backend="chorus", init="file", timeout=60.0, env=None,
              pg_timeout_s=None, args=()):
    """Runs fn on world_size processes; returns [RankResult] in rank order.

    init: "file", "tcp" or "env" (MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE set per rank, as
    torchrun does). backend=None skips init_process_group (fn sets up what it needs).
    """
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    tmp = tempfile.TemporaryDirectory(prefix="chorus_torch_test_")
    port = free_port()
    procs = []
    base_env = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    base_env.update(env or {})
    for rank in range(world_size):
        rank_env = dict(base_env)
        if init == "file":
            init_method = "file://" + os.path.join(tmp.name, "init")
        elif init == "tcp":
            init_method = "tcp://127.0.0.1:%d" % port
        elif init == "env":
            init_method = "env://"
            rank_env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                            WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
        else:
            raise ValueError(init)
        p = ctx.Process(target=_rank_main, args=(fn, rank, world_size, backend, init_method,
                                                  rank_env, pg_timeout_s, args, results),
                        daemon=True)
        p.start()
        procs.append(p)
    deadline = time.monotonic() + timeout
    got = {}
    try:
        while len(got) < world_size:
            try:
                r = results.get(timeout=0.1)
                got[r.rank] = r
                continue
            except queue.Empty:
                pass
            # A rank that died without reporting counts as done.
            for rank, p in enumerate(procs):
                if rank not in got and p.exitcode is not None:
                    # Its report may still be in the pipe.
                    try:
                        r = results.get(timeout=0.5)
                        got[r.rank] = r
                    except queue.Empty:
                        got[rank] = RankResult(rank, exitcode=p.exitcode)
                    break
            if time.monotonic() > deadline:
                missing = sorted(set(range(world_size)) - set(got))
                raise AssertionError("ranks %s did not finish within %.0f s (killed); finished: %s"
                                     % (missing, timeout, {r: got[r] for r in sorted(got)}))
        for p in procs:
            p.join(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
        tmp.cleanup()
    for rank, p in enumerate(procs):
        if got[rank].exitcode is None and p.exitcode not in (0, None):
            got[rank].exitcode = p.exitcode
    return [got[r] for r in range(world_size)]


def values(results):
    """The ranks' return values; raises with every failed rank's report otherwise."""
    bad = [r for r in results if not r.ok()]
    if bad:
        raise AssertionError("\n".join(
            "rank %d: %s: %s%s" % (r.rank, r.error_type or "exit code %s" % r.exitcode, r.error,
                                   "\n" + r.traceback if r.traceback else "") for r in bad))
    return [r.value for r in results]
