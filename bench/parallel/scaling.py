#!/usr/bin/env python3
"""scaling.py - data-parallel training throughput of chorus beside PyTorch, in one run.

For each world size (--dp, default 1,2,4) and each round (--rounds), launches alternate between
  chorus   build/bin/chorus-run -n DP build/bin/chorus-scaling --mode M   for M in
           ddp, nosync (the compute-only ceiling), zero1, zero2, zero3
  PyTorch  the anchor's gpt_step.py (shared/anchors/torch_gpt) modes ddp, ddp_nosync (its
           ceiling) and zero1 (DDP + ZeroRedundancyOptimizer), backend gloo, --ranks DP
           --threads 1, under Debian's /usr/bin/python3, tuned as its RESULTS.md says
           (OPENBLAS_CORETYPE=SkylakeX OPENBLAS_NUM_THREADS=1; --torch-env '' for as shipped)
with the same model (the anchor's small config: vocab 256, context 128, 4 layers, width 256,
4 heads, batch 8 per rank, AdamW), one thread per rank. Every launch prints one RESULT line;
they are kept in OUT/raw.jsonl, and OUT/summary.md holds, per world size and mode, the median
over rounds of step time and global tokens/s, the efficiency against the same system's
compute-only ceiling at that world size (ddp / nosync), the scaling against its own one-process
run, and for chorus the share of all-reduce time hidden behind backward.

  bench/parallel/scaling.py --build build --anchor ../shared/anchors/torch_gpt/gpt_step.py
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CHORUS_MODES = ["ddp", "nosync", "zero1", "zero2", "zero3"]
TORCH_MODES = ["ddp", "ddp_nosync", "zero1"]
CEILING = {"chorus": "nosync", "torch": "ddp_nosync"}


def run(cmd, env_extra, timeout):
    env = dict(os.environ)
    env.update(env_extra)
    t0 = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    result = None
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
    if p.returncode != 0 or result is None:
        sys.stderr.write("FAILED (%d): %s\n%s%s" % (p.returncode, " ".join(cmd), p.stdout[-2000:],
                                                     p.stderr[-2000:]))
        return None
    result["wall_s"] = time.time() - t0
    return result


def chorus_launch(args, dp, mode):
    cmd = [os.path.join(args.build, "bin", "chorus-run"), "-n", str(dp),
           os.path.join(args.build, "bin", "chorus-scaling"), "--mode", mode,
           "--steps", str(args.steps), "--warmup", str(args.warmup)]
    r = run(cmd, {}, args.timeout)
    if r is not None:
        r["system"] = "chorus"
    return r


def torch_launch(args, dp, mode):
    cmd = [args.python, args.anchor, mode, "--ranks", str(dp), "--threads", "1",
           "--steps", str(args.steps), "--warmup", str(args.warmup)]
    env = dict(kv.split("=", 1) for kv in args.torch_env.split() if "=" in kv)
    r = run(cmd, env, args.timeout)
    if r is None:
        return None
    t = r["train"]
    return {"system": "torch", "mode": mode, "ranks": dp, "step_ms": 1e3 * t["step_s"]["median"],
            "tokens_per_s": t["tokens_per_s"], "env": args.torch_env}


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def summarize(records, dps, have_torch):
    by = {}
    for r in records:
        by.setdefault((r["system"], r["ranks"], r["mode"]), []).append(r)

    def med(system, dp, mode, key):
        rs = by.get((system, dp, mode), [])
        vals = [r[key] for r in rs if key in r]
        return statistics.median(vals) if vals else None

    lines = ["| dp | system | mode | step ms | tokens/s | vs own ceiling | scaling vs 1 process | "
             "all-reduce hidden |", "|---|---|---|---|---|---|---|---|"]
    systems = [("chorus", CHORUS_MODES)] + ([("torch", TORCH_MODES)] if have_torch else [])
    for dp in dps:
        for system, modes in systems:
            ceiling = med(system, dp, CEILING[system], "tokens_per_s")
            one = med(system, 1, CEILING[system], "tokens_per_s") or med(system, 1, "ddp", "tokens_per_s")
            for mode in modes:
                tok = med(system, dp, mode, "tokens_per_s")
                if tok is None:
                    continue
                step = med(system, dp, mode, "step_ms")
                vs = "%.2f" % (tok / ceiling) if ceiling else "-"
                sc = "%.2f" % (tok / (dp * one)) if one else "-"
                hid = med(system, dp, mode, "hidden") if dp > 1 else None  # one rank: nothing to hide
                lines.append("| %d | %s | %s | %.1f | %.0f | %s | %s | %s |" % (
                    dp, system, mode, step, tok, vs, sc, "%.2f" % hid if hid is not None else "-"))
    # The targets of the data-parallel issue.
    checks = []
    for dp in dps:
        c_ddp = med("chorus", dp, "ddp", "tokens_per_s")
        c_ceiling = med("chorus", dp, "nosync", "tokens_per_s")
        if dp == 2 and c_ddp and c_ceiling:
            checks.append("dp=2 chorus DDP at %.2f of its compute-only ceiling (target >= 0.95)"
                          % (c_ddp / c_ceiling))
        t_ddp = med("torch", dp, "ddp", "tokens_per_s")
        if c_ddp and t_ddp:
            checks.append("dp=%d chorus DDP %.0f tokens/s vs PyTorch DDP %.0f: %.2fx (target > 1)"
                          % (dp, c_ddp, t_ddp, c_ddp / t_ddp))
        s_ddp = med("chorus", dp, "ddp", "step_ms")
        for z, limit in (("zero1", 1.05), ("zero2", 1.05), ("zero3", 1.25)):
            s = med("chorus", dp, z, "step_ms")
            if s and s_ddp:
                checks.append("dp=%d %s step %.1f ms = %.2fx DDP's (target <= %.2f)"
                              % (dp, z, s, s / s_ddp, limit))
    return lines, checks


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--dp", default="1,2,4")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--anchor", default="", help="gpt_step.py of the PyTorch anchor; empty: chorus only")
    ap.add_argument("--python", default="/usr/bin/python3", help="the interpreter with python3-torch")
    ap.add_argument("--torch-env", default="OPENBLAS_CORETYPE=SkylakeX OPENBLAS_NUM_THREADS=1")
    ap.add_argument("--modes", default=",".join(CHORUS_MODES), help="chorus modes to run")
    ap.add_argument("--out", default="scaling-results")
    ap.add_argument("--timeout", type=int, default=900)
    args = ap.parse_args()
    dps = [int(x) for x in args.dp.split(",")]
    modes = args.modes.split(",")
    os.makedirs(args.out, exist_ok=True)
    have_torch = bool(args.anchor)
    raw = open(os.path.join(args.out, "raw.jsonl"), "a")
    records = []
    for rnd in range(args.rounds):
        for dp in dps:
            # Alternate the systems launch by launch, so that a slow spell of the machine hits both.
            plan = [("chorus", m) for m in modes]
            if have_torch:
                merged = []
                for i in range(max(len(plan), len(TORCH_MODES))):
                    if i < len(plan):
                        merged.append(plan[i])
                    if i < len(TORCH_MODES):
                        merged.append(("torch", TORCH_MODES[i]))
                plan = merged
            for system, mode in plan:
                r = chorus_launch(args, dp, mode) if system == "chorus" else torch_launch(args, dp, mode)
                if r is None:
                    continue
                r["round"] = rnd
                r["cpu"] = cpu_name()
                records.append(r)
                raw.write(json.dumps(r) + "\n")
                raw.flush()
                print("round %d dp=%d %s %s: %.1f ms/step, %.0f tokens/s" % (
                    rnd, dp, system, mode, r["step_ms"], r["tokens_per_s"]), flush=True)
    lines, checks = summarize(records, dps, have_torch)
    text = "CPU: %s; %d rounds of %d steps; command: %s\n\n%s\n\n%s\n" % (
        cpu_name(), args.rounds, args.steps, " ".join(["bench/parallel/scaling.py"] + sys.argv[1:]),
        "\n".join(lines), "\n".join("- " + c for c in checks))
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
