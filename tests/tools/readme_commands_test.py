#!/usr/bin/env python3
"""readme_commands_test.py — runs the commands README.md shows, as a new user would after the
README's own set-up step (tools/chorus demo, which builds what these commands use), against an
already-built build directory, at small sizes so that the whole run stays under a minute.

Usage: readme_commands_test.py --source DIR --build DIR [--list] [--timeout SECONDS]

The commands are read from README.md, so the test follows it: every command of its ```sh blocks
(backslash continuations joined, comments dropped) and the inline spans that name a chorus
program with one option (`chorus-tune --show`). The set-up steps themselves (tools/chorus ...) are
not rerun. In a command, build/ means --build and a path into the repository (tests/data/...,
tools/...) means the one under --source; everything else runs in a scratch directory, with HOME
there too, and its cache folder (chorus-tune writes ~/.cache/chorus/...). SHRINK below makes each program's run small
without changing what it does; a command that needs what this machine lacks (PyTorch, MPI,
matplotlib) or the reader's own program (./train) is skipped with the reason. A command whose
program does not exist fails: that is the "No such file" a new user would meet.
"""
import argparse
import os
import pathlib
import re
import shlex
import subprocess
import sys
import tempfile
import time


def readme_commands(readme):
    """The README's commands, in order, as (line number, command text)."""
    commands = []
    in_sh = False
    pending, start = "", 0
    for number, line in enumerate(readme.read_text().splitlines(), 1):
        if line.startswith("```"):
            in_sh = not in_sh and line.strip() in ("```sh", "```bash")
            continue
        if in_sh:
            body = line.split(" #", 1)[0].rstrip() if not line.lstrip().startswith("#") else ""
            if not pending:
                start = number
            if body.endswith("\\"):
                pending += body[:-1] + " "
                continue
            text = (pending + body).strip()
            pending = ""
            if text:
                commands.append((start, text))
        else:
            for span in re.findall(r"`(chorus-[a-z-]+ --?[a-z-]+)`", line):
                commands.append((number, "build/bin/" + span))
    return commands


def size_bytes(text):
    m = re.fullmatch(r"(\d+)([KMG]?)", text)
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)] if m else None


def set_option(args, flag, value):
    """Replaces flag's value in args, or appends flag value."""
    if flag in args:
        args[args.index(flag) + 1] = value
    else:
        args += [flag, value]


def shrink_bench(args):
    if "-h" in args or "--print-env" in args:
        return
    # Sizes up to 64K, two timed iterations after one warm-up: the same tables, small.
    if "-e" in args and (size_bytes(args[args.index("-e") + 1]) or 0) > 64 << 10:
        set_option(args, "-e", "64K")
    set_option(args, "-n", "2")
    set_option(args, "-w", "1")


