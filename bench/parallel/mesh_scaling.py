#!/usr/bin/python3
"""mesh_scaling.py - chorus-train over a grid of dp x tp x pp meshes at one global batch: tokens/s,
step time, scaling efficiency, and each step split into compute, exposed communication and
pipeline bubble, read from the runs' traces and set beside the formulas' predictions.

    bench/parallel/mesh_scaling.py --build build [--meshes 1x1x1,2x1x1,...] [--rounds 2]
        [--anchor ../shared/anchors/torch_gpt/gpt_step.py] [--out mesh-results]

For each round and mesh (DPxTPxPP), one launch of
    chorus-run -n N chorus-train --dp DP --tp TP --pp PP --zero Z --micro-batches M ...
        --log-json OUT/<mesh>.jsonl --trace OUT/<mesh>.trace.json
with M = 4 x PP for pipelines (--micro-batches overrides), and, where --anchor is given, for the
pure data-parallel meshes the PyTorch anchor's DDP (gloo) on the same model and per-rank batch
right after it. The first --warmup steps of every run are left out.

What a step is made of, per rank, from the trace (then averaged over ranks, steps and rounds):
  bubble      time in the "pipeline" track (waiting for a stage's input or gradient);
  exposed     collectives the rank blocks on (tp, mp and the tied-embedding sum, all
              synchronous) plus the part of its asynchronous data-parallel collectives that no
              compute event (a block's forward or backward, a pipeline action) covers;
  compute     the rest of the step.
Predictions beside them: the schedule's bubble, (p-1)/(m+p-1) for GPipe and 1F1B (divided by
the chunks for interleaved), against the measured share of the forward-backward phase spent in
the pipeline track; and tensor parallelism's all-reduce volume per step and rank,
  M x ((4 L_s + first + last) b s h + last x 3 b s) elements
(two all-reduces of the block's output forward and two of its input gradient backward per block,
one for the vocabulary-parallel embedding's output on the first stage, one for the head input's
gradient and three b s ones for the vocabulary-parallel cross-entropy on the last), where L_s is
the blocks on the rank's stage, b s h one micro-batch's activations; against the volume the
trace's tp collectives carried.

Output: OUT/raw.jsonl (one record per launch), OUT/summary.md (the tables) and OUT/scaling.png
(the split as stacked bars with tokens/s; needs matplotlib). The machine's cores bound the
ranks that run at once: each rank computes with --threads (1) threads, one core standing for one
device, and efficiency is tokens/s over min(N, cores) x the one-rank run.
"""
import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time

from scaling import cpu_name  # beside this script

DEFAULT_MESHES = "1x1x1,2x1x1,1x2x1,1x1x2,4x1x1,2x2x1,2x1x2,1x2x2,1x1x4,2x2x2"


def parse_mesh(text):
    try:
        dp, tp, pp = (int(x) for x in text.split("x"))
    except ValueError:
        sys.exit("mesh_scaling: a mesh is DPxTPxPP, e.g. 2x1x2; got %r" % text)
    return dp, tp, pp


# ---- the trace -------------------------------------------------------------------------------

def union_length(intervals):
    total, end = 0.0, None
    start = None
    for s, e in sorted(intervals):
        if end is None or s > end:
            if end is not None:
                total += end - start
            start, end = s, e
        else:
            end = max(end, e)
    if end is not None:
        total += end - start
    return total


def minus_covered(intervals, cover):
    """Length of the union of `intervals` not covered by the union of `cover`."""
    both = union_length(intervals + cover)
    return both - union_length(cover)


def clip(intervals, a, b):
    return [(max(s, a), min(e, b)) for s, e in intervals if e > a and s < b]


