#!/usr/bin/python3
"""moe_scaling.py - a mixture-of-experts GPT beside the dense GPT with the same active parameters:
tokens/s at expert parallelism ep = 1 and ep = N, the expert exchange's share of the step and its
bytes against the formula, and the peak memory per rank, all from chorus-train's logs and traces.

    bench/parallel/moe_scaling.py --build build [--np 1,2] [--rounds 3] [--out moe-results]

Same active parameters: every expert is an MLP of the dense block's shape (C -> 4C -> C), so with
--top-k 1 and no drops (--capacity-factor 0, dropless) a token passes through exactly the
parameters of the dense GPT plus its MoE blocks' routers (C x E each, no bias): the same matrix
multiplications per token, with the routing, the rows' gather and scatter and the exchange on
top. The MoE GPT holds E times the MLP parameters of its MoE blocks; each token uses one.

For each round, for each world size N in --np, the launches alternate (the order rotates by one
every round):
    dense          chorus-run -n N chorus-train --dp N --zero 0 ...
    moe ep=1       ... --experts E --top-k K --moe-every M --capacity-factor F --ep 1
    moe ep=N       ... --ep N                       (N > 1: the experts spread, E/N each)
each with --log-json, --log-memory and --trace. The global batch is --batch sequences per rank
times N (the same work per rank at every N). The first --warmup steps of every run are left out.

From the trace, per rank and measured step:
  exchange    the union of the "comm ep" track's operations (the counts' all_to_all and the rows'
              send_recv; all blocking, so all exposed; their spans include waiting for the peer),
              and of it the part after the last rank of the group reached the operation (the
              i-th operation on every rank is the same one): what the exchange itself took
  bytes sent  all_to_all: count (E/ep int64 per peer) x (ep - 1) x 8; send_recv: count x 4 (the
              f32 rows a rank sends its peer; the trace records the sent count)
against the formula (docs/PARALLELISM.md, "Expert parallelism"), per rank and step:
  micro x moe_layers x (8 E (ep-1)/ep + 4 A C s),  A = N k (ep-1)/ep
with N the tokens of a rank's micro-batch, k top-k, C the width, s = 4 (f32) and A the
assignments a rank routes off-rank if routing is balanced (the measured A is what the router
did: the ratio shows its imbalance); with a capacity factor F > 0 also the bound
A <= (ep-1) (E/ep) ceil(F N k / E).

Output: OUT/raw.jsonl (one record per launch) and OUT/summary.md (the tables). One thread per
rank (--threads), one core standing for one device: world sizes above the cores oversubscribe,
which the summary says.
"""
import argparse
import collections
import json
import math
import os
import statistics
import sys
import time

from mesh_scaling import clip, launch, measured_steps, spans_by_rank, union_length  # beside it
from scaling import cpu_name


def moe_layers(layers, every):
    return sum(1 for i in range(layers) if i % every == every - 1)


