"""The peers compare.py measures chorus against (Open MPI, MPICH, Gloo): whether each is
installed, building its anchor program, and running it."""
import csv
import os
import shutil
import statistics
import subprocess

from common import COLLS, HERE, MPI_ONLY, log, run


PEERS = {
    # name: label, packages, the tools it needs
    "openmpi": ("Open MPI", "openmpi-bin libopenmpi-dev", ["mpicxx.openmpi", "mpirun.openmpi"]),
    "mpich": ("MPICH", "mpich libmpich-dev", ["mpicxx.mpich", "mpirun.mpich"]),
    "gloo": ("Gloo", "libgloo-dev", ["g++"]),
}


GLOO_HEADER = "/usr/include/gloo/config.h"


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
    extra = os.path.join(bin_dir, f"mpi_extra_{peer}")
    probe = os.path.join(bin_dir, f"startup_probe_{peer}")
    compile_if_stale([cxx], os.path.join(anchors, "mpi_coll.cpp"), coll)
    # The anchors have no rooted reduce and no all-to-all: ours, timed by their bench_common.h.
    compile_if_stale([cxx, "-I", anchors], os.path.join(HERE, "mpi_extra.cpp"), extra)
    compile_if_stale([cxx], os.path.join(HERE, "startup_probe_mpi.cpp"), probe)
    return {"coll": coll, "extra": extra, "startup": probe}


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
    """One launch of the peer's anchor over every collective and size (and one of mpi_extra per
    collective the anchor lacks, for an MPI peer): {(coll, bytes): us}."""
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
        for c in colls:
            if c in MPI_ONLY:
                cmds.append(mpirun(peer, n) + [exes["extra"], "-c", COLLS[c][0]] + cap)
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
