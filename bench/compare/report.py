"""compare.py's report: speed-ups, the table per world size and the copy-roofline table."""

from common import COLLS, ROOFLINE_BYTES, human
from peers import PEERS


# The roofline rows: collective, the processes that copy at np=n, the key of its shared-memory
# variant in the roofline dict and chorus-copy-roofline's flags for each.
ROOFLINES = (
    ("all_gather", lambda n: n, None, [], None),
    ("broadcast", lambda n: n - 1, "broadcast/ring", [], ["--ring"]),
    ("all_reduce", lambda n: n, "all_reduce/shared", ["--all-reduce"], ["--all-reduce", "--shared"]),
)


def roofline_table(nps, med, roof):
    """What the machine allows at 64 MiB, as busbw, beside chorus and Open MPI: all-gather (n
    processes fill their result from one shared source) and broadcast (n - 1 receivers do), and
    the broadcast's receivers copying out of a ring that the root's process fills (the source read
    once); for all-reduce, each of n processes doing one ring rank's copies and reductions on slots
    of its own, and through shared FIFOs to its neighbour (a ring all-reduce with nothing but its
    copies, reductions and hand-offs)."""
    size = ROOFLINE_BYTES
    lines = ["### roofline at 64 MiB, as busbw (chorus-copy-roofline): all-gather and broadcast: "
             "every copying process fills its buffer from one shared source (streaming stores, no "
             "messages), broadcast through shared memory: out of a ring one writer fills; "
             "all-reduce: each process does one ring rank's copies and reductions on slots of its "
             "own, through shared memory: through FIFOs to the next process", "",
             "| np | collective | roofline | through shared memory | chorus | Open MPI | "
             "roofline / Open MPI | through shared memory / Open MPI |",
             "|---|---|---|---|---|---|---|---|"]
    for n in nps:
        for coll, _, shared_key, _, _ in ROOFLINES:
            factor = COLLS[coll][1](n)
            algbw = roof.get((n, coll))
            shared = roof.get((n, shared_key)) if shared_key else None
            if algbw is None and shared is None:
                continue
            busbw = lambda lib: (size / med[(lib, n, coll, size)] / 1e3 * factor
                                 if (lib, n, coll, size) in med else None)
            o = busbw("openmpi")
            gbps = lambda v: "-" if v is None else f"{v:.2f} GB/s"
            ratio = lambda v: f"{v / o:.2f}x" if v is not None and o else "-"
            bound = None if algbw is None else algbw * factor
            through = None if shared is None else shared * factor
            lines.append(f"| {n} | {coll} | {gbps(bound)} | {gbps(through)} | {gbps(busbw('chorus'))} | "
                         f"{gbps(o)} | {ratio(bound)} | {ratio(through)} |")
    return "\n".join(lines)


def speedup(peer_us, chorus_us):
    return peer_us / chorus_us if peer_us and chorus_us else None


def fmt_ratio(r):
    return "-" if r is None else f"{r:.2f}x"


def fmt_cell(us, size, factor):
    if us is None:
        return "-"
    if size < 64 * 1024:
        return f"{us:.2f} us"
    return f"{size / us / 1e3 * factor:.2f} GB/s"


def table(n, colls, sizes, med, algos, peers, rounds):
    labels = [PEERS[p][0] for p in peers]
    lines = [f"### np={n}: median of {rounds} alternating round(s); time per call below 64 KiB, "
             f"busbw above; ratios = speed-up of chorus (> 1: chorus faster)", "",
             "| collective | size | chorus | " + " | ".join(labels) +
             " | chorus / best peer | chorus / Open MPI | chorus algorithm |",
             "|---|---|---|" + "---|" * len(labels) + "---|---|---|"]
    for coll in colls:
        f = COLLS[coll][1](n)
        for size in sizes:
            c = med.get(("chorus", n, coll, size))
            if c is None and all(med.get((p, n, coll, size)) is None for p in peers):
                continue
            peer_us = [med.get((p, n, coll, size)) for p in peers]
            known = [t for t in peer_us if t]
            best = min(known) if known else None
            lines.append(f"| {coll} | {human(size)} | {fmt_cell(c, size, f)} | " +
                         " | ".join(fmt_cell(t, size, f) for t in peer_us) +
                         f" | {fmt_ratio(speedup(best, c))} | "
                         f"{fmt_ratio(speedup(med.get(('openmpi', n, coll, size)), c))} | "
                         f"{algos.get((n, coll, size), '-')} |")
    return "\n".join(lines)
