#!/usr/bin/env python3
"""ab_builds.py — chorus-bench from two builds, alternating, as time ratios.

For a change that must not move speed (a refactor), or one that should: both builds' chorus-bench
run the same cells in the same run, launch after launch, the order flipping every round (A B, then
B A), so load from other processes and the machine's drift hit both alike. A cell is the median over
the rounds of each launch's time per call (out-of-place, chorus-bench's median block).

    bench/chorus_bench/ab_builds.py BUILD_A BUILD_B [--np 2,4] [--colls all_reduce,all_gather]
                                    [--sizes 8,1M,64M] [--rounds 5]

Prints one markdown table: cell, A us, B us, B/A (> 1: B slower), and the rounds' spread.
"""
import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path


def parse_size(text):
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r}: expected e.g. 8, 1M, 64M")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def iterations(size):
    """Calls per block and blocks per launch: about 20-50 ms of work per block."""
    if size <= 64 << 10:
        return 1000, 100, 5
    if size <= 4 << 20:
        return 100, 10, 5
    return 8, 2, 3


def run_once(build, np, coll, size):
    iters, warmup, blocks = iterations(size)
    cmd = [str(Path(build) / "bin/chorus-run"), "-n", str(np), str(Path(build) / "bin/chorus-bench"),
           coll, "-b", str(size), "-e", str(size), "-n", str(iters), "-w", str(warmup),
           "--blocks", str(blocks), "-c", "0"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"ab_builds: {' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    for line in out.stdout.splitlines():
        fields = line.split()
        if fields and not line.startswith("#") and fields[0] == str(size):
            return float(fields[5]), fields[-1]  # out-of-place time (us), algorithm
    sys.exit(f"ab_builds: no result line in the output of {' '.join(cmd)}:\n{out.stdout}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build_a")
    ap.add_argument("build_b")
    ap.add_argument("--np", default="2,4")
    ap.add_argument("--colls", default="all_reduce,all_gather")
    ap.add_argument("--sizes", default="8,1M,64M")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    for b in (args.build_a, args.build_b):
        if not (Path(b) / "bin/chorus-bench").exists():
            sys.exit(f"ab_builds: no {b}/bin/chorus-bench (ninja -C {b} chorus-bench chorus-run)")
    # A size chorus-bench cannot split over the ranks (8 B of floats over 4 ranks' all_gather)
    # runs at the smallest one it can: one element per rank.
    cells = [(int(n), c, max(parse_size(s), 4 * int(n) if c != "all_reduce" else 4))
             for n in args.np.split(",") for c in args.colls.split(",") for s in args.sizes.split(",")]
    times = {cell: ([], []) for cell in cells}
    algos = {}
    for r in range(args.rounds):
        order = (0, 1) if r % 2 == 0 else (1, 0)
        for cell in cells:
            for which in order:
                t, algo = run_once((args.build_a, args.build_b)[which], *cell)
                times[cell][which].append(t)
                algos.setdefault(cell, set()).add(algo)
        print(f"# round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(f"A = {args.build_a}, B = {args.build_b}; median of {args.rounds} alternating rounds, "
          "out-of-place us per call")
    print()
    print("| np | collective | bytes | A us | B us | B/A | A range | B range | algorithm |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (np, coll, size) in cells:
        a, b = times[(np, coll, size)]
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"| {np} | {coll} | {size} | {ma:.2f} | {mb:.2f} | {mb / ma:.3f} | "
              f"{min(a):.2f}-{max(a):.2f} | {min(b):.2f}-{max(b):.2f} | "
              f"{'/'.join(sorted(algos[(np, coll, size)]))} |")


if __name__ == "__main__":
    main()