def spans_by_rank(path):
    """A chorus-train trace's complete events, by rank (pid) and track name."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
              if e.get("ph") == "M" and e.get("name") == "thread_name"}
    per_rank = collections.defaultdict(lambda: collections.defaultdict(list))
    for e in events:
        if e.get("ph") == "X":
            per_rank[e["pid"]][tracks.get((e["pid"], e["tid"]), "")].append(e)
    return per_rank


def launch(cmd, timeout):
    """Runs one chorus-run command; False (its output on stderr) when it failed."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        sys.stderr.write("FAILED (%d): %s\n%s%s" % (p.returncode, " ".join(cmd), p.stdout[-2000:],
                                                     p.stderr[-2000:]))
    return p.returncode == 0


def measured_steps(log, warmup):
    """The --log-json lines of the steps from `warmup` on."""
    with open(log) as f:
        steps = [json.loads(line) for line in f if line.strip()]
    return [s for s in steps if s["step"] >= warmup]


def split_trace(path, warmup):
    """Per rank and measured step: step, forward-backward, bubble, exposed and tp volume."""
    per_rank = spans_by_rank(path)
    rows = []
    for rank, by_track in sorted(per_rank.items()):
        compute = by_track.get("compute", [])
        steps = sorted((e for e in compute if e["name"].startswith("step ")),
                       key=lambda e: e["ts"])
        phases = [e for e in compute if e["name"] == "forward and backward"]
        leaves = [(e["ts"], e["ts"] + e["dur"]) for e in compute
                  if e["name"].startswith(("forward h.", "backward h.", "F ", "B "))]
        blocks = {e["name"].split(".")[-1] for e in compute if e["name"].startswith("forward h.")}
        waits = [(e["ts"], e["ts"] + e["dur"]) for e in by_track.get("pipeline", [])]
        sync, async_dp, tp = [], [], []
        for track, evs in by_track.items():
            if not track.startswith("comm "):
                continue
            label = track[len("comm "):]
            for e in evs:
                coll = e["name"].split(" ")[0]
                iv = (e["ts"], e["ts"] + e["dur"])
                if coll in ("send", "recv"):
                    continue  # pipeline transfers: their waits are the bubble
                if label == "dp":
                    async_dp.append(iv)
                else:
                    sync.append(iv)
                if label == "tp":
                    tp.append((e["ts"], int(e["args"]["count"])))
        for st in steps:
            number = int(st["name"].split(" ")[1])
            if number < warmup:
                continue
            a, b = st["ts"], st["ts"] + st["dur"]
            phase = [p for p in phases if a <= p["ts"] < b]
            fb = sum(p["dur"] for p in phase)
            bubble = union_length(clip(waits, a, b))
            exposed = union_length(clip(sync, a, b)) + minus_covered(
                clip(async_dp, a, b), clip(leaves, a, b) + clip(sync, a, b) + clip(waits, a, b))
            rows.append({"rank": rank, "step": number, "step_us": b - a, "fb_us": fb,
                         "bubble_us": bubble, "exposed_us": exposed,
                         "tp_elements": sum(c for t, c in tp if a <= t < b),
                         "blocks": sorted(int(x) for x in blocks)})
    return rows


def tp_formula(blocks, layers, micro, b, s, h):
    first = 1 if 0 in blocks else 0
    last = 1 if layers - 1 in blocks else 0
    return micro * ((4 * len(blocks) + first + last) * b * s * h + last * 3 * b * s)


def predicted_bubble(schedule, p, m, chunks):
    if p <= 1:
        return 0.0
    if schedule == "interleaved":
        x = (p - 1) / chunks
        return x / (m + x)
    return (p - 1) / (m + p - 1)


# ---- launches --------------------------------------------------------------------------------