def params(args, experts, ep):
    """(parameters per rank, active parameters per token) of the GPT, MoE when experts > 0."""
    C, V, T, L = args.width, args.vocab, args.context, args.layers
    mlp = 8 * C * C + 5 * C
    block = 4 * C + 4 * C * C + 4 * C  # two LayerNorms, c_attn and c_proj with biases
    base = V * C + T * C + 2 * C + L * (block + mlp)  # tied head, final LayerNorm
    if experts == 0:
        return base, base
    m = moe_layers(L, args.moe_every)
    held = base + m * (C * experts + (experts // ep - 1) * mlp)
    active = base + m * (C * experts + (args.top_k - 1) * mlp)
    return held, active


def formula_bytes(args, ep):
    """Bytes a rank sends per step through the ep group, balanced routing; and the capacity bound
    on the rows' part (None when dropless)."""
    if ep <= 1:
        return 0, None
    E, k, C, s = args.experts, args.top_k, args.width, 4
    N = args.batch * args.context  # tokens per rank and micro-batch (one micro-batch)
    layers = moe_layers(args.layers, args.moe_every)
    counts = 8 * E * (ep - 1) // ep
    rows = 4 * N * k * (ep - 1) / ep * C * s
    bound = None
    if args.capacity_factor > 0:
        cap = math.ceil(args.capacity_factor * N * k / E)
        bound = layers * (counts + 4 * (ep - 1) * (E // ep) * cap * C * s)
    return layers * (counts + rows), bound


def split_trace(path, warmup, ep):
    """Per rank and measured step: step and exchange time (us), the exchange's part after its
    last peer arrived (the transfer) and before (waiting), and the bytes sent on the ep track."""
    per_rank = spans_by_rank(path)
    steps = {}  # (rank, step) -> (start, end, [ops in order])
    for rank, by_track in per_rank.items():
        ops = sorted(by_track.get("comm ep", []), key=lambda e: e["ts"])
        for st in by_track.get("compute", []):
            if not st["name"].startswith("step "):
                continue
            number = int(st["name"].split(" ")[1])
            a, b = st["ts"], st["ts"] + st["dur"]
            if number >= warmup:
                steps[(rank, number)] = (a, b, [e for e in ops if a <= e["ts"] < b])
    rows = []
    ranks = sorted(per_rank)
    for (rank, number), (a, b, mine) in sorted(steps.items()):
        sent, transfer = 0, 0.0
        # The same operations in the same order on every rank of the group (one group here:
        # ep = the world): the i-th starts for real when the last rank reaches it. One clock on
        # one host; across hosts this split would need their clocks aligned.
        others = [steps.get((r, number), (0, 0, []))[2] for r in ranks]
        aligned = ep == len(ranks) and all(len(o) == len(mine) for o in others)
        for i, e in enumerate(mine):
            coll, count, dtype = e["name"].split(" ")[0], int(e["args"]["count"]), e["args"]["dtype"]
            size = {"int64": 8, "float": 4, "double": 8}.get(dtype)
            if size is None:
                sys.exit("moe_scaling: unexpected dtype %s on the ep track" % dtype)
            sent += count * size * (ep - 1 if coll == "all_to_all" else 1)
            if aligned:
                last = max(o[i]["ts"] for o in others)
                transfer += max(0.0, e["ts"] + e["dur"] - max(e["ts"], last))
        exchange = union_length(clip([(e["ts"], e["ts"] + e["dur"]) for e in mine], a, b))
        rows.append({"rank": rank, "step": number, "step_us": b - a, "exchange_us": exchange,
                     "transfer_us": transfer if aligned else None, "sent_bytes": sent,
                     "ops": len(mine)})
    return rows


def run(args, name, n, ep, rnd):
    base = os.path.join(args.out, "%s.np%d.r%d" % (name.replace(" ", "").replace("=", ""), n, rnd))
    cmd = [os.path.join(args.build, "bin", "chorus-run"), "-n", str(n),
           os.path.join(args.build, "bin", "chorus-train"), "--dp", str(n), "--zero", "0",
           "--layers", str(args.layers), "--width", str(args.width), "--heads", str(args.heads),
           "--context", str(args.context), "--vocab", str(args.vocab),
           "--batch", str(args.batch * n), "--steps", str(args.steps), "--quiet",
           "--threads", str(args.threads), "--log-json", base + ".jsonl",
           "--log-memory", base + ".memory.json", "--trace", base + ".trace.json"]
    if ep > 0:
        cmd += ["--experts", str(args.experts), "--top-k", str(args.top_k),
                "--moe-every", str(args.moe_every), "--capacity-factor", str(args.capacity_factor),
                "--ep", str(ep)]
    t0 = time.time()
    if not launch(cmd, args.timeout):
        return None
    steps = measured_steps(base + ".jsonl", args.warmup)
    with open(base + ".memory.json") as f:
        peak = json.load(f)["peak_bytes"]
    rows = split_trace(base + ".trace.json", args.warmup, max(ep, 1))
    if not args.keep_traces:
        os.remove(base + ".trace.json")
    mean = lambda xs: sum(xs) / len(xs) if xs else 0.0
    formula, bound = formula_bytes(args, ep)
    held, active = params(args, args.experts if ep > 0 else 0, max(ep, 1))
    return {"config": name, "np": n, "ep": ep, "round": rnd,
            "step_ms": statistics.median(s["step_ms"] for s in steps),
            "tokens_per_s": statistics.median(s["tokens_per_s"] for s in steps),
            "exchange_ms": mean([r["exchange_us"] for r in rows]) / 1e3,
            "exchange_share": mean([r["exchange_us"] / r["step_us"] for r in rows if r["step_us"] > 0]),
            "transfer_ms": (mean([r["transfer_us"] for r in rows]) / 1e3
                            if rows and all(r["transfer_us"] is not None for r in rows) else None),
            "sent_bytes": [r["sent_bytes"] for r in rows],
            "formula_bytes": formula, "bound_bytes": bound,
            "peak_bytes": peak, "params_per_rank": held, "active_params": active,
            "load": os.getloadavg()[0], "wall_s": time.time() - t0}


def summarize(records, nps, cores):
    by = collections.defaultdict(list)
    for r in records:
        by[(r["config"], r["np"])].append(r)
    med = lambda rs, k: statistics.median(r[k] for r in rs)

    def exch(rs):
        text = "%.1f" % med(rs, "exchange_ms")
        if all(r.get("transfer_ms") is not None for r in rs):
            text += " (%.1f)" % med(rs, "transfer_ms")
        return text

    lines = ["| ranks | config | params per rank | active per token | step ms | tokens/s | "
             "/ dense (same round) | exchange ms (after the last peer arrived) | exchange share | bytes sent per rank and step: measured "
             "(min-max over ranks, steps) / formula | peak MiB per rank |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for n in nps:
        dense = by.get(("dense", n))
        for name in ["dense", "moe ep=1"] + (["moe ep=%d" % n] if n > 1 else []):
            rs = by.get((name, n))
            if not rs:
                continue
            tok = med(rs, "tokens_per_s")
            # Against the dense run of the same round (launched next to it): median [range].
            dense_of = {r["round"]: r["tokens_per_s"] for r in dense or []}
            ratios = [r["tokens_per_s"] / dense_of[r["round"]] for r in rs if r["round"] in dense_of]
            ratio = "%.2f [%.2f-%.2f]" % (statistics.median(ratios), min(ratios), max(ratios)) \
                if ratios else "-"
            sent = [b for r in rs for b in r["sent_bytes"]]
            vol = "-"
            if rs[0]["ep"] > 1:
                f = rs[0]["formula_bytes"]
                vol = "%.0f KiB (%.0f-%.0f) / %.0f KiB = %.3f" % (
                    statistics.mean(sent) / 1024, min(sent) / 1024, max(sent) / 1024, f / 1024,
                    statistics.mean(sent) / f)
                if rs[0]["bound_bytes"] is not None:
                    vol += "; bound %.0f KiB" % (rs[0]["bound_bytes"] / 1024)
            peak = [p for r in rs for p in r["peak_bytes"]]
            over = " (%d ranks on %d cores)" % (n, cores) if n > cores else ""
            lines.append("| %d%s | %s | %.2f M | %.2f M | %.1f | %.0f | %s | %s | %s | %s | %.1f |" % (
                n, over, name, rs[0]["params_per_rank"] / 1e6, rs[0]["active_params"] / 1e6,
                med(rs, "step_ms"), tok, ratio,
                exch(rs) if rs[0]["ep"] > 1 else "-",
                "%.1f%%" % (100 * med(rs, "exchange_share")) if rs[0]["ep"] > 1 else "-",
                vol, statistics.median(peak) / 2**20))
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--np", default="1,2", help="world sizes (default 1,2; 4 oversubscribes 2 cores)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3, help="steps left out of every run")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8, help="sequences per rank (global: x ranks)")
    ap.add_argument("--experts", type=int, default=4)
    ap.add_argument("--top-k", type=int, default=1, help="1: the dense GPT's active parameters")
    ap.add_argument("--moe-every", type=int, default=1)
    ap.add_argument("--capacity-factor", type=float, default=0, help="0: dropless")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="moe-results")
    ap.add_argument("--keep-traces", action="store_true")
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--from-raw", default="", help="no launches: summarize this raw.jsonl")
    args = ap.parse_args()
    if args.steps <= args.warmup:
        sys.exit("moe_scaling: --steps must exceed --warmup")
    nps = [int(x) for x in args.np.split(",")]
    for n in nps:
        if args.experts % n:
            sys.exit("moe_scaling: --experts %d does not divide over %d ranks" % (args.experts, n))
    os.makedirs(args.out, exist_ok=True)
    cores = os.cpu_count() or 1
    plan = []
    for n in nps:
        plan += [("dense", n, 0), ("moe ep=1", n, 1)] + ([("moe ep=%d" % n, n, n)] if n > 1 else [])
    records = []
    if args.from_raw:
        with open(args.from_raw) as f:
            records = [json.loads(line) for line in f if line.strip()]
        args.rounds = 0
    with open(os.path.join(args.out, "raw.jsonl"), "a") as raw:
        for rnd in range(args.rounds):
            order = plan[rnd % len(plan):] + plan[:rnd % len(plan)]
            for name, n, ep in order:
                r = run(args, name, n, ep, rnd)
                if r is None:
                    continue
                r["cpu"] = cpu_name()
                records.append(r)
                raw.write(json.dumps(r) + "\n")
                raw.flush()
                print("round %d np=%d %s: %.1f ms/step, %.0f tokens/s, exchange %.1f%% (load %.1f)" % (
                    rnd, n, name, r["step_ms"], r["tokens_per_s"], 100 * r["exchange_share"],
                    r["load"]), flush=True)
    loads = [r["load"] for r in records]
    text = ("CPU: %s, %d cores; load average during the runs %.1f-%.1f; model: %d layers, width %d, "
            "%d heads, context %d, vocab %d; %d sequences per rank; MoE: %d experts, top-%d, every "
            "%d block(s), capacity factor %g; DDP over dp, f32, %d thread(s) per rank; median of "
            "%d rounds of %d steps (the first %d left out); command: %s\n\n%s\n" % (
                cpu_name(), cores, min(loads or [0]), max(loads or [0]), args.layers, args.width,
                args.heads, args.context, args.vocab, args.batch, args.experts, args.top_k,
                args.moe_every, args.capacity_factor, args.threads,
                len({r["round"] for r in records}), args.steps, args.warmup,
                " ".join(["bench/parallel/moe_scaling.py"] + sys.argv[1:]),
                "\n".join(summarize(records, nps, cores))))
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
