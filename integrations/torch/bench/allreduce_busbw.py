#!/usr/bin/python3
"""torch.distributed all_reduce bandwidth through each backend, nccl-tests style.

    PYTHONPATH=build/python integrations/torch/bench/allreduce_busbw.py --np 2 --launches 5

Each launch starts --np ranks (torch.multiprocessing spawn, init_method file://) on one backend;
launches alternate between the backends (chorus, gloo, chorus, gloo, ...) so that both see the
same machine. Each launch waits (up to --quiet-wait s) for an idle machine, reports the CPU
other processes took while it ran (quiet.py), and is run again (up to --retries times) when that
was more than 5% of the CPUs. Per size: float32 SUM in place, --warmup calls, then --blocks timed
blocks of calls; a launch's time per call is the median over its blocks of the slowest rank's block time.
The table gives, per size and backend, the median over launches of algbw = bytes / time and
busbw = algbw * 2 (n - 1) / n (what each rank's link carries in a ring), with [min-max], and
chorus's busbw over gloo's. --json writes every launch's numbers.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from quiet import Launch

SIZES = [8, 64, 512, 4 << 10, 32 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20,
         256 << 20]


def human(b):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= k and b % k == 0:
            return "%d %s" % (b // k, unit)
    return "%d B" % b


def calls_per_block(size):
    """Enough calls that a block takes milliseconds, few enough that gloo's 256 MiB ends."""
    if size <= 64 << 10:
        return 200
    if size <= 1 << 20:
        return 50
    if size <= 16 << 20:
        return 10
    return 3


def rank_main(rank, args, backend, init, out):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    if backend == "chorus":
        import chorus_torch  # noqa: F401
    dist.init_process_group(backend, init_method="file://" + init, rank=rank,
                            world_size=args.np)
    rows = []
    for size in args.sizes:
        t = torch.ones(size // 4)
        calls = calls_per_block(size)
        for _ in range(args.warmup):
            dist.all_reduce(t)
        blocks = []
        for _ in range(args.blocks):
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(calls):
                dist.all_reduce(t)
            dt = torch.tensor([(time.perf_counter() - t0) / calls], dtype=torch.float64)
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)   # the slowest rank's block
            blocks.append(dt.item())
        rows.append({"bytes": size, "time_s": statistics.median(blocks), "blocks_s": blocks})
    if rank == 0:
        with open(out, "w") as f:
            json.dump(rows, f)
    dist.destroy_process_group()


def launch(args, backend):
    import torch.multiprocessing as mp
    d = tempfile.mkdtemp(prefix="busbw_")
    init, out = os.path.join(d, "init"), os.path.join(d, "out.json")
    mp.spawn(rank_main, args=(args, backend, init, out), nprocs=args.np, join=True)
    with open(out) as f:
        rows = json.load(f)
    for p in (init, out):
        if os.path.exists(p):
            os.remove(p)
    os.rmdir(d)
    return rows


def summary(xs):
    return statistics.median(xs), min(xs), max(xs)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--launches", type=int, default=3, help="launches per backend")
    ap.add_argument("--backends", default="chorus,gloo")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--blocks", type=int, default=3)
    ap.add_argument("--max-bytes", type=int, default=256 << 20)
    ap.add_argument("--quiet-wait", type=float, default=120,
                    help="seconds to wait for an idle machine before each launch")
    ap.add_argument("--retries", type=int, default=3,
                    help="times a contended launch is run again (the last one is kept)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    args.sizes = [s for s in SIZES if s <= args.max_bytes]
    backends = args.backends.split(",")
    runs = {b: [] for b in backends}
    guards = []
    for i in range(args.launches):
        for b in backends:
            for attempt in range(args.retries + 1):   # a contended launch is run again
                with Launch(args.quiet_wait) as g:
                    rows = launch(args, b)
                if not g.contended:
                    break
                print("launch %d %s: contended (%s)%s" % (
                    i, b, g.describe(), "; again" if attempt < args.retries else "; kept"),
                    file=sys.stderr, flush=True)
            runs[b].append(rows)
            guards.append({"launch": i, "backend": b, "other_cpu_s": g.other_cpu_s,
                           "contended": g.contended, "waited_out": g.waited_out})
            print("launch %d %s: %s" % (i, b, g.describe()), file=sys.stderr, flush=True)
    n = args.np
    print("np=%d, float32 sum in place, median [min-max] over %d launches per backend; %d of %d "
          "launches contended (others used > 5%% of the CPUs)" % (
              n, args.launches, sum(g["contended"] for g in guards), len(guards)))
    head = "| size |" + "".join(" %s time us | %s busbw GB/s |" % (b, b) for b in backends)
    if "chorus" in backends and "gloo" in backends:
        head += " chorus/gloo busbw |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for k, size in enumerate(args.sizes):
        line = "| %s |" % human(size)
        med = {}
        for b in backends:
            ts = [r[k]["time_s"] for r in runs[b]]
            bus = [size / t * 2 * (n - 1) / n / 1e9 for t in ts]
            tm, tlo, thi = summary(ts)
            bm, blo, bhi = summary(bus)
            med[b] = bm
            line += " %.1f [%.1f-%.1f] | %.3f [%.3f-%.3f] |" % (tm * 1e6, tlo * 1e6, thi * 1e6,
                                                               bm, blo, bhi)
        if "chorus" in med and "gloo" in med:
            line += " %.2fx |" % (med["chorus"] / med["gloo"])
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"np": n, "launches": runs, "guards": guards}, f)


if __name__ == "__main__":
    main()