def run_chorus(args, mesh, rnd):
    dp, tp, pp = mesh
    n = dp * tp * pp
    micro = args.micro_batches or (4 * pp if pp > 1 else 1)
    name = "%dx%dx%d" % mesh
    log = os.path.join(args.out, "%s.r%d.jsonl" % (name, rnd))
    trace = os.path.join(args.out, "%s.r%d.trace.json" % (name, rnd))
    cmd = [os.path.join(args.build, "bin", "chorus-run"), "-n", str(n),
           os.path.join(args.build, "bin", "chorus-train"), "--dp", str(dp), "--tp", str(tp),
           "--pp", str(pp), "--zero", str(args.zero), "--micro-batches", str(micro),
           "--schedule", args.schedule, "--layers", str(args.layers), "--width", str(args.width),
           "--heads", str(args.heads), "--context", str(args.context), "--vocab", str(args.vocab),
           "--batch", str(args.batch), "--steps", str(args.steps), "--quiet",
           "--threads", str(args.threads),
           "--log-json", log, "--trace", trace]
    if args.schedule == "interleaved":
        cmd += ["--chunks", str(args.chunks)]
    t0 = time.time()
    if not launch(cmd, args.timeout):
        return None
    steps = measured_steps(log, args.warmup)
    rows = split_trace(trace, args.warmup)
    if not args.keep_traces:
        os.remove(trace)
    b = args.batch // (dp * micro)
    tp_measured = [r["tp_elements"] for r in rows]
    tp_predicted = [tp_formula(r["blocks"], args.layers, micro, b, args.context, args.width)
                    if tp > 1 else 0 for r in rows]
    mean = lambda xs: sum(xs) / len(xs) if xs else 0.0
    bubble_share = mean([r["bubble_us"] / r["fb_us"] for r in rows if r["fb_us"] > 0])
    return {"system": "chorus", "mesh": name, "ranks": n, "micro_batches": micro,
            "schedule": args.schedule if pp > 1 else "-", "round": rnd,
            "step_ms": statistics.median(s["step_ms"] for s in steps),
            "tokens_per_s": statistics.median(s["tokens_per_s"] for s in steps),
            "compute_ms": mean([r["step_us"] - r["bubble_us"] - r["exposed_us"] for r in rows]) / 1e3,
            "exposed_ms": mean([r["exposed_us"] for r in rows]) / 1e3,
            "bubble_ms": mean([r["bubble_us"] for r in rows]) / 1e3,
            "bubble_share": bubble_share,
            "bubble_predicted": predicted_bubble(args.schedule, pp, micro, args.chunks),
            "tp_elements": mean(tp_measured), "tp_predicted": mean(tp_predicted),
            "tp_exact": all(m == p for m, p in zip(tp_measured, tp_predicted)),
            "wall_s": time.time() - t0}


