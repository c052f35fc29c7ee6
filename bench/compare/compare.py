#!/usr/bin/env python3
"""chorus beside Open MPI, MPICH and Gloo on this machine, in one go.

Builds chorus-bench, chorus-run, chorus-startup-probe and chorus-copy-roofline (cmake --build), and
the peers' anchor programs from ../shared/anchors (mpi_coll.cpp with Open MPI's mpicxx.openmpi and
with MPICH's mpicxx.mpich, gloo_coll.cpp against libgloo-dev), plus mpi_extra.cpp from this folder
for the rooted reduce and the all-to-all, which the anchors lack (timed by their bench_common.h; no
Gloo column; all_to_all only when --colls names it). Then,
for each world size, runs them in alternating order for several rounds on the same sizes (Gloo first
in every round, then the others rotated: round r starts with the r-th of them, so each follows Gloo
equally often), and prints one markdown table per world size: the median over rounds of each
library, chorus / best peer and chorus / Open MPI (above --all-peers-to ranks, default 4, Open MPI
is the only peer). With 64 MiB among the sizes, the rooflines of all-gather, broadcast and
all-reduce at that size (chorus-copy-roofline: plain and --ring, --all-reduce alone and --shared;
docs/perf/collectives.md). Then the start-up time (process start to the first completed 8-byte
all-reduce, 2 ranks, chorus-run vs each mpirun; the median of --startup-runs launches), and with
--targets which of the performance targets are met.

    bench/compare/compare.py --build build                         # np 2 and 4, all sizes, 3 rounds
    bench/compare/compare.py --build build --np 2,4,8 --targets    # every target (np=8: Open MPI only)
    bench/compare/compare.py --build build --np 2 --sizes 8,1M --rounds 1 --targets
    bench/compare/compare.py --build build --np 2,4 --colls all_to_all --sizes 32,64K,256K,1M \
        --peers openmpi --startup-runs 0     # the sizes of an MoE layer's exchange (PERFORMANCE.md)

Every launch is kept in the output folder (--out, default BUILD/compare/<date-time>):
launches.csv (one row per library, round, world size, collective and size), startup.csv (one row
per start-up launch), raw/ (the anchors' own CSV files), summary.md (what is printed) and
summary.json (the medians and the targets).

Conventions, both sides: float32, sum, out of place (broadcast: in place, see IN_PLACE), root 0,
nccl-tests sizes and busbw
(all-reduce, broadcast and reduce: the per-rank buffer; reduce-scatter, all-gather and all-to-all:
the whole buffer, n blocks for all-to-all: a rank's send buffer). chorus-bench
runs with -z 1 (blocking calls) like the anchors, which time blocking MPI/Gloo calls. A peer
time is the anchor's median over its three timed blocks; a chorus time is chorus-bench's time column
with --blocks 3: the median of three timed blocks as well (each block: the slowest rank's mean).
Ratios are speed-ups: time of the peer / time of chorus (= busbw of chorus / busbw of the peer);
above 1 chorus is faster.

The parts live beside this script: common.py (collectives, sizes, running a command), peers.py
(building and running the peers), runs.py (chorus's side), report.py (the tables) and targets.py
(the targets, as a table).

Missing peers are skipped with the package to install (tools/install-deps.sh --with-mpi installs
all of them); --require-peers makes that an error instead.
"""
import argparse
import csv
import datetime
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # its modules, beside it
from common import (COLLS, DEFAULT_ANCHORS, DEFAULT_COLLS, DEFAULT_SIZES, ROOFLINE_BYTES,  # noqa: E402
                    TOTAL_SIZE, log, parse_size)
from peers import PEERS, build_peer, mpirun, peer_missing, peers_for, run_peer  # noqa: E402
from report import ROOFLINES, roofline_table, table  # noqa: E402
from runs import build_chorus, hyperfine_ms, roofline_gbps, run_chorus, startup_runs  # noqa: E402
from targets import check_targets  # noqa: E402


# ------------------------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="chorus build folder (default build)")
    ap.add_argument("--no-build", action="store_true", help="use the binaries as they are")
    ap.add_argument("--anchors", default=DEFAULT_ANCHORS, help="the anchors folder (../shared/anchors)")
    ap.add_argument("--np", default="2,4", help="world sizes (default 2,4)")
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help=f"bytes, K/M/G suffixes (default {DEFAULT_SIZES})")
    ap.add_argument("--colls", default=",".join(DEFAULT_COLLS),
                    help="default: all_reduce, reduce_scatter, all_gather, broadcast, reduce "
                         "(reduce against the MPI peers only); all_to_all (MPI peers only) on "
                         "request")
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
