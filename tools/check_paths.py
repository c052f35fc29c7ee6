#!/usr/bin/env python3
"""check_paths.py — fails when a tracked file names one machine's directories.

A machine path is one that only exists on the machine the text was written on: a user's home
(home/<user>, root/..., Users/<user> at the top of the file system), a workspace (work/...,
scratch/..., mnt/... there), or a generated temporary name under tmp/ (tmpXXXXXX, pytest-of-<user>,
<name>.<digits>/...).
System paths that are the same everywhere (/usr/lib, /dev/shm, /proc, /sys, /etc, /opt/rocm,
/var/run) and short example scratch paths in commands (tools/chorus-fr /tmp/fr) are fine.

Usage: tools/check_paths.py [--root DIR] [FILE...]
    no FILE: every file git tracks under DIR (default: the repository this script is in).
Prints FILE:LINE: PATH for each hit; exits 1 when there is one, 0 otherwise.
"""
import argparse
import pathlib
import re
import subprocess
import sys

# The patterns are spelled so that this file does not match itself.
_SEP = "/"
_KINDS = [
    "(?:home|Users)" + _SEP + "[A-Za-z0-9_.-]+",  # a user's home
    "root" + _SEP,  # root's home
    "(?:work|scratch|mnt|workspace)" + _SEP,  # workspaces and mounts
    # generated temporary names
    "tmp" + _SEP + r"(?:tmp[A-Za-z0-9_]{6,}|pytest-of-|bash_jobs|[\w-]+\.\d{3,}(?:/|\b))",
]
MACHINE_PATH = re.compile(r"(?<![\w.~$}-])" + _SEP + "(?:" + "|".join(_KINDS) + r")[^\s'\"`)>\]]*")


def tracked_files(root):
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], check=True,
                         capture_output=True).stdout
    return [root / name for name in out.decode().split("\0") if name]


def hits(path):
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return  # binary or unreadable: not text anyone reads as a path
    for number, line in enumerate(text.splitlines(), 1):
        for m in MACHINE_PATH.finditer(line):
            yield number, m.group(0)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=pathlib.Path,
                    default=pathlib.Path(__file__).resolve().parent.parent)
    ap.add_argument("files", nargs="*", type=pathlib.Path)
    args = ap.parse_args(argv)
    files = args.files or tracked_files(args.root)
    found = 0
    for f in files:
        if not f.is_file():
            continue
        for number, text in hits(f):
            shown = f.relative_to(args.root) if f.is_relative_to(args.root) else f
            print(f"{shown}:{number}: {text}")
            found += 1
    if found:
        print(f"check_paths: {found} machine path(s): write them relative to the repository or "
              f"as a placeholder (<prefix>, ../shared/...)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
