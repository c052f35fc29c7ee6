#!/usr/bin/env python3
"""selection_ab.py - the communicator's algorithm choice under three configurations, side by side.

  builtin   CHORUS_TUNE=builtin: the compiled-in table of one machine's medians (the default
            before the cost model)
  probed    the cost model with the constants the first communicator on this host fits by itself
            (a fresh cache folder: the first launch probes, fits and caches; the rest read it)
  defaults  the cost model with its built-in constants (CHORUS_COST_PROBE=off, no cache)

For each round, each configuration in turn (the order rotating) and each collective:
`chorus-run -n NP chorus-bench COLL -b 8 -e 16M -f 8 -n 10 -w 2 --blocks 3 -c 0 --json F`; the
median over rounds of the out-of-place time per call. Prints one markdown table (collective, size,
each configuration's algorithm and time, the ratios to builtin) and the geometric means, with the
CPU and the load average before and after: timings under load are not the quiet numbers.

  bench/compare/selection_ab.py --build build                   # np 2, 3 rounds
  bench/compare/selection_ab.py --build build --np 4 --rounds 5
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parallel"))
from scaling import cpu_name  # noqa: E402  (bench/parallel/scaling.py)

COLLS = ["all_reduce", "reduce_scatter", "all_gather", "broadcast"]
CONFIGS = ["builtin", "probed", "defaults"]


def load():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def environment(config, caches):
    env = dict(os.environ)
    for k in ("CHORUS_TUNE", "CHORUS_TUNE_FILE", "CHORUS_COST_FILE", "CHORUS_ALGO",
              "CHORUS_COST_PROBE", "CHORUS_DETERMINISTIC"):
        env.pop(k, None)
    env["XDG_CACHE_HOME"] = caches[config]
    if config == "builtin":
        env["CHORUS_TUNE"] = "builtin"
    elif config == "defaults":
        env["CHORUS_COST_PROBE"] = "off"
    return env


def launch(build, np, coll, env, out):
    cmd = [os.path.join(build, "bin", "chorus-run"), "-n", str(np),
           os.path.join(build, "bin", "chorus-bench"), coll, "-b", "8", "-e", "16M", "-f", "8",
           "-n", "10", "-w", "2", "--blocks", "3", "-c", "0", "--json", out]
    r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True, timeout=600)
    if r.returncode != 0:
        sys.exit(f"selection_ab: {' '.join(cmd)} failed ({r.returncode}):\n{r.stderr}")
    with open(out) as f:
        rows = json.load(f)["rows"]
    return {row["size"]: (row["algorithm"], row["time_us"]) for row in rows
            if row["placement"] == "out-of-place"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--colls", default=",".join(COLLS))
    a = ap.parse_args()
    colls = a.colls.split(",")
    before = load()
    with tempfile.TemporaryDirectory() as tmp:
        caches = {c: os.path.join(tmp, c) for c in CONFIGS}
        for d in caches.values():
            os.makedirs(d)
        times = {}  # (config, coll, size) -> [us]
        algos = {}
        for r in range(a.rounds):
            order = CONFIGS[r % len(CONFIGS):] + CONFIGS[:r % len(CONFIGS)]
            for config in order:
                for coll in colls:
                    out = os.path.join(tmp, f"{config}-{coll}-{r}.json")
                    for size, (algo, us) in launch(a.build, a.np, coll,
                                                   environment(config, caches), out).items():
                        times.setdefault((config, coll, size), []).append(us)
                        algos[(config, coll, size)] = algo
        probed = [os.path.relpath(os.path.join(d, f), caches["probed"])
                  for d, _, files in os.walk(caches["probed"]) for f in files]
        print(f"# selection A/B: np {a.np}, {a.rounds} rounds, {cpu_name()}, "
              f"load {before} -> {load()}; the probed cache: {probed or 'none written'}\n")
        print("| collective | bytes | builtin | probed | defaults | probed / builtin "
              "| defaults / builtin |")
        print("|---|---|---|---|---|---|---|")
        logs = {c: [] for c in CONFIGS[1:]}
        for coll in colls:
            for size in sorted({k[2] for k in times if k[1] == coll}):
                med = {c: statistics.median(times[(c, coll, size)]) for c in CONFIGS}
                cells = [f"{algos[(c, coll, size)]} {med[c]:.3g} us" for c in CONFIGS]
                ratios = [med[c] / med["builtin"] for c in CONFIGS[1:]]
                for c, x in zip(CONFIGS[1:], ratios):
                    logs[c].append(math.log(x))
                print(f"| {coll} | {size} | " + " | ".join(cells) + " | " +
                      " | ".join(f"{x:.2f}" for x in ratios) + " |")
        print()
        for c in CONFIGS[1:]:
            print(f"geometric mean {c} / builtin: {math.exp(statistics.mean(logs[c])):.3f} "
                  f"over {len(logs[c])} cells (< 1: faster than the table)")


if __name__ == "__main__":
    main()
