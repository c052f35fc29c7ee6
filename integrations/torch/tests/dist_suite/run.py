"""Runs PyTorch's distributed test suite on chorus and on gloo, and compares them test by test.

    PYTHONPATH=build/python python3 run.py                   # whole suite, 2 and 3 ranks
    python3 run.py --world-sizes 2 --group ci --out-dir D      # the CI selection (ctest)
    python3 run.py --tests test_send_recv_with_tag,...         # chosen tests

For every world size it runs the suite (worker.py, one process per backend and world size:
the suite reads both when imported) on gloo, the reference, and on chorus as a plugin backend
with the gates of gates.py lifted. It writes, into --out-dir, each run's results as JSON
(<backend>-<world size>.json) and table.md: per test and world size, gloo's and chorus's
status (pass, fail, error, skip) with the first line of a failure, then the summary and the
comparison "passes on gloo, not on chorus".

Exit status: 1 when a test passes on gloo and not on chorus, unless gates.KNOWN_GAPS lists it
with its reason (those are reported as known); also 1 when a known gap now passes on chorus (so
the list is kept true); 0 otherwise.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gates  # noqa: E402

BACKENDS = ("gloo", gates.BACKEND)

# The selection CI runs (--group ci): the suite's collectives, point-to-point and barrier tests,
# a Future, an object collective and a DDP test, and one test of each gap of the issue (tags,
# any-source receive, coalesced calls, monitored_barrier, sparse), at a few seconds each.
CI_TESTS = (
    "test_all_reduce_sum", "test_all_reduce_max", "test_all_reduce_sum_complex",
    "test_all_reduce_coalesced_sum", "test_all_reduce_coalesced_max",
    "test_all_gather", "test_all_gather_coalesced_simple",
    "test_broadcast", "test_reduce_sum", "test_gather", "test_scatter",
    "test_all_to_all_single_equal_split", "test_all_to_all_single_unequal_split",
    "test_barrier", "test_barrier_group", "test_barrier_timeout_global",
    "test_send_recv", "test_send_recv_with_tag", "test_send_recv_any_source",
    "test_isend", "test_irecv", "test_batch_isend_irecv_gloo", "test_batch_isend_irecv_gloo_tags",
    "test_all_gather_coalesced_with_empty",
    "test_monitored_barrier_gloo",
    "test_sparse_all_reduce_sum",
    "test_get_future", "test_all_gather_object_default_pg",
    "test_DistributedDataParallel_requires_grad",
)


def run_worker(backend, world_size, tests, out, timeout, log):
    cmd = [sys.executable, os.path.join(HERE, "worker.py"), "--backend", backend,
           "--world-size", str(world_size), "--out", out, "--timeout", str(timeout)]
    if tests:
        cmd += ["--tests", ",".join(tests)]
    t0 = time.monotonic()
    with open(log, "w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc != 0 or not os.path.exists(out):
        raise SystemExit(f"worker for {backend} at {world_size} ranks failed (exit {rc}); "
                         f"see {log}")
    print(f"{backend} at {world_size} ranks: {time.monotonic() - t0:.0f} s", flush=True)
    with open(out) as f:
        return json.load(f)


def cell(r):
    if r is None:
        return "-"
    s = r["status"]
    if s == "pass" or not r["message"]:
        return s
    return f"{s}: {r['message'].replace('|', '/')[:120]}"


def compare(results, world_sizes):
    """(rows, regressions, fixed_gaps, summary) from {(backend, ws): {test: result}}."""
    names = sorted(set().union(*(r.keys() for r in results.values())))
    rows, regressions, known, fixed = [], [], [], []
    summary = {}
    for ws in world_sizes:
        gloo, chorus = results[("gloo", ws)], results[(gates.BACKEND, ws)]
        counts = {b: {} for b in BACKENDS}
        for b, res in (("gloo", gloo), (gates.BACKEND, chorus)):
            for r in res.values():
                counts[b][r["status"]] = counts[b].get(r["status"], 0) + 1
        summary[ws] = counts
        for name in names:
            g, c = gloo.get(name), chorus.get(name)
            rows.append((name, ws, cell(g), cell(c)))
            gap = g is not None and g["status"] == "pass" and (c is None or c["status"] != "pass")
            if name in gates.KNOWN_GAPS:
                if gap:
                    known.append((name, ws, gates.KNOWN_GAPS[name]))
                elif g is not None and g["status"] == "pass":
                    fixed.append((name, ws))
            elif gap:
                regressions.append((name, ws, cell(c)))
    return rows, regressions, known, fixed, summary


def table(rows, regressions, known, fixed, summary, world_sizes):
    out = ["# PyTorch's distributed suite: gloo and chorus", ""]
    out += ["## Summary", "", "| ranks | backend | pass | fail | error | skip |", "|---|---|---|---|---|---|"]
    for ws in world_sizes:
        for b in BACKENDS:
            c = summary[ws][b]
            out.append(f"| {ws} | {b} | {c.get('pass', 0)} | {c.get('fail', 0)} | "
                       f"{c.get('error', 0)} | {c.get('skip', 0)} |")
    out += ["", "## Passes on gloo, not on chorus", ""]
    if not regressions and not known:
        out.append("none")
    for name, ws, what in regressions:
        out.append(f"- {name} ({ws} ranks): {what}")
    for name, ws, why in known:
        out.append(f"- {name} ({ws} ranks), known: {why}")
    if fixed:
        out += ["", "## Listed in gates.KNOWN_GAPS but passing on chorus", ""]
        out += [f"- {name} ({ws} ranks)" for name, ws in fixed]
    out += ["", "## Lifted gates", ""]
    out += [f"- feature `{f}`: {why}" for f, why in gates.FEATURES.items()]
    out += [f"- {', '.join(l.tests)}: {l.reason}" for l in gates.LIFTS]
    out += ["", "## Per test", "", "| test | ranks | gloo | chorus |", "|---|---|---|---|"]
    out += [f"| {n} | {ws} | {g} | {c} |" for n, ws, g, c in rows]
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world-sizes", default="2,3")
    ap.add_argument("--group", choices=("all", "ci"), default="all")
    ap.add_argument("--tests", default="", help="comma-separated names (overrides --group)")
    ap.add_argument("--out-dir", default=os.path.join(tempfile.gettempdir(), "chorus-dist-suite"),
                    help="where the results and table.md go (default: %(default)s)")
    ap.add_argument("--timeout", type=int, default=120, help="per-test limit in seconds")
    ap.add_argument("--reuse", action="store_true",
                    help="take a run's results from --out-dir when its JSON is there already")
    args = ap.parse_args()

    world_sizes = [int(w) for w in args.world_sizes.split(",")]
    tests = [t for t in args.tests.split(",") if t] or (list(CI_TESTS) if args.group == "ci"
                                                        else [])
    os.makedirs(args.out_dir, exist_ok=True)
    results = {}
    for ws in world_sizes:
        for b in BACKENDS:
            out = os.path.join(args.out_dir, f"{b}-{ws}.json")
            if args.reuse and os.path.exists(out):
                with open(out) as f:
                    results[(b, ws)] = json.load(f)
                if tests:
                    results[(b, ws)] = {t: results[(b, ws)][t] for t in tests
                                        if t in results[(b, ws)]}
                continue
            results[(b, ws)] = run_worker(b, ws, tests, out, args.timeout,
                                          os.path.join(args.out_dir, f"{b}-{ws}.log"))
    rows, regressions, known, fixed, summary = compare(results, world_sizes)
    text = table(rows, regressions, known, fixed, summary, world_sizes)
    with open(os.path.join(args.out_dir, "table.md"), "w") as f:
        f.write(text)
    for ws in world_sizes:
        print(f"{ws} ranks: " + ", ".join(
            f"{b} {summary[ws][b].get('pass', 0)} pass" for b in BACKENDS))
    for name, ws, what in regressions:
        print(f"passes on gloo, not on chorus ({ws} ranks): {name}: {what}")
    for name, ws, why in known:
        print(f"known gap ({ws} ranks): {name}: {why}")
    for name, ws in fixed:
        print(f"listed as a known gap but passes on chorus ({ws} ranks): {name}")
    print(f"table: {os.path.join(args.out_dir, 'table.md')}")
    return 1 if regressions or fixed else 0


if __name__ == "__main__":
    sys.exit(main())
