#!/usr/bin/python3
"""trace_png.py - draws a chorus trace (chorus-train --trace) as a PNG: one band per rank, one
row per track inside it (compute, pipeline waits, each communicator), forwards blue, backwards
green, optimizer grey, collectives orange, waits red.

    tools/trace_png.py TRACE.json OUT.png [--step N | --from-ms A --to-ms B]

Needs matplotlib (Debian: python3-matplotlib, installed by tools/install-deps.sh); run under
another interpreter that lacks it, the script starts itself again under Debian's /usr/bin/python3.
"""
import os
import argparse
import collections
import json
import sys


def color(name, track):
    if track.startswith("comm"):
        return "#f28e2b"
    if track == "pipeline":
        return "#e15759"
    if name.startswith(("forward h.", "F ")):
        return "#4e79a7"
    if name.startswith(("backward h.", "B ")):
        return "#59a14f"
    if name.startswith("gradient norm"):
        return "#9c9c9c"
    return "#d7d7d7"  # steps and the forward-backward phase


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--from-ms", type=float, default=None)
    ap.add_argument("--to-ms", type=float, default=None)
    ap.add_argument("--step", type=int, default=None, help="only the window of step N (every rank's)")
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        if sys.executable != "/usr/bin/python3" and os.path.exists("/usr/bin/python3"):
            os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
        sys.exit("trace_png: matplotlib is missing (apt-get install python3-matplotlib)")
    with open(args.trace) as f:
        events = json.load(f)["traceEvents"]
    names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
    rows = collections.OrderedDict()
    for key in sorted({(e["pid"], e["tid"]) for e in events if e.get("ph") == "X"},
                      key=lambda k: (k[0], names.get(k, "") != "compute", names.get(k, ""))):
        rows[key] = len(rows)
    lo = (args.from_ms or 0) * 1000.0
    hi = args.to_ms * 1000.0 if args.to_ms is not None else max(
        e["ts"] + e["dur"] for e in events if e.get("ph") == "X")
    if args.step is not None:
        spans = [e for e in events if e.get("ph") == "X" and e["name"] == "step %d" % args.step]
        if not spans:
            sys.exit("trace_png: no step %d in %s" % (args.step, args.trace))
        lo = min(e["ts"] for e in spans)
        hi = max(e["ts"] + e["dur"] for e in spans)
    fig, ax = plt.subplots(figsize=(14, 0.32 * len(rows) + 1.2))
    depth = collections.defaultdict(list)
    for e in sorted((e for e in events if e.get("ph") == "X"), key=lambda e: (e["ts"], -e["dur"])):
        s, t = e["ts"], e["ts"] + e["dur"]
        if t < lo or s > hi:
            continue
        s, t = max(s, lo), min(t, hi)
        key = (e["pid"], e["tid"])
        track = names.get(key, "")
        # Nested events are drawn thinner on top of their parent.
        stack = depth[key]
        while stack and s >= stack[-1]:
            stack.pop()
        level = len(stack)
        stack.append(t)
        height = max(0.8 - 0.18 * level, 0.2)
        y = rows[key] - height / 2
        ax.broken_barh([((s - lo) / 1000.0, max(t - s, 1) / 1000.0)], (y, height),
                       facecolors=color(e["name"], track), edgecolor="none")
    ax.set_yticks(list(rows.values()))
    ax.set_yticklabels(["rank %d %s" % (k[0], names.get(k, "")) for k in rows])
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    ax.set_title(args.trace.split("/")[-1] + ("" if args.step is None else ", step %d" % args.step))
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print("trace_png: wrote %s (%d rows)" % (args.out, len(rows)))


if __name__ == "__main__":
    main()
