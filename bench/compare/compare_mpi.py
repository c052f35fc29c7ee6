#!/usr/bin/env python3
"""Side-by-side timing of chorus and Open MPI collectives on this machine.

Runs chorus-bench (under chorus-run) and the Open MPI anchor program (../shared/anchors/mpi_coll.cpp,
built here with mpicxx) alternately, several rounds, on the same sizes, and prints one markdown
table per world size with median busbw of each and the ratio chorus / Open MPI.

    bench/compare/compare_mpi.py                       # np 2 and 4, key sizes, 3 rounds
    bench/compare/compare_mpi.py --np 2 --sizes 8,1M,64M --rounds 5

Needs Debian's openmpi-bin and libopenmpi-dev (tools/install-deps.sh --with-mpi installs them).
float32, sum, out-of-place, nccl-tests' algbw/busbw definitions on both sides.
"""
import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

COLLS = {  # chorus name -> (Open MPI anchor name, busbw factor as a function of n)
    "all_reduce": ("allreduce", lambda n: 2 * (n - 1) / n),
    "reduce_scatter": ("reduce_scatter", lambda n: (n - 1) / n),
    "all_gather": ("allgather", lambda n: (n - 1) / n),
    "broadcast": ("broadcast", lambda n: 1.0),
}


def parse_size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * mult[text[-1]] if text[-1] in mult else int(text)


def human(b):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def build_anchor(anchors, out_dir):
    exe = os.path.join(out_dir, "mpi_coll_ompi")
    src = os.path.join(anchors, "mpi_coll.cpp")
    if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
        os.makedirs(out_dir, exist_ok=True)
        subprocess.run(["mpicxx.openmpi", "-O2", "-std=c++17", src, "-o", exe], check=True)
    return exe


def run_ompi(exe, n, colls, sizes, csv_path, tag):
    cmd = ["mpirun.openmpi", "--allow-run-as-root", "--mca", "pml", "ob1", "--mca", "btl", "self,vader",
           "-np", str(n)]
    if n > os.cpu_count():
        cmd += ["--oversubscribe", "--bind-to", "none"]
    cmd += [exe, "-c", ",".join(COLLS[c][0] for c in colls), "-s", ",".join(str(s) for s in sizes),
            "-o", csv_path, "-g", tag]
    if n > 2:
        cmd += ["-m", "500"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def run_chorus(build, n, coll, size):
    iters, warmup = (5, 2) if size >= (256 << 20) else (20, 5)
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([os.path.join(build, "bin", "chorus-run"), "-n", str(n),
                        os.path.join(build, "bin", "chorus-bench"), coll, "-b", str(size), "-e", str(size),
                        "-n", str(iters), "-w", str(warmup), "--json", f.name],
                       check=True, stdout=subprocess.DEVNULL)
        rows = json.load(open(f.name))["rows"]
    row = next(r for r in rows if r["placement"] == "out-of-place")
    if row["wrong"]:
        sys.exit(f"chorus-bench reported {row['wrong']} wrong elements for {coll} {size}")
    return row["time_us"], row["algorithm"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--anchors", default=os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "anchors"))
    ap.add_argument("--np", default="2,4")
    ap.add_argument("--sizes", default="8,1M,64M,256M")
    ap.add_argument("--colls", default=",".join(COLLS))
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if not shutil.which("mpirun.openmpi"):
        sys.exit("Open MPI is not installed: tools/install-deps.sh --with-mpi")
    colls = args.colls.split(",")
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    exe = build_anchor(os.path.abspath(args.anchors), os.path.join(args.build, "anchors"))
    for n in (int(x) for x in args.np.split(",")):
        ompi = {}    # (coll, size) -> [median block us per round]
        chorus = {}  # (coll, size) -> [us per round]
        algos = {}
        for rnd in range(args.rounds):
            with tempfile.NamedTemporaryFile(suffix=".csv") as f:
                run_ompi(exe, n, colls, sizes, f.name, f"r{rnd}")
                for row in csv.reader(open(f.name)):
                    # lib,variant,np,coll,bytes,iters,tag,ok,block_us(;-separated)
                    coll = next(c for c in colls if COLLS[c][0] == row[3])
                    blocks = [float(x) for x in row[8].split(";")]
                    ompi.setdefault((coll, int(row[4])), []).append(statistics.median(blocks))
            for coll in colls:
                for size in sizes:
                    if coll in ("reduce_scatter", "all_gather") and size < 4 * n:
                        continue
                    t, algo = run_chorus(args.build, n, coll, size)
                    chorus.setdefault((coll, size), []).append(t)
                    algos[(coll, size)] = algo
        print(f"\n### np={n}: median over {args.rounds} alternating rounds (busbw GB/s; time us at 8 B)\n")
        print("| collective | size | Open MPI | chorus | chorus / Open MPI | chorus algorithm |")
        print("|---|---|---|---|---|---|")
        for coll in colls:
            for size in sizes:
                key = (coll, size)
                if key not in chorus:
                    continue
                # The anchor rounds reduce_scatter / allgather sizes to multiples of n floats.
                o_key = min((k for k in ompi if k[0] == coll), key=lambda k: abs(k[1] - size))
                t_o, t_c = statistics.median(ompi[o_key]), statistics.median(chorus[key])
                if size <= 64:
                    print(f"| {coll} | {human(size)} | {t_o:.2f} us | {t_c:.2f} us | {t_o / t_c:.2f}x | {algos[key]} |")
                else:
                    f = COLLS[coll][1](n)
                    bw_o, bw_c = size / t_o / 1e3 * f, size / t_c / 1e3 * f
                    print(f"| {coll} | {human(size)} | {bw_o:.2f} | {bw_c:.2f} | {bw_c / bw_o:.2f}x | {algos[key]} |")


if __name__ == "__main__":
    main()
