#!/usr/bin/env python3
"""chorus beside Open MPI, MPICH and Gloo on this machine, in one go.

Builds chorus-bench, chorus-run, chorus-startup-probe and chorus-copy-roofline (cmake --build), and
the peers' anchor programs from ../shared/anchors (mpi_coll.cpp with Open MPI's mpicxx.openmpi and
with MPICH's mpicxx.mpich, gloo_coll.cpp against libgloo-dev), plus mpi_reduce.cpp from this folder
for the rooted reduce, which the anchors lack (timed by their bench_common.h; no Gloo column). Then,
for each world size, runs them in alternating order for several rounds on the same sizes (Gloo first
in every round, then the others rotated: round r starts with the r-th of them, so each follows Gloo
equally often), and prints one markdown table per world size: the median over rounds of each
library, chorus / best peer and chorus / Open MPI (above --all-peers-to ranks, default 4, Open MPI
is the only peer). With 64 MiB among the sizes, the rooflines of all-gather, broadcast and
all-reduce at that size (chorus-copy-roofline: plain and --ring, --all-reduce alone and --shared;
docs/PERFORMANCE.md). Then the start-up time (process start to the first completed 8-byte
all-reduce, 2 ranks, chorus-run vs each mpirun; the median of --startup-runs launches), and with
--targets which of the performance targets are met.

    bench/compare/compare.py --build build                         # np 2 and 4, all sizes, 3 rounds
    bench/compare/compare.py --build build --np 2,4,8 --targets    # every target (np=8: Open MPI only)
    bench/compare/compare.py --build build --np 2 --sizes 8,1M --rounds 1 --targets

Every launch is kept in the output folder (--out, default BUILD/compare/<date-time>):
launches.csv (one row per library, round, world size, collective and size), startup.csv (one row
per start-up launch), raw/ (the anchors' own CSV files), summary.md (what is printed) and
summary.json (the medians and the targets).

Conventions, both sides: float32, sum, out of place (broadcast: in place, see IN_PLACE), root 0,
nccl-tests sizes and busbw
(all-reduce, broadcast and reduce: the per-rank buffer; reduce-scatter and all-gather: the whole buffer). chorus-bench
runs with -z 1 (blocking calls) like the anchors, which time blocking MPI/Gloo calls. A peer
time is the anchor's median over its three timed blocks; a chorus time is chorus-bench's time column
with --blocks 3: the median of three timed blocks as well (each block: the slowest rank's mean).
Ratios are speed-ups: time of the peer / time of chorus (= busbw of chorus / busbw of the peer);
above 1 chorus is faster.

Missing peers are skipped with the package to install (tools/install-deps.sh --with-mpi installs
all of them); --require-peers makes that an error instead.
"""
import argparse
import csv
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_ANCHORS = os.path.join(os.path.dirname(REPO), "shared", "anchors")

# chorus-bench name -> (anchor name, busbw factor as a function of n)
COLLS = {
    "all_reduce": ("allreduce", lambda n: 2 * (n - 1) / n),
    "reduce_scatter": ("reduce_scatter", lambda n: (n - 1) / n),
    "all_gather": ("allgather", lambda n: (n - 1) / n),
    "broadcast": ("broadcast", lambda n: 1.0),
    "reduce": ("reduce", lambda n: 1.0),  # MPI only: mpi_reduce.cpp here (Gloo has no anchor)
}
MPI_ONLY = {"reduce"}
# MPI_Bcast and Gloo's broadcast have one buffer: the root's is sent, the others' are overwritten.
# chorus's in-place broadcast is that operation; out of place, the root also copies its send
# buffer into its receive buffer, which no peer does.
IN_PLACE = {"broadcast"}
TOTAL_SIZE = {"reduce_scatter", "all_gather"}  # sizes are n x chunk

PEERS = {
    # name: label, packages, the tools it needs
    "openmpi": ("Open MPI", "openmpi-bin libopenmpi-dev", ["mpicxx.openmpi", "mpirun.openmpi"]),
    "mpich": ("MPICH", "mpich libmpich-dev", ["mpicxx.mpich", "mpirun.mpich"]),
    "gloo": ("Gloo", "libgloo-dev", ["g++"]),
}
GLOO_HEADER = "/usr/include/gloo/config.h"
DEFAULT_SIZES = "8,1K,4K,16K,64K,256K,1M,4M,16M,64M,256M"
ROOFLINE_BYTES = 64 << 20  # the size of the 2x targets


