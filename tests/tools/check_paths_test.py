#!/usr/bin/env python3
"""check_paths_test.py — tools/check_paths.py finds machine paths and lets system paths be.

The fixtures are written at run time (assembled from pieces), so that no tracked file holds a
machine path.
"""
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "check_paths.py"
S = "/"

BAD = [S + "work" + S + "wt1/build", S + "home" + S + "alice/src", S + "root" + S + ".cache/x",
       S + "Users" + S + "bob/chorus", S + "tmp" + S + "tmpab12cd34/out.json",
       S + "tmp" + S + "bash_jobs.1000/3/stdout", S + "tmp" + S + "run.12345/log"]
GOOD = [S + "usr/lib/x86_64-linux-gnu", S + "dev/shm/chorus-1", S + "proc/self/status",
        S + "sys/devices/system/cpu", S + "opt/rocm", S + "tmp" + S + "fr", "build/work/x",
        "~/work/x", "$HOME/work/x", "../shared/anchors"]


def run(*files):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, files)], capture_output=True,
                          text=True)


def main():
    failures = []
    with tempfile.TemporaryDirectory() as d:
        for i, text in enumerate(BAD):
            f = pathlib.Path(d) / f"bad{i}.md"
            f.write_text(f"see `{text}` here\n")
            r = run(f)
            if r.returncode != 1 or text.split()[0] not in r.stdout:
                failures.append(f"not found: {text!r} ({r.returncode}: {r.stdout.strip()})")
        good = pathlib.Path(d) / "good.md"
        good.write_text("\n".join(f"use {p} here" for p in GOOD) + "\n")
        r = run(good)
        if r.returncode != 0:
            failures.append(f"system paths refused: {r.stdout.strip()}")
    # The repository itself has none.
    r = subprocess.run([sys.executable, str(SCRIPT), "--root", str(ROOT)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        failures.append(f"the tree has machine paths:\n{r.stdout}")
    for f in failures:
        print("FAIL:", f)
    print("check_paths_test:", "FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
