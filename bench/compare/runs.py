"""compare.py's chorus side: building it, timing chorus-bench, the copy rooflines and the
start-up time."""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from common import IN_PLACE, log, run


def build_chorus(build, skip):
    targets = ["chorus-bench", "chorus-run", "chorus-startup-probe", "chorus-copy-roofline"]
    if not skip:
        log(f"building {', '.join(targets)} in {build}")
        subprocess.run(["cmake", "--build", build, "--parallel", str(os.cpu_count() or 1),
                        "--target", *targets], check=True,
                       stdout=subprocess.DEVNULL)
    for t in targets:
        if not os.path.exists(os.path.join(build, "bin", t)):
            sys.exit(f"compare: {build}/bin/{t} is missing (build it, or drop --no-build)")


# Timed blocks per chorus line, the median reported: the anchors' default (bench_common.h, -r 3).
BLOCKS = 3


def chorus_iters(size):
    """Enough iterations for ~0.1-0.5 s per line, at least 5 (split into BLOCKS timed blocks of
    at least 2 calls, as the anchors time theirs); and a warm-up like the anchors'.
    Their calibration (bench_common.h) calls the collective 1, 2, 4, ... times until one run
    takes 20 ms or 2000 calls: up to 4095 calls before the first timed one. Small calls right
    after the launch run several times slower than later ones on this VM (1 KiB all_gather,
    np=2: 1.1-3.7 us over 2000 calls after 200 warm-up calls, 0.6 us after 4000), so chorus gets
    as many: 4095 calls below 16 KiB, then about 64 MiB's worth, at least 2."""
    iters = max(5, min(2000, (1 << 29) // max(size, 1)))
    return max(2, iters // BLOCKS), max(2, min(4095, (1 << 26) // max(size, 1)))


def run_chorus(build, n, coll, size, blocking, timeout):
    """One chorus-bench launch for one (collective, size): (us, algorithm, wrong) or None."""
    iters, warmup = chorus_iters(size)
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [os.path.join(build, "bin", "chorus-run"), "-n", str(n),
               os.path.join(build, "bin", "chorus-bench"), coll, "-b", str(size), "-e", str(size),
               "-n", str(iters), "--blocks", str(BLOCKS), "-w", str(warmup), "-z", str(blocking),
               "--json", f.name]
        rc, out, err = run(cmd, timeout)
        try:
            rows = json.load(open(f.name))["rows"]
        except (OSError, ValueError, KeyError):
            rows = []
    if rc not in (0, 1) or not rows:
        log(f"  chorus np={n} {coll} {size}: exit {rc}: {err.strip()[-300:]}")
        return None
    placement = "in-place" if coll in IN_PLACE else "out-of-place"
    row = next(r for r in rows if r["placement"] == placement)
    return row["time_us"], row["algorithm"], row["wrong"] or 0, row["size"]


def roofline_gbps(build, procs, size, extra=(), runs=3):
    """Median bytes / time of chorus-copy-roofline with `procs` processes of `size` bytes and the
    flags in `extra` (None if it fails): by default each process fills its buffer from one shared
    source with streaming stores; ["--ring"] out of a shared ring one more process fills;
    ["--all-reduce", ...] one ring all-reduce rank's work each (alone, or "--shared": through
    FIFOs between neighbours), with the warm-up and timed calls chorus-bench makes at that size."""
    exe = os.path.join(build, "bin", "chorus-copy-roofline")
    extra = list(extra)
    if "--all-reduce" in extra:
        iters, warmup = chorus_iters(size)
        extra += ["--iters", str(iters * BLOCKS), "--warmup", str(warmup)]
    got = []
    for _ in range(runs):
        cmd = [exe, "--procs", str(procs), "--bytes", str(size)] + extra
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            log(f"  {' '.join(cmd[1:])}: exit {p.returncode}: {p.stderr.strip()[-200:]}")
            return None
        got.append(float(p.stdout.split("bytes / time")[1].split()[0]))
    return statistics.median(got)


def startup_runs(cmd, runs, timeout):
    """Launches cmd `runs` times: [(to first all-reduce ms, to exit ms)]."""
    out_rows = []
    for _ in range(runs):
        t0 = time.monotonic_ns()
        rc, out, err = run(cmd, timeout)
        t_exit = time.monotonic_ns()
        done = next((int(line.split()[1]) for line in out.splitlines()
                     if line.startswith("first_allreduce_done_ns")), None)
        if rc != 0 or done is None:
            log(f"  start-up {' '.join(cmd[:2])}: exit {rc}: {err.strip()[-200:]}")
            continue
        out_rows.append(((done - t0) / 1e6, (t_exit - t0) / 1e6))
    return out_rows


def hyperfine_ms(cmds, runs, out_dir):
    """Whole-launch medians (start to exit, ms) from hyperfine, when it is installed."""
    if not shutil.which("hyperfine"):
        return {}
    path = os.path.join(out_dir, "hyperfine.json")
    args = ["hyperfine", "-N", "--warmup", "2", "--runs", str(runs), "--export-json", path]
    for name, cmd in cmds.items():
        args += ["-n", name, " ".join(cmd)]
    rc, out, err = run(args, 600)
    if rc != 0:
        log(f"  hyperfine: exit {rc}: {err.strip()[-300:]}")
        return {}
    return {r["command"]: r["median"] * 1e3 for r in json.load(open(path))["results"]}