def run_torch(args, mesh, rnd):
    dp = mesh[0]
    cmd = [args.python, args.anchor, "ddp", "--ranks", str(dp), "--threads", "1",
           "--vocab", str(args.vocab), "--ctx", str(args.context), "--layers", str(args.layers),
           "--width", str(args.width), "--heads", str(args.heads),
           "--batch", str(args.batch // dp), "--steps", str(args.steps),
           "--warmup", str(args.warmup)]
    env = dict(os.environ)
    env.update(kv.split("=", 1) for kv in args.torch_env.split() if "=" in kv)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    result = None
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
    if p.returncode != 0 or result is None:
        sys.stderr.write("FAILED (%d): %s\n%s" % (p.returncode, " ".join(cmd), p.stderr[-2000:]))
        return None
    t = result["train"]
    return {"system": "torch ddp", "mesh": "%dx1x1" % dp, "ranks": dp, "round": rnd,
            "step_ms": 1e3 * t["step_s"]["median"], "tokens_per_s": t["tokens_per_s"]}


# ---- the summary -----------------------------------------------------------------------------

def summarize(records, meshes, cores):
    by = collections.defaultdict(list)
    for r in records:
        by[(r["system"], r["mesh"])].append(r)
    med = lambda rs, k: statistics.median(r[k] for r in rs)
    one = by.get(("chorus", "1x1x1"))
    base = med(one, "tokens_per_s") if one else None
    lines = ["| mesh dp x tp x pp | ranks | M | step ms | tokens/s | efficiency | compute ms | "
             "exposed comm ms | bubble ms | bubble: measured / predicted | tp all-reduce "
             "elements per step: measured / formula | PyTorch DDP tokens/s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    checks = []
    for mesh in meshes:
        name = "%dx%dx%d" % mesh
        rs = by.get(("chorus", name))
        if not rs:
            continue
        n = rs[0]["ranks"]
        tok = med(rs, "tokens_per_s")
        # Against one rank per core: N ranks on fewer cores can do no better than the cores.
        eff = "%.2f" % (tok / (min(n, cores) * base)) if base else "-"
        if base and n > cores:
            eff += " (%d ranks on %d cores)" % (n, cores)
        bub = "-"
        if mesh[2] > 1:
            bub = "%.1f%% / %.1f%%" % (100 * med(rs, "bubble_share"), 100 * rs[0]["bubble_predicted"])
        tpv = "-"
        if mesh[1] > 1:
            tpv = "%.0f / %.0f%s" % (med(rs, "tp_elements"), rs[0]["tp_predicted"],
                                      "" if all(r["tp_exact"] for r in rs) else " (differ)")
            checks.append("%s: tp all-reduce volume %s the formula on every rank and step" % (
                name, "equals" if all(r["tp_exact"] for r in rs) else "DIFFERS FROM"))
        torch = by.get(("torch ddp", name))
        lines.append("| %s | %d | %d | %.1f | %.0f | %s | %.1f | %.1f | %.1f | %s | %s | %s |" % (
            name.replace("x", " x "), n, rs[0]["micro_batches"], med(rs, "step_ms"), tok, eff,
            med(rs, "compute_ms"), med(rs, "exposed_ms"), med(rs, "bubble_ms"), bub, tpv,
            "%.0f" % med(torch, "tokens_per_s") if torch else "-"))
        if mesh[2] > 1 and rs[0]["schedule"] == "1f1b" and rs[0]["micro_batches"] == 4 * mesh[2]:
            d = 100 * (med(rs, "bubble_share") - rs[0]["bubble_predicted"])
            checks.append("%s 1F1B at m = 4p: measured bubble %+.1f points from the prediction "
                          "(target within 5)" % (name, d))
    return lines, checks


def chart(records, meshes, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("mesh_scaling: no matplotlib, no chart (apt-get install python3-matplotlib)")
        return
    names, comp, exp, bub, tok, torch = [], [], [], [], [], []
    for mesh in meshes:
        name = "%dx%dx%d" % mesh
        rs = [r for r in records if r["system"] == "chorus" and r["mesh"] == name]
        if not rs:
            continue
        ts = [r["tokens_per_s"] for r in records if r["system"] == "torch ddp" and r["mesh"] == name]
        torch.append(statistics.median(ts) if ts else None)
        names.append(name)
        comp.append(statistics.median(r["compute_ms"] for r in rs))
        exp.append(statistics.median(r["exposed_ms"] for r in rs))
        bub.append(statistics.median(r["bubble_ms"] for r in rs))
        tok.append(statistics.median(r["tokens_per_s"] for r in rs))
    fig, ax = plt.subplots(figsize=(10, 4.5))
    x = range(len(names))
    ax.bar(x, comp, color="#4e79a7", label="compute")
    ax.bar(x, exp, bottom=comp, color="#f28e2b", label="exposed communication")
    ax.bar(x, bub, bottom=[c + e for c, e in zip(comp, exp)], color="#e15759", label="bubble")
    ax.set_xticks(list(x))
    ax.set_xticklabels(names)
    ax.set_xlabel("mesh dp x tp x pp")
    ax.set_ylabel("ms per step (mean over ranks)")
    ax2 = ax.twinx()
    ax2.plot(list(x), tok, "ko-", label="chorus tokens/s")
    if any(t is not None for t in torch):
        ax2.plot([i for i, t in zip(x, torch) if t is not None], [t for t in torch if t is not None],
                 "x", color="#b07aa1", markersize=10, mew=2, label="PyTorch DDP tokens/s")
    ax2.set_ylabel("tokens/s")
    ax2.set_ylim(bottom=0)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    fig.legend(h1 + h2, l1 + l2, loc="lower center", ncol=5, fontsize=8)
    ax.set_title("chorus-train at one global batch (%s, %d cores)" % (cpu_name(), os.cpu_count() or 1))
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=110)
    print("mesh_scaling: wrote %s" % path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--meshes", default=DEFAULT_MESHES, help="comma-separated DPxTPxPP")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3, help="steps left out of every run")
    ap.add_argument("--zero", type=int, default=1, help="ZeRO stage over dp (0 = DDP)")
    ap.add_argument("--schedule", default="1f1b", choices=["gpipe", "1f1b", "interleaved"])
    ap.add_argument("--chunks", type=int, default=2, help="interleaved: chunks per stage")
    ap.add_argument("--micro-batches", type=int, default=0, help="0: 4 x pp for pipelines, else 1")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16, help="the global batch in sequences")
    ap.add_argument("--threads", type=int, default=1, help="compute threads per rank (one core = one device)")
    ap.add_argument("--anchor", default="", help="gpt_step.py of the PyTorch anchor: its DDP beside dp meshes")
    ap.add_argument("--python", default="/usr/bin/python3", help="the interpreter with python3-torch")
    ap.add_argument("--torch-env", default="OPENBLAS_CORETYPE=SkylakeX OPENBLAS_NUM_THREADS=1")
    ap.add_argument("--out", default="mesh-results")
    ap.add_argument("--keep-traces", action="store_true")
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--from-raw", default="", help="no launches: summarize and chart this raw.jsonl")
    args = ap.parse_args()
    if args.steps <= args.warmup:
        sys.exit("mesh_scaling: --steps must exceed --warmup")
    meshes = [parse_mesh(m) for m in args.meshes.split(",")]
    os.makedirs(args.out, exist_ok=True)
    cores = os.cpu_count() or 1
    records = []
    if args.from_raw:
        with open(args.from_raw) as f:
            records = [json.loads(line) for line in f if line.strip()]
        args.rounds = len({r["round"] for r in records})
    with open(os.path.join(args.out, "raw.jsonl"), "a") as raw:
        for rnd in range(0 if args.from_raw else args.rounds):
            for mesh in meshes:
                plan = [run_chorus]
                if args.anchor and mesh[1] == 1 and mesh[2] == 1:
                    plan.append(run_torch)
                for launch in plan:
                    r = launch(args, mesh, rnd)
                    if r is None:
                        continue
                    r["cpu"] = cpu_name()
                    records.append(r)
                    raw.write(json.dumps(r) + "\n")
                    raw.flush()
                    print("round %d %s %s: %.1f ms/step, %.0f tokens/s" % (
                        rnd, r["mesh"], r["system"], r["step_ms"], r["tokens_per_s"]), flush=True)
    lines, checks = summarize(records, meshes, cores)
    text = ("CPU: %s, %d cores; model: %d layers, width %d, %d heads, context %d, vocab %d; global "
            "batch %d; ZeRO-%d over dp; %d rounds of %d steps (the first %d left out); command: %s"
            "\n\n%s\n\n%s\n" % (
                cpu_name(), cores, args.layers, args.width, args.heads, args.context, args.vocab,
                args.batch, args.zero, args.rounds, args.steps, args.warmup,
                " ".join(["bench/parallel/mesh_scaling.py"] + sys.argv[1:]), "\n".join(lines),
                "\n".join("- " + c for c in checks)))
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(text)
    print(text)
    chart(records, meshes, os.path.join(args.out, "scaling.png"))


if __name__ == "__main__":
    main()
