#!/usr/bin/env python3
"""check_trace.py - checks that a trace chorus-train wrote follows the Chrome trace-event format
and describes a consistent job.

    tools/check_trace.py TRACE.json [--ranks N]

Checks: the file is {"traceEvents": [...]}; every event is a complete ("X") or metadata ("M")
event with a name, integer pid and tid, and for "X" a non-negative ts and dur in microseconds;
every rank 0..N-1 has events (N from --ranks, else the largest pid + 1); on each track (pid, tid)
events nest (an event that starts inside another ends inside it); every collective a
communicator group ran (args "comm", "group" and "seq"; point-to-point excluded) appears on every
rank of that group that traced it. Prints a summary and exits 0, or lists what is wrong and exits 1.
"""
import argparse
import collections
import json
import sys

POINT_TO_POINT = ("send", "recv", "send_recv")


def check(path, ranks):
    errors = []
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        return ["cannot read %s as JSON: %s" % (path, e)], {}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["%s: expected an object with a traceEvents list" % path], {}
    events = doc["traceEvents"]
    complete = []
    for i, e in enumerate(events):
        if not isinstance(e, dict) or e.get("ph") not in ("X", "M"):
            errors.append("event %d: ph must be X or M, got %r" % (i, e.get("ph") if isinstance(e, dict) else e))
            continue
        if not isinstance(e.get("name"), str) or not isinstance(e.get("pid"), int) or not isinstance(e.get("tid"), int):
            errors.append("event %d: needs a string name and integer pid and tid" % i)
            continue
        if e["ph"] == "X":
            ts, dur = e.get("ts"), e.get("dur")
            if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)) or ts < 0 or dur < 0:
                errors.append("event %d (%s): ts and dur must be non-negative numbers" % (i, e["name"]))
                continue
            complete.append(e)
    pids = {e["pid"] for e in complete}
    n = ranks if ranks else (max(pids) + 1 if pids else 0)
    missing = sorted(set(range(n)) - pids)
    if missing:
        errors.append("ranks without events: %s" % missing)
    # Nesting per track.
    tracks = collections.defaultdict(list)
    for e in complete:
        tracks[(e["pid"], e["tid"])].append(e)
    eps = 0.01  # the file's microseconds have three decimals
    for (pid, tid), evs in sorted(tracks.items()):
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in evs:
            end = e["ts"] + e["dur"]
            while stack and e["ts"] >= stack[-1][0] - eps:
                stack.pop()
            if stack and end > stack[-1][0] + eps:
                errors.append("rank %d track %d: '%s' [%.3f, %.3f] overlaps '%s' without nesting" % (
                    pid, tid, e["name"], e["ts"], end, stack[-1][1], ))
            stack.append((end, e["name"]))
    # Collectives on every rank of their communicator.
    seen = collections.defaultdict(set)      # (comm, group, seq) -> pids
    traced = collections.defaultdict(set)    # (comm, group) -> pids
    for e in complete:
        args = e.get("args") or {}
        if "comm" in args and "seq" in args:
            group = (args["comm"], args.get("group", ""))
            traced[group].add(e["pid"])
            if not e["name"].split(" ")[0] in POINT_TO_POINT:
                seen[group + (args["seq"],)].add(e["pid"])
    for (comm, group, seq), where in sorted(seen.items()):
        lacking = sorted(traced[(comm, group)] - where)
        if lacking:
            errors.append("collective %s #%d (group %s) is missing on ranks %s" % (comm, seq, group, lacking))
    summary = {"events": len(complete), "ranks": n, "tracks": len(tracks),
               "collectives": len(seen), "communicators": sorted({c for c, _ in traced})}
    return errors, summary


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--ranks", type=int, default=0)
    args = ap.parse_args()
    errors, summary = check(args.trace, args.ranks)
    if errors:
        for e in errors[:50]:
            print("check_trace: " + e)
        if len(errors) > 50:
            print("check_trace: ... and %d more" % (len(errors) - 50))
        sys.exit(1)
    print("check_trace: %(events)d events on %(ranks)d ranks, %(tracks)d tracks, %(collectives)d "
          "collectives on %(communicators)s: ok" % summary)


if __name__ == "__main__":
    main()
