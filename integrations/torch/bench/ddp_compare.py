#!/usr/bin/python3
"""The CPU anchor's DDP training step over chorus and over gloo, against the no-sync ceiling.

    PYTHONPATH=build/python OPENBLAS_NUM_THREADS=1 \\
        integrations/torch/bench/ddp_compare.py --reps 5

Runs the anchor's gpt_step.py (../shared/anchors/torch_gpt, beside the repository; --anchor to
point elsewhere) in three launches per repetition: `ddp_nosync` (every step inside no_sync(): no
gradient all-reduce, the compute-only ceiling of the 2-process run), `ddp --backend chorus
--backend-module chorus_torch`, and `ddp --backend gloo`; the same model, data and settings, the
order rotated from one repetition to the next. Each launch waits (up to --quiet-wait s) for an
idle machine, reports the CPU other processes took while it ran (quiet.py), and is run again (up
to --retries times) when that was more than 5% of the CPUs. Per launch the anchor reports the
median step time over --steps steps after --warmup (a step's time is the slowest rank's). Scaling
efficiency
against the ceiling = ceiling step time / DDP step time, paired within a repetition. The table
gives median [min-max] over repetitions. Arguments after `--` go to every gpt_step.py launch
(e.g. -- --bucket-mb 1).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from quiet import Launch

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ANCHOR = os.path.join(os.path.dirname(REPO), "shared", "anchors", "torch_gpt", "gpt_step.py")


def launch(args, mode, backend, extra):
    cmd = [sys.executable, args.anchor, mode, "--ranks", str(args.ranks), "--threads", "1",
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--backend", backend]
    if backend == "chorus":
        cmd += ["--backend-module", "chorus_torch"]
    cmd += extra
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.launch_timeout)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError("%s failed (exit %d):\n%s%s" % (" ".join(cmd), p.returncode, p.stdout,
                                                       p.stderr[-4000:]))


def med(xs):
    return "%.4g [%.4g-%.4g]" % (statistics.median(xs), min(xs), max(xs))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--anchor", default=ANCHOR, help="gpt_step.py (default: %(default)s)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--ceiling-backend", default="gloo",
                    help="backend of the no-sync launches (no gradient traffic either way)")
    ap.add_argument("--launch-timeout", type=float, default=900)
    ap.add_argument("--quiet-wait", type=float, default=120,
                    help="seconds to wait for an idle machine before each launch")
    ap.add_argument("--retries", type=int, default=3,
                    help="times a contended launch is run again (the last one is kept)")
    ap.add_argument("--json", default="")
    args, extra = ap.parse_known_args()
    extra = [a for a in extra if a != "--"]
    if not os.path.exists(args.anchor):
        sys.exit("no anchor at %s (pass --anchor)" % args.anchor)
    runs = [("ddp_nosync", args.ceiling_backend), ("ddp", "chorus"), ("ddp", "gloo")]
    results = {r: [] for r in runs}
    contended = 0
    for rep in range(args.reps):
        order = runs[rep % len(runs):] + runs[:rep % len(runs)]
        for mode, backend in order:
            for attempt in range(args.retries + 1):   # a contended launch is run again
                with Launch(args.quiet_wait) as g:
                    res = launch(args, mode, backend, extra)
                if not g.contended:
                    break
                print("rep %d %s %s: contended, step %.1f ms (%s)%s" % (
                    rep, mode, backend, 1e3 * res["train"]["step_s"]["median"], g.describe(),
                    "; again" if attempt < args.retries else "; kept"), file=sys.stderr, flush=True)
            res["guard"] = {"other_cpu_s": g.other_cpu_s, "contended": g.contended,
                            "waited_out": g.waited_out}
            contended += g.contended
            results[(mode, backend)].append(res)
            print("rep %d %s %s: step %.1f ms (%s)" % (
                rep, mode, backend, 1e3 * res["train"]["step_s"]["median"], g.describe()),
                file=sys.stderr, flush=True)
    ceiling = [r["train"]["step_s"]["median"] for r in results[runs[0]]]
    cfg = results[runs[1]][0]["config"]
    shape = {k: cfg[k] for k in ("layers", "width", "heads", "ctx", "batch", "vocab")}
    print("%d ranks x 1 thread, config %s, %d steps after %d warm-up, %d repetitions (%d of %d "
          "launches contended); env %s" % (
              args.ranks, shape, args.steps, args.warmup, args.reps, contended, 3 * args.reps,
              {k: v for k, v in os.environ.items() if k.startswith(("OPENBLAS", "OMP", "CHORUS"))}))
    print("| run | step ms | global tok/s | efficiency vs no-sync | bwd ms | loss first->last |"
          " params identical |")
    print("|---|---|---|---|---|---|---|")
    for mode, backend in runs:
        rs = results[(mode, backend)]
        steps = [r["train"]["step_s"]["median"] for r in rs]
        eff = [c / s for c, s in zip(ceiling, steps)]
        print("| %s %s | %s | %s | %s | %s | %.4f->%.4f | %s |" % (
            mode, backend, med([1e3 * s for s in steps]),
            med([r["train"]["tokens_per_s"] for r in rs]), med(eff),
            med([1e3 * r["train"]["bwd_s"]["median"] for r in rs]),
            rs[0]["train"]["loss_first"], rs[0]["train"]["loss_last"],
            all(r["train"]["params_identical_across_ranks"] for r in rs)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"%s:%s" % k: v for k, v in results.items()}, f)


if __name__ == "__main__":
    main()