def shrink_train(args):
    # A 25th of the steps (the save/resume pair keeps its proportions) of a small model.
    if "--steps" in args:
        i = args.index("--steps") + 1
        args[i] = str(max(1, int(args[i]) // 25))
    for flag, value in (("--layers", "2"), ("--width", "32"), ("--heads", "2"),
                        ("--context", "16"), ("--batch", "4")):
        if flag not in args and "--help" not in args:
            args += [flag, value]


def shrink_tune(args):
    if "--show" not in args:
        args += ["--max-bytes", "4K", "--colls", "all_reduce"]


def shrink_roofline(args):
    args += ["--bytes", "64K", "--iters", "2"]
    if "--all-reduce" in args:  # --warmup belongs to --all-reduce only
        args += ["--warmup", "1"]


def shrink_kernels(args):
    # The float kernels at the two smaller sizes: the 256 MiB cases alone take a minute and more
    # to allocate and fill.
    args += ["--benchmark_min_time=0.001", "--benchmark_filter=f32.*/(64KiB|1MiB)$"]


SHRINK = {
    "chorus-bench": shrink_bench,
    "chorus-train": shrink_train,
    "chorus-tune": shrink_tune,
    "chorus-copy-roofline": shrink_roofline,
    "chorus-kernels-bench": shrink_kernels,
}


def python_has(module, env):
    return subprocess.run([sys.executable, "-c", f"import {module}"], env=env,
                          capture_output=True).returncode == 0


def prepare(text, source, build, env):
    """(argv, env) to run, or (None, reason) to skip."""
    words = shlex.split(text)
    env = dict(env)
    while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
        name, value = words.pop(0).split("=", 1)
        env[name] = str(build / value[len("build/"):]) if value.startswith("build/") else value
    top = {p.name for p in source.iterdir()}

    def resolve(word):
        if word.startswith("build/"):
            return str(build / word[len("build/"):])
        first = word.split("/", 1)[0]
        if "/" in word and first in top and (source / word).exists():
            return str(source / word)
        return word

    argv = [resolve(w) for w in words]
    program = pathlib.Path(words[0]).name
    if any(w.startswith("./") for w in words):
        return None, "the reader's own program (tests/install builds and runs such a consumer)"
    if words[0] == "tools/chorus":
        return None, "the README's set-up step itself"
    if program == "torchrun" or "PYTHONPATH" in env:
        if not python_has("torch", env) or not python_has("chorus_torch", env):
            return None, "PyTorch or the chorus_torch package is not available here"
        return None, "a PyTorch job takes minutes (the torch label's tests run the backend)"
    if "--device" in words and not (os.path.exists("/dev/nvidia0") or os.path.exists("/dev/kfd")):
        return None, "needs a GPU (tools/gpu-check.sh covers it where there is one)"
    if program == "gpt_side_by_side.py" and not (os.path.exists("/dev/nvidia0")):
        return [sys.executable, argv[0], "--help"], env  # trains on a GPU and with PyTorch 2
    if program == "compare.py":
        argv = [sys.executable, argv[0], "--help"]  # needs Open MPI, MPICH and Gloo to run
        return argv, env
    if program == "trace_png.py" and not python_has("matplotlib", env):
        return None, "matplotlib is not installed"
    # The program a launcher starts: after chorus-run's options.
    target = argv
    if program == "chorus-run" and "-h" not in words:
        i = 1
        while i < len(words) and words[i].startswith("-"):
            i += 2 if words[i] in ("-n", "--nnodes", "--node-rank") else 1
        target = argv[i:]
    name = pathlib.Path(target[0]).name if target else ""
    if name in SHRINK:
        extra = target[1:]
        SHRINK[name](extra)
        argv = argv[: len(argv) - len(target) + 1] + extra
    return argv, env


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=pathlib.Path, required=True)
    ap.add_argument("--build", type=pathlib.Path, required=True)
    ap.add_argument("--list", action="store_true", help="print the commands and what would run")
    ap.add_argument("--timeout", type=float, default=120, help="per command, seconds")
    args = ap.parse_args()
    source, build = args.source.resolve(), args.build.resolve()
    commands = readme_commands(source / "README.md")
    if not commands:
        print("readme_commands_test: README.md shows no commands", file=sys.stderr)
        return 1
    failures = 0
    with tempfile.TemporaryDirectory(prefix="chorus-readme-") as scratch:
        env = dict(os.environ, HOME=scratch, XDG_CACHE_HOME=os.path.join(scratch, ".cache"))
        for var in ("CHORUS_TUNE_FILE", "CHORUS_ALGO", "CHORUS_FR_DIR"):
            env.pop(var, None)
        for number, text in commands:
            argv, run_env = prepare(text, source, build, env)
            if argv is None:
                print(f"README.md:{number}: skip: {text}\n    ({run_env})")
                continue
            shown = " ".join(shlex.quote(a) for a in argv)
            if args.list:
                print(f"README.md:{number}: {text}\n    runs: {shown}")
                continue
            t = time.monotonic()
            try:
                done = subprocess.run(argv, cwd=scratch, env=run_env, capture_output=True,
                                      text=True, timeout=args.timeout)
                rc, out = done.returncode, done.stdout + done.stderr
            except FileNotFoundError as e:
                rc, out = 127, str(e)
            except subprocess.TimeoutExpired as e:
                rc, out = 124, f"timed out after {args.timeout} s\n{e.stdout or ''}{e.stderr or ''}"
            took = time.monotonic() - t
            if rc == 0:
                print(f"README.md:{number}: ok ({took:.1f} s): {text}")
            else:
                failures += 1
                tail = "\n".join(str(out).splitlines()[-20:])
                print(f"README.md:{number}: FAILED (exit {rc}): {text}\n    ran: {shown}\n{tail}")
    if failures:
        print(f"readme_commands_test: {failures} of the README's commands failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
