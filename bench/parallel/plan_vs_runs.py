#!/usr/bin/env python3
"""plan_vs_runs.py - chorus-plan's step time on `--cluster local` against measured chorus-train runs.

For each mesh that gives every rank a core on a 2-core host (one process, dp 2, dp 2 with 4
micro-batches, tp 2, pp 2 with 4 micro-batches, and a mixture of experts on one process, at dp 2
and at dp 2 x ep 2), in one run:
  measured   build/bin/chorus-run -n R build/bin/chorus-train MODEL MESH --steps S --log-json F
             (one thread per rank): the fastest step_ms of steps 2 to S-2 (other work on the
             host only adds to a step; the probe takes its fastest pass alike), then the median
             over --rounds launches, the launches of the meshes taking turns;
  predicted  build/bin/chorus-plan MODEL --cluster local MESH --json (--per-node 1 for one
             process) right after each launch, the collectives priced by the constants
             `chorus-tune --probe` fits on this host first (CHORUS_COST_FILE), compute by the
             engine's blocks measured there; the median over the rounds.
It prints the table (mesh, measured ms and the range over the rounds, predicted ms and its range,
difference, the prediction's parts) with the CPU and the load average before and after, and says
NOT QUIET when the one-minute load average passed the core count: timings under load are not the quiet
numbers; and NOISY when a row's rounds spread by more than 20% of their median (the host slowed
down without a load of its own showing).

  bench/parallel/plan_vs_runs.py --build build            # the whole grid, 3 rounds
  bench/parallel/plan_vs_runs.py --only tp2,pp2 --rounds 1
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from scaling import cpu_name  # beside this script

DENSE = "--layers 4 --width 128 --heads 4 --context 64 --vocab 256 --batch 16"
MOE = DENSE + " --experts 4 --top-k 1"
# name: (ranks, model, chorus-train's mesh flags, chorus-plan's mesh flags)
CASES = {
    "one": (1, DENSE, "", "--per-node 1 --micro-batches 1"),
    "dp2": (2, DENSE, "--dp 2", "--dp 2 --micro-batches 1"),
    "dp2m4": (2, DENSE, "--dp 2 --micro-batches 4", "--dp 2 --micro-batches 4"),
    "tp2": (2, DENSE, "--tp 2", "--tp 2 --micro-batches 1"),
    "pp2": (2, DENSE, "--pp 2 --micro-batches 4 --balance uniform", "--pp 2 --micro-batches 4"),
    "moe": (1, MOE, "", "--per-node 1 --micro-batches 1"),
    "moe-dp2": (2, MOE, "--dp 2", "--dp 2 --ep 1 --micro-batches 1"),
    "moe-ep2": (2, MOE, "--dp 2 --ep 2", "--dp 2 --ep 2 --micro-batches 1"),
}
LABEL = {
    "one": "one process", "dp2": "dp 2", "dp2m4": "dp 2, 4 micro-batches", "tp2": "tp 2",
    "pp2": "pp 2, 4 micro-batches", "moe": "MoE 4 experts, one process", "moe-dp2": "MoE, dp 2",
    "moe-ep2": "MoE, dp 2 x ep 2",
}


def load():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def check(cmd, env=None, timeout=900):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        sys.exit("FAILED (%d): %s\n%s%s" % (p.returncode, " ".join(cmd), p.stdout[-2000:],
                                             p.stderr[-2000:]))
    return p.stdout


def measure(args, name, tmp):
    ranks, model, mesh, _ = CASES[name]
    log = os.path.join(tmp, name + ".jsonl")
    cmd = [os.path.join(args.build, "bin", "chorus-run"), "-n", str(ranks),
           os.path.join(args.build, "bin", "chorus-train")] + model.split() + mesh.split() + [
           "--threads", "1", "--steps", str(args.steps), "--log-json", log]
    check(cmd)
    steps = [json.loads(line)["step_ms"] for line in open(log) if line.strip()]
    return min(steps[2:-1] if len(steps) > 4 else steps)


def predict(args, name, env):
    _, model, _, mesh = CASES[name]
    cmd = [os.path.join(args.build, "bin", "chorus-plan")] + model.split() + mesh.split() + [
        "--cluster", "local", "--json"]
    out = json.loads(check(cmd, env))
    return out["meshes"][0]["time_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--only", default=",".join(CASES), help="cases: " + ",".join(CASES))
    ap.add_argument("--cost-file", default="",
                    help="chorus-tune's constants to use; default: fit them first (--probe)")
    args = ap.parse_args()
    names = args.only.split(",")
    for n in names:
        if n not in CASES:
            sys.exit("unknown case %r (valid: %s)" % (n, ", ".join(CASES)))
    load_before = load()
    with tempfile.TemporaryDirectory() as tmp:
        cost = args.cost_file
        if not cost:
            cost = os.path.join(tmp, "cost.txt")
            check([os.path.join(args.build, "bin", "chorus-run"), "-n", "2",
                   os.path.join(args.build, "bin", "chorus-tune"), "--probe", "--cost-out", cost])
        env = dict(os.environ, CHORUS_COST_FILE=cost)
        # Each launch is followed by its prediction (whose probe then sees the host as the run
        # did); the medians over the rounds of both.
        measured = {n: [] for n in names}
        predictions = {n: [] for n in names}
        for _ in range(args.rounds):
            for n in names:
                measured[n].append(measure(args, n, tmp))
                predictions[n].append(predict(args, n, env))
        predicted = {}
        for n in names:
            steps = [t["step"] for t in predictions[n]]
            predicted[n] = predictions[n][steps.index(statistics.median_low(steps))]
    load_after = load()
    print("%s, load average %s before, %s after; %d round(s) of %d steps" % (
        cpu_name(), load_before, load_after, args.rounds, args.steps))
    # The one-minute averages: the grid's own minutes (the longer ones remember earlier work).
    busiest = max(float(load_before.split()[0]), float(load_after.split()[0]))
    if busiest > os.cpu_count():
        print("NOT QUIET: a one-minute load average above the %d cores; the runs and the probe "
              "shared them with other work" % os.cpu_count())
    print("| mesh | measured ms | measured range | predicted ms | predicted range | prediction |"
          " compute | tp | bubble | p2p | ep | dp | optimizer |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for n in names:
        m = statistics.median(measured[n])
        t = predicted[n]
        p = 1e3 * t["step"]
        steps = [1e3 * x["step"] for x in predictions[n]]
        worst = max(worst, abs(p / m - 1))
        print("| %s | %.1f | %.0f-%.0f | %.1f | %.0f-%.0f | %+.0f%% | %s |" % (
            LABEL[n], m, min(measured[n]), max(measured[n]), p, min(steps), max(steps),
            100 * (p / m - 1), " | ".join("%.1f" % (1e3 * t[k]) for k in (
                "compute", "tp", "bubble", "p2p", "ep", "dp", "optimizer"))))
    print("worst: %.0f%% (target: within 15%%)" % (100 * worst))
    # The host can slow down without any load of its own showing (other tenants of the machine):
    # the same launch repeated then spreads. A row whose rounds spread by more than 20% of their
    # median was measured in such a spell, and so was the probe beside it.
    noisy = [LABEL[n] for n in names if len(measured[n]) > 1 and
             (max(measured[n]) - min(measured[n])) > 0.2 * statistics.median(measured[n])]
    if noisy:
        print("NOISY: the rounds of %s spread by more than 20%% of their median; retake the grid "
              "before reading it" % ", ".join(noisy))


if __name__ == "__main__":
    main()
