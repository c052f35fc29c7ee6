"""The performance targets compare.py --targets checks: TARGETS is the table (one row per target),
check_targets() holds the medians against it."""

from common import human
from report import speedup

MiB = 1 << 20
FIVE = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce")
FROM_1K = "every size >= 1 KiB"  # the measured sizes from 1 KiB to 256 MiB
GRID = [1 << k for k in range(10, 29, 2)]  # the 'every size' targets need 1 KiB .. 256 MiB, x4
STARTUP_MS = 45

# (name, world size, collectives, sizes, the speed-up needed, against): one target per row.
# A row of one collective and one size is a single measurement; otherwise the worst cell counts.
# against: "openmpi", or "faster_mpi" (the faster of Open MPI and MPICH, both measured).
TARGETS = [
    ("np=2 all_reduce 64 MiB busbw >= 3x Open MPI", 2, ("all_reduce",), (64 * MiB,), 3, "openmpi"),
    ("np=2 all_reduce 256 MiB busbw >= 3x Open MPI", 2, ("all_reduce",), (256 * MiB,), 3, "openmpi"),
    ("np=2 all_reduce 1 MiB busbw >= 1.5x Open MPI", 2, ("all_reduce",), (1 * MiB,), 1.5, "openmpi"),
    ("np=2 all_reduce 8 B time <= Open MPI", 2, ("all_reduce",), (8,), 1, "openmpi"),
    *[(f"np=2 {c} 64 MiB >= 2x Open MPI", 2, (c,), (64 * MiB,), 2, "openmpi")
      for c in ("reduce_scatter", "all_gather", "broadcast", "reduce")],
    *[row for n in (4, 8) for row in (
        (f"np={n} every collective 64 MiB >= 2x Open MPI", n, FIVE, (64 * MiB,), 2, "openmpi"),
        (f"np={n} every collective, every size >= 1 KiB, no slower than Open MPI", n, FIVE, FROM_1K,
         1, "openmpi"))],
    *[(f"np={n} every collective 1 KiB-256 MiB >= the faster of Open MPI and MPICH", n, FIVE,
       FROM_1K, 1, "faster_mpi") for n in (2, 4)],
]


def peer_time(med, against, n, coll, size):
    if against == "openmpi":
        return med.get(("openmpi", n, coll, size))
    times = [med.get((p, n, coll, size)) for p in ("openmpi", "mpich")]
    return min(times) if all(times) else None


def check_row(med, row, sizes):
    """(name, status, detail) of one TARGETS row."""
    name, n, colls, row_sizes, need, against = row
    if row_sizes == FROM_1K:
        row_sizes = [s for s in sizes if (1 << 10) <= s <= (256 * MiB)]
    if len(colls) == 1 and len(row_sizes) == 1:
        coll, size = colls[0], row_sizes[0]
        r = speedup(peer_time(med, against, n, coll, size), med.get(("chorus", n, coll, size)))
        if r is None:
            return name, "NOT MEASURED", f"needs --np {n}, --sizes {human(size)}, {coll}, Open MPI"
        return name, "MET" if r >= need else "NOT MET", f"{r:.2f}x (need {need}x)"
    worst, missing = None, []
    for coll in colls:
        for size in row_sizes:
            r = speedup(peer_time(med, against, n, coll, size), med.get(("chorus", n, coll, size)))
            if r is None:
                missing.append(f"{coll} {human(size)}")
            elif worst is None or r < worst[0]:
                worst = (r, coll, size)
    if worst is None:
        return name, "NOT MEASURED", f"needs --np {n} and the sizes"
    status = "MET" if worst[0] >= need else "NOT MET"
    detail = f"worst {worst[0]:.2f}x at {worst[1]} {human(worst[2])} (need {need}x)"
    if missing:
        status = "NOT MEASURED" if status == "MET" else status
        detail += f"; not measured: {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}"
    return name, status, detail


def check_targets(med, startup, nps, colls, sizes):
    """[(target, status, detail)], status in MET, NOT MET, NOT MEASURED."""
    out = [check_row(med, row, sizes) for row in TARGETS]
    missing_grid = [s for s in GRID if s not in sizes]
    if missing_grid:
        out.append(("size grid for the 'every size' targets", "NOT MEASURED",
                    f"--sizes lacks {', '.join(human(s) for s in missing_grid)} (x4 grid 1 KiB-256 MiB)"))
    name = f"start-up <= {STARTUP_MS} ms (chorus-run, 2 ranks, to first all-reduce)"
    c = startup.get("chorus")
    if c is None:
        out.append((name, "NOT MEASURED", ""))
    else:
        out.append((name, "MET" if c <= STARTUP_MS else "NOT MET", f"{c:.1f} ms"))
    return out