def parse_size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    return int(text[:-1]) * mult[text[-1]] if text[-1] in mult else int(text)


def human(b):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def run(cmd, timeout, **kwargs):
    """Runs cmd; returns (returncode, stdout, stderr) and never raises on failure or timeout."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        return 124, e.stdout or "", f"timed out after {timeout} s"


# ------------------------------------------------------------------------------------------- build

def build_chorus(build, skip):
    targets = ["chorus-bench", "chorus-run", "chorus-startup-probe", "chorus-copy-roofline"]
    if not skip:
        log(f"building {', '.join(targets)} in {build}")
        subprocess.run(["cmake", "--build", build, "--parallel", str(os.cpu_count() or 1),
                        "--target", *targets], check=True,
                       stdout=subprocess.DEVNULL)
    for t in targets:
        if not os.path.exists(os.path.join(build, "bin", t)):
            sys.exit(f"compare: {build}/bin/{t} is missing (build it, or drop --no-build)")


def peer_missing(peer):
    """None when the peer can be built and run, else the reason (with the package to install)."""
    label, packages, tools = PEERS[peer]
    missing = [t for t in tools if not shutil.which(t)]
    if peer == "gloo" and not os.path.exists(GLOO_HEADER):
        missing.append(GLOO_HEADER)
    if not missing:
        return None
    return (f"{label}: {', '.join(missing)} not found; install {packages} "
            f"(apt-get install {packages}, or tools/install-deps.sh --with-mpi)")


def compile_if_stale(cmd_prefix, src, exe, libs=()):
    if os.path.exists(exe) and os.path.getmtime(exe) >= os.path.getmtime(src):
        return
    os.makedirs(os.path.dirname(exe), exist_ok=True)
    subprocess.run([*cmd_prefix, "-O2", "-std=c++17", src, "-o", exe, *libs], check=True)


def build_peer(peer, anchors, bin_dir):
    """Returns {'coll': exe, 'startup': exe or None}."""
    if peer == "gloo":
        exe = os.path.join(bin_dir, "gloo_coll")
        compile_if_stale(["g++"], os.path.join(anchors, "gloo_coll.cpp"), exe, ["-lgloo", "-pthread"])
        return {"coll": exe, "startup": None}
    cxx = "mpicxx.openmpi" if peer == "openmpi" else "mpicxx.mpich"
    coll = os.path.join(bin_dir, f"mpi_coll_{peer}")
    reduce = os.path.join(bin_dir, f"mpi_reduce_{peer}")
    probe = os.path.join(bin_dir, f"startup_probe_{peer}")
    compile_if_stale([cxx], os.path.join(anchors, "mpi_coll.cpp"), coll)
    # The anchors have no rooted reduce: ours, timed by their bench_common.h.
    compile_if_stale([cxx, "-I", anchors], os.path.join(HERE, "mpi_reduce.cpp"), reduce)
    compile_if_stale([cxx], os.path.join(HERE, "startup_probe_mpi.cpp"), probe)
    return {"coll": coll, "reduce": reduce, "startup": probe}


# ----------------------------------------------------------------------------------------- launch

def peers_for(n, peers, all_peers_to):
    """The peers run at world size n: all of them up to all_peers_to ranks, above it Open MPI."""
    return [p for p in peers if n <= all_peers_to or p == "openmpi"]


def mpirun(peer, n):
    over = n > (os.cpu_count() or 1)
    if peer == "openmpi":
        cmd = ["mpirun.openmpi", "--allow-run-as-root", "--mca", "pml", "ob1", "--mca", "btl",
               "self,vader", "-np", str(n)]
        return cmd + (["--oversubscribe", "--bind-to", "none"] if over else [])
    return ["mpirun.mpich", "-np", str(n)] + ([] if over else ["-bind-to", "core"])


def run_peer(peer, exes, n, colls, sizes, raw_path, tag, timeout):
    """One launch of the peer's anchor over every collective and size (and one of the reduce
    anchor for an MPI peer asked for reduce): {(coll, bytes): us}."""
    anchor_colls = ",".join(COLLS[c][0] for c in colls if c not in MPI_ONLY)
    size_arg = ",".join(str(s) for s in sizes)
    over = n > (os.cpu_count() or 1)
    cmds = []
    if peer == "gloo":
        if anchor_colls:
            cmds.append([exes["coll"], "-n", str(n)] + (["-m", "300"] if over else []) +
                        ["-c", anchor_colls])
    else:
        # MPICH busy-polls: oversubscribed, every iteration waits for the scheduler.
        cap = ["-m", "20" if peer == "mpich" else "500"] if over else []
        if anchor_colls:
            cmds.append(mpirun(peer, n) + [exes["coll"]] + cap + ["-c", anchor_colls])
        if "reduce" in colls:
            cmds.append(mpirun(peer, n) + [exes["reduce"]] + cap)
    before = sum(1 for _ in open(raw_path)) if os.path.exists(raw_path) else 0
    for cmd in cmds:
        rc, out, err = run(cmd + ["-s", size_arg, "-o", raw_path, "-g", tag], timeout)
        if rc != 0:
            log(f"  {peer} np={n} {tag}: exit {rc}: {err.strip()[-300:]}")
    times = {}
    if os.path.exists(raw_path):
        with open(raw_path) as f:
            for i, row in enumerate(csv.reader(f)):
                # lib,variant,np,coll,bytes,iters,tag,ok,block_us(;-separated)
                if i < before or len(row) < 9:
                    continue
                coll = next((c for c in colls if COLLS[c][0] == row[3]), None)
                if coll is None or row[7] != "1":
                    continue
                blocks = [float(x) for x in row[8].split(";") if x]
                times[(coll, int(row[4]))] = statistics.median(blocks)
    return times


# Timed blocks per chorus line, the median reported: the anchors' default (bench_common.h, -r 3).
BLOCKS = 3


def chorus_iters(size):
    """Enough iterations for ~0.1-0.5 s per line, at least 5 (split into BLOCKS timed blocks of
    at least 2 calls, as the anchors time theirs); and a warm-up like the anchors'.
    Their calibration (bench_common.h) calls the collective 1, 2, 4, ... times until one run
    takes 20 ms or 2000 calls: up to 4095 calls before the first timed one. Small calls right
    after the launch run several times slower than later ones on this VM (1 KiB all_gather,
    np=2: 1.1-3.7 us over 2000 calls after 200 warm-up calls, 0.6 us after 4000), so chorus gets
    as many: 4095 calls below 16 KiB, then about 64 MiB's worth, at least 2."""
    iters = max(5, min(2000, (1 << 29) // max(size, 1)))
    return max(2, iters // BLOCKS), max(2, min(4095, (1 << 26) // max(size, 1)))


def run_chorus(build, n, coll, size, blocking, timeout):
    """One chorus-bench launch for one (collective, size): (us, algorithm, wrong) or None."""
    iters, warmup = chorus_iters(size)
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [os.path.join(build, "bin", "chorus-run"), "-n", str(n),
               os.path.join(build, "bin", "chorus-bench"), coll, "-b", str(size), "-e", str(size),
               "-n", str(iters), "--blocks", str(BLOCKS), "-w", str(warmup), "-z", str(blocking),
               "--json", f.name]
        rc, out, err = run(cmd, timeout)
        try:
            rows = json.load(open(f.name))["rows"]
        except (OSError, ValueError, KeyError):
            rows = []
    if rc not in (0, 1) or not rows:
        log(f"  chorus np={n} {coll} {size}: exit {rc}: {err.strip()[-300:]}")
        return None
    placement = "in-place" if coll in IN_PLACE else "out-of-place"
    row = next(r for r in rows if r["placement"] == placement)
    return row["time_us"], row["algorithm"], row["wrong"] or 0, row["size"]


def roofline_gbps(build, procs, size, extra=(), runs=3):
    """Median bytes / time of chorus-copy-roofline with `procs` processes of `size` bytes and the
    flags in `extra` (None if it fails): by default each process fills its buffer from one shared
    source with streaming stores; ["--ring"] out of a shared ring one more process fills;
    ["--all-reduce", ...] one ring all-reduce rank's work each (alone, or "--shared": through
    FIFOs between neighbours), with the warm-up and timed calls chorus-bench makes at that size."""
    exe = os.path.join(build, "bin", "chorus-copy-roofline")
    extra = list(extra)
    if "--all-reduce" in extra:
        iters, warmup = chorus_iters(size)
        extra += ["--iters", str(iters * BLOCKS), "--warmup", str(warmup)]
    got = []
    for _ in range(runs):
        cmd = [exe, "--procs", str(procs), "--bytes", str(size)] + extra
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            log(f"  {' '.join(cmd[1:])}: exit {p.returncode}: {p.stderr.strip()[-200:]}")
            return None
        got.append(float(p.stdout.split("bytes / time")[1].split()[0]))
    return statistics.median(got)


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


def startup_runs(cmd, runs, timeout):
    """Launches cmd `runs` times: [(to first all-reduce ms, to exit ms)]."""
    out_rows = []
    for _ in range(runs):
        t0 = time.monotonic_ns()
        rc, out, err = run(cmd, timeout)
        t_exit = time.monotonic_ns()
        done = next((int(line.split()[1]) for line in out.splitlines()
                     if line.startswith("first_allreduce_done_ns")), None)
        if rc != 0 or done is None:
            log(f"  start-up {' '.join(cmd[:2])}: exit {rc}: {err.strip()[-200:]}")
            continue
        out_rows.append(((done - t0) / 1e6, (t_exit - t0) / 1e6))
    return out_rows


def hyperfine_ms(cmds, runs, out_dir):
    """Whole-launch medians (start to exit, ms) from hyperfine, when it is installed."""
    if not shutil.which("hyperfine"):
        return {}
    path = os.path.join(out_dir, "hyperfine.json")
    args = ["hyperfine", "-N", "--warmup", "2", "--runs", str(runs), "--export-json", path]
    for name, cmd in cmds.items():
        args += ["-n", name, " ".join(cmd)]
    rc, out, err = run(args, 600)
    if rc != 0:
        log(f"  hyperfine: exit {rc}: {err.strip()[-300:]}")
        return {}
    return {r["command"]: r["median"] * 1e3 for r in json.load(open(path))["results"]}


# ----------------------------------------------------------------------------------------- report

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


def check_targets(med, startup, nps, colls, sizes):
    """[(target, status, detail)], status in MET, NOT MET, NOT MEASURED."""
    out = []

    def ratio(n, coll, size, peer="openmpi"):
        return speedup(med.get((peer, n, coll, size)), med.get(("chorus", n, coll, size)))

    def single(name, n, coll, size, need):
        r = ratio(n, coll, size)
        if r is None:
            out.append((name, "NOT MEASURED", f"needs --np {n}, --sizes {human(size)}, {coll}, Open MPI"))
        else:
            out.append((name, "MET" if r >= need else "NOT MET", f"{r:.2f}x (need {need}x)"))

    def every(name, n, coll_list, size_list, need, peers_fn):
        worst = None
        missing = []
        for coll in coll_list:
            for size in size_list:
                peer_t = peers_fn(n, coll, size)
                c = med.get(("chorus", n, coll, size))
                r = speedup(peer_t, c)
                if r is None:
                    missing.append(f"{coll} {human(size)}")
                elif worst is None or r < worst[0]:
                    worst = (r, coll, size)
        if worst is None:
            out.append((name, "NOT MEASURED", f"needs --np {n} and the sizes"))
            return
        status = "MET" if worst[0] >= need else "NOT MET"
        detail = f"worst {worst[0]:.2f}x at {worst[1]} {human(worst[2])} (need {need}x)"
        if missing:
            status = "NOT MEASURED" if status == "MET" else status
            detail += f"; not measured: {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}"
        out.append((name, status, detail))

    five = ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce"]
    from_1k = [s for s in sizes if (1 << 10) <= s <= (256 << 20)]
    grid = [1 << k for k in range(10, 29, 2)]  # 1 KiB .. 256 MiB, x4
    missing_grid = [s for s in grid if s not in sizes]
    ompi = lambda n, c, s: med.get(("openmpi", n, c, s))
    faster_mpi = lambda n, c, s: (min(t for t in (med.get(("openmpi", n, c, s)),
                                                   med.get(("mpich", n, c, s))) if t)
                                  if (med.get(("openmpi", n, c, s)) and med.get(("mpich", n, c, s)))
                                  else None)

    single("np=2 all_reduce 64 MiB busbw >= 3x Open MPI", 2, "all_reduce", 64 << 20, 3)
    single("np=2 all_reduce 256 MiB busbw >= 3x Open MPI", 2, "all_reduce", 256 << 20, 3)
    single("np=2 all_reduce 1 MiB busbw >= 1.5x Open MPI", 2, "all_reduce", 1 << 20, 1.5)
    single("np=2 all_reduce 8 B time <= Open MPI", 2, "all_reduce", 8, 1)
    for coll in ("reduce_scatter", "all_gather", "broadcast", "reduce"):
        single(f"np=2 {coll} 64 MiB >= 2x Open MPI", 2, coll, 64 << 20, 2)
    for n in (4, 8):
        every(f"np={n} every collective 64 MiB >= 2x Open MPI", n, five, [64 << 20], 2, ompi)
        every(f"np={n} every collective, every size >= 1 KiB, no slower than Open MPI", n, five,
              from_1k, 1, ompi)
    for n in (2, 4):
        every(f"np={n} every collective 1 KiB-256 MiB >= the faster of Open MPI and MPICH",
              n, five, from_1k, 1, faster_mpi)
    if missing_grid:
        out.append(("size grid for the 'every size' targets", "NOT MEASURED",
                    f"--sizes lacks {', '.join(human(s) for s in missing_grid)} (x4 grid 1 KiB-256 MiB)"))
    c = startup.get("chorus")
    if c is None:
        out.append(("start-up <= 45 ms (chorus-run, 2 ranks, to first all-reduce)", "NOT MEASURED", ""))
    else:
        out.append(("start-up <= 45 ms (chorus-run, 2 ranks, to first all-reduce)",
                    "MET" if c <= 45 else "NOT MET", f"{c:.1f} ms"))
    return out


# ------------------------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="chorus build folder (default build)")
    ap.add_argument("--no-build", action="store_true", help="use the binaries as they are")
    ap.add_argument("--anchors", default=DEFAULT_ANCHORS, help="the anchors folder (../shared/anchors)")
    ap.add_argument("--np", default="2,4", help="world sizes (default 2,4)")
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help=f"bytes, K/M/G suffixes (default {DEFAULT_SIZES})")
    ap.add_argument("--colls", default=",".join(COLLS),
                    help="default: all five (reduce against the MPI peers only)")
    ap.add_argument("--peers", default=",".join(PEERS), help="default: openmpi,mpich,gloo")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    ap.add_argument("--all-peers-to", type=int, default=4,
                    help="world sizes above this run chorus and Open MPI only (default 4): the "
                         "targets there name Open MPI, and MPICH's and Gloo's oversubscribed "
                         "ranks take milliseconds per small call")
    ap.add_argument("--blocking", type=int, choices=(0, 1), default=1, help="chorus-bench -z (default 1)")
    ap.add_argument("--startup-runs", type=int, default=20, help="launches per start-up median (default 20; 0: skip)")
    ap.add_argument("--targets", action="store_true", help="also print which targets are met")
    ap.add_argument("--require-peers", action="store_true", help="fail when a peer is not installed")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per launch (default 900)")
    ap.add_argument("--out", help="output folder (default BUILD/compare/<date-time>)")
    args = ap.parse_args()

    build = os.path.abspath(args.build)
    nps = [int(x) for x in args.np.split(",")]
    colls = args.colls.split(",")
    for c in colls:
        if c not in COLLS:
            sys.exit(f"compare: unknown collective {c} (one of {', '.join(COLLS)})")
    sizes = sorted({parse_size(s) for s in args.sizes.split(",")})
    out_dir = os.path.abspath(args.out or os.path.join(
        build, "compare", datetime.datetime.now().strftime("%Y%m%d-%H%M%S")))
    os.makedirs(os.path.join(out_dir, "raw"), exist_ok=True)
    os.makedirs(os.path.join(out_dir, "bin"), exist_ok=True)

    build_chorus(build, args.no_build)
    peers, exes, notes = [], {}, []
    for p in args.peers.split(","):
        if p not in PEERS:
            sys.exit(f"compare: unknown peer {p} (one of {', '.join(PEERS)})")
        why = peer_missing(p)
        if why:
            if args.require_peers:
                sys.exit(f"compare: {why}")
            notes.append(f"skipped {why}")
            log(f"compare: skipping {why}")
            continue
        exes[p] = build_peer(p, os.path.abspath(args.anchors), os.path.join(out_dir, "bin"))
        peers.append(p)

    med = {}      # (lib, n, coll, size) -> median us over rounds
    algos = {}    # (n, coll, size) -> chorus algorithm (last round)
    launches = open(os.path.join(out_dir, "launches.csv"), "w", newline="")
    writer = csv.writer(launches)
    writer.writerow(["lib", "np", "round", "order", "collective", "bytes", "time_us", "busbw_gbps",
                     "algorithm", "wrong"])
    t_start = time.monotonic()

    def peers_at(n):
        return peers_for(n, peers, args.all_peers_to)

    for n in nps:
        samples = {}
        libs = ["chorus"] + peers_at(n)
        for rnd in range(args.rounds):
            # Whatever runs right after Gloo's TCP anchor measured slower at small sizes (8 B
            # all-reduce: 0.49-0.62 us against 0.38-0.46 for the same library elsewhere in the
            # round), so Gloo goes first and the others take turns right after it.
            fast = [lib for lib in libs if lib != "gloo"]
            fast = fast[rnd % len(fast):] + fast[:rnd % len(fast)]
            order = (["gloo"] if "gloo" in libs else []) + fast
            log(f"np={n} round {rnd + 1}/{args.rounds}: {' -> '.join(order)} "
                f"({time.monotonic() - t_start:.0f} s)")
            for pos, lib in enumerate(order):
                if lib == "chorus":
                    for coll in colls:
                        for size in sizes:
                            if coll in TOTAL_SIZE and size < 4 * n:
                                continue
                            r = run_chorus(build, n, coll, size, args.blocking, args.timeout)
                            if r is None:
                                continue
                            us, algo, wrong, real_size = r
                            if wrong:
                                sys.exit(f"compare: chorus-bench reported {wrong} wrong elements "
                                         f"for {coll} {size} at np={n}")
                            samples.setdefault(("chorus", n, coll, size), []).append(us)
                            algos[(n, coll, size)] = algo
                            writer.writerow(["chorus", n, rnd, pos, coll, real_size, f"{us:.3f}",
                                             f"{real_size / us / 1e3 * COLLS[coll][1](n):.6f}", algo, wrong])
                else:
                    raw = os.path.join(out_dir, "raw", f"{lib}-np{n}.csv")
                    times = run_peer(lib, exes[lib], n, colls, sizes, raw, f"r{rnd}", args.timeout)
                    for (coll, real_size), us in sorted(times.items()):
                        # The anchors round reduce_scatter / all_gather to n x chunk: file the
                        # sample under the requested size it came from.
                        size = min(sizes, key=lambda s: abs(s - real_size))
                        if coll in TOTAL_SIZE and size < 4 * n:
                            continue
                        samples.setdefault((lib, n, coll, size), []).append(us)
                        writer.writerow([lib, n, rnd, pos, coll, real_size, f"{us:.3f}",
                                         f"{real_size / us / 1e3 * COLLS[coll][1](n):.6f}", "", ""])
                launches.flush()
        for key, v in samples.items():
            med[key] = statistics.median(v)
    launches.close()

    # The rooflines: what a 64 MiB all-gather, broadcast and all-reduce allow on this machine.
    roof = {}
    if ROOFLINE_BYTES in sizes:
        log(f"rooflines ({time.monotonic() - t_start:.0f} s)")
        for n in nps:
            for coll, procs, shared_key, flags, shared_flags in ROOFLINES:
                if coll not in colls:
                    continue
                g = roofline_gbps(build, procs(n), ROOFLINE_BYTES, flags)
                if g is not None:
                    roof[(n, coll)] = g
                if shared_key:
                    g = roofline_gbps(build, procs(n), ROOFLINE_BYTES, shared_flags)
                    if g is not None:
                        roof[(n, shared_key)] = g

    # Start-up: 2 ranks, process start to the first completed all-reduce.
    startup, startup_exit, startup_hf = {}, {}, {}
    if args.startup_runs > 0:
        log(f"start-up: {args.startup_runs} launches each ({time.monotonic() - t_start:.0f} s)")
        cmds = {"chorus": [os.path.join(build, "bin", "chorus-run"), "-n", "2",
                           os.path.join(build, "bin", "chorus-startup-probe")]}
        for p in peers:
            if exes[p]["startup"]:
                cmds[p] = mpirun(p, 2) + [exes[p]["startup"]]
        with open(os.path.join(out_dir, "startup.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["lib", "launch", "to_first_allreduce_ms", "to_exit_ms"])
            per = {lib: [] for lib in cmds}
            for i in range(args.startup_runs):  # alternate launches between the libraries
                for lib, cmd in cmds.items():
                    for first, whole in startup_runs(cmd, 1, 120):
                        per[lib].append((first, whole))
                        w.writerow([lib, i, f"{first:.3f}", f"{whole:.3f}"])
        for lib, v in per.items():
            if v:
                startup[lib] = statistics.median(x[0] for x in v)
                startup_exit[lib] = statistics.median(x[1] for x in v)
        startup_hf = hyperfine_ms(cmds, args.startup_runs, out_dir)

    # Report.
    parts = [f"# chorus vs {', '.join(PEERS[p][0] for p in peers) or 'no peer'}: "
             f"{datetime.datetime.now():%Y-%m-%d %H:%M}, load average "
             f"{os.getloadavg()[0]:.1f}, chorus-bench -z {args.blocking}"]
    parts += [f"({n})" for n in notes]
    for n in nps:
        parts.append(table(n, colls, sizes, med, algos, peers_at(n), args.rounds))
    if roof:
        parts.append(roofline_table(nps, med, roof))
    if startup:
        lines = ["### start-up, 2 ranks: median of "
                 f"{args.startup_runs} launches (process start to first completed 8-byte all-reduce)",
                 "", "| launcher | to first all-reduce | to exit | to exit (hyperfine) |", "|---|---|---|---|"]
        for lib in startup:
            name = "chorus-run" if lib == "chorus" else f"{PEERS[lib][0]} mpirun"
            hf = startup_hf.get(lib)
            lines.append(f"| {name} | {startup[lib]:.1f} ms | {startup_exit[lib]:.1f} ms | "
                         f"{'-' if hf is None else f'{hf:.1f} ms'} |")
        parts.append("\n".join(lines))
    targets = check_targets(med, startup, nps, colls, sizes) if args.targets else []
    if targets:
        met = sum(1 for t in targets if t[1] == "MET")
        lines = [f"### targets: {met} of {len(targets)} met", "", "| target | status | detail |", "|---|---|---|"]
        lines += [f"| {name} | {status} | {detail} |" for name, status, detail in targets]
        parts.append("\n".join(lines))
    parts.append(f"(raw: {os.path.relpath(out_dir)}; {time.monotonic() - t_start:.0f} s)")
    text = "\n\n".join(parts) + "\n"
    print(text)
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump({"np": nps, "sizes": sizes, "collectives": colls, "peers": peers,
                   "rounds": args.rounds, "blocking": args.blocking,
                   "median_us": [{"lib": k[0], "np": k[1], "collective": k[2], "bytes": k[3], "us": v}
                                 for k, v in sorted(med.items())],
                   "chorus_algorithm": [{"np": k[0], "collective": k[1], "bytes": k[2], "algorithm": v}
                                        for k, v in sorted(algos.items())],
                   "copy_roofline_algbw_gbps": [{"np": k[0], "collective": k[1], "bytes": ROOFLINE_BYTES,
                                                 "gbps": v} for k, v in sorted(roof.items())],
                   "startup_ms": startup, "startup_exit_ms": startup_exit, "startup_hyperfine_ms": startup_hf,
                   "targets": [{"target": t[0], "status": t[1], "detail": t[2]} for t in targets],
                   "notes": notes}, f, indent=1)


if __name__ == "__main__":
    main()
