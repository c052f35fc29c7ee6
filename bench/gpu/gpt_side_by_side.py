#!/usr/bin/env python3
"""chorus-train against PyTorch training the same GPT on the same GPU, side by side.

    bench/gpu/gpt_side_by_side.py BIN_DIR [--reps 2] [--steps 20] [--peak-tflops X] ...

BIN_DIR holds chorus-train and chorus-run (a build's bin/, or the packed GPU check's). The model
is GPT-2 small's shape by default (12 layers, width 768, 12 heads, context 1024, vocab 50304) in
bf16 autocast, batch 8 sequences; the cells are:

  chorus 1 rank        chorus-train --device cuda
  PyTorch eager        torch_gpt.py (beside this script): the same model, fused AdamW, SDPA
  PyTorch compile      the same under torch.compile
  chorus dp=2, 1 GPU   chorus-run -n 2 chorus-train --dp 2 --device cuda (two ranks share it)

Launches alternate (the outer loop is the repetition); a launch's time is the median step after
the warm-up, a cell's the median over its launches. MFU = the model's FLOPs per step (chorus-
train's formula: 6 x (L (N 12 C^2 + B T^2 C) + N C V), N = B T tokens) over the time and the
GPU's dense peak for the dtype (--peak-tflops; by default 989 for H100/H200 SXM in bf16, 67 in
f32 without TF32, from NVIDIA's datasheets). Prints a Markdown table; a benchmark, not a test.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def gpu_name():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout
        return out.splitlines()[0].strip() if out.strip() else "unknown GPU"
    except (OSError, subprocess.SubprocessError):
        return "unknown GPU"


def step_flops(a):
    n = a.batch * a.context
    per_layer = n * 12 * a.width ** 2 + a.batch * a.context ** 2 * a.width
    return 6.0 * (a.layers * per_layer + n * a.width * a.vocab)


def run(cmd, timeout):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        return -1, f"timed out after {timeout} s: {e}"


def chorus(a, ranks):
    model = ["--layers", str(a.layers), "--width", str(a.width), "--heads", str(a.heads),
             "--context", str(a.context), "--vocab", str(a.vocab), "--batch", str(a.batch),
             "--dtype", a.dtype, "--steps", str(a.warmup + a.steps), "--device", "cuda"]
    train = os.path.join(a.bin_dir, "chorus-train")
    cmd = [train] + model if ranks == 1 else [os.path.join(a.bin_dir, "chorus-run"), "-n",
                                              str(ranks), train, "--dp", str(ranks)] + model
    code, out = run(cmd, a.timeout)
    if code != 0:
        return {"error": out.strip().splitlines()[-1] if out.strip() else f"exit {code}"}
    ms = [float(m.group(2)) for m in re.finditer(r"step (\d+) loss \S+ .*?step_ms ([0-9.]+)", out)
          if int(m.group(1)) >= a.warmup]
    peak = re.search(r"peak memory ([0-9.]+) MiB", out)
    return {"step_ms": statistics.median(ms) if ms else float("nan"),
            "peak_mib": float(peak.group(1)) if peak else float("nan")}


def torch_side(a, compile_):
    cmd = [sys.executable, os.path.join(HERE, "torch_gpt.py"), "--layers", str(a.layers),
           "--width", str(a.width), "--heads", str(a.heads), "--context", str(a.context),
           "--vocab", str(a.vocab), "--batch", str(a.batch), "--dtype", a.dtype,
           "--steps", str(a.steps), "--warmup", str(a.warmup)] + (["--compile"] if compile_ else [])
    code, out = run(cmd, a.timeout)
    m = re.search(r"result (.*)", out)
    if code != 0 or m is None or "error=" in m.group(1):
        return {"error": (m.group(1) if m else out.strip().splitlines()[-1:] or [f"exit {code}"])}
    kv = dict(x.split("=", 1) for x in m.group(1).split())
    return {"step_ms": float(kv["step_ms"]), "peak_mib": int(kv["peak_bytes"]) / 2 ** 20}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bin_dir")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--peak-tflops", type=float, default=0)
    ap.add_argument("--timeout", type=int, default=300, help="seconds per launch")
    ap.add_argument("--cells", default="chorus,eager,compile,chorus-dp2")
    a = ap.parse_args()
    # Without a usable GPU there is nothing to measure: say so (the GPU check reads "no GPU").
    code, out = run([os.path.join(a.bin_dir, "chorus-train"), "--device", "cuda", "--steps", "0",
                     "--layers", "1", "--width", "8", "--heads", "1", "--context", "4"], 120)
    if code != 0:
        reason = out.strip().splitlines()[-1] if out.strip() else f"exit {code}"
        if "no device" in reason:
            print(f"no GPU: {reason}")
            return 0
        print(f"chorus-train cannot start on the GPU: {reason}")
        return 1
    name = gpu_name()
    peak = a.peak_tflops or (989.0 if a.dtype == "bf16" else 67.0)
    cells = {"chorus": lambda: chorus(a, 1), "eager": lambda: torch_side(a, False),
             "compile": lambda: torch_side(a, True), "chorus-dp2": lambda: chorus(a, 2)}
    wanted = [c for c in a.cells.split(",") if c in cells]
    results = {c: [] for c in wanted}
    for rep in range(a.reps):
        for c in wanted:
            r = cells[c]()
            print(f"rep {rep} {c}: {r}", flush=True)
            results[c].append(r)
    flops = step_flops(a)
    print(f"\n{name}; GPT {a.layers} layers, width {a.width}, {a.heads} heads, context "
          f"{a.context}, vocab {a.vocab}, batch {a.batch}, {a.dtype}; median of {a.reps} "
          f"launches x {a.steps} steps; MFU against {peak:g} TFLOP/s\n")
    print("| cell | tokens/s | step ms | MFU | peak memory MiB | vs PyTorch eager |")
    print("|---|---|---|---|---|---|")
    eager = None
    rows = []
    for c in wanted:
        ok = [r for r in results[c] if "error" not in r]
        if not ok:
            rows.append((c, None, results[c][-1]["error"]))
            continue
        ms = statistics.median(r["step_ms"] for r in ok)
        mem = statistics.median(r["peak_mib"] for r in ok)
        rows.append((c, ms, mem))
        if c == "eager":
            eager = ms
    for c, ms, mem in rows:
        if ms is None:
            print(f"| {c} | failed: {mem} | | | | |")
            continue
        tokens = a.batch * a.context / (ms / 1e3)
        mfu = flops / (ms / 1e3) / (peak * 1e12)
        ratio = f"{eager / ms:.2f}x" if eager else "-"
        print(f"| {c} | {tokens:.0f} | {ms:.1f} | {100 * mfu:.1f}% | {mem:.0f} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
