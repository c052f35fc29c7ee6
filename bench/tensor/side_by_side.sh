#!/bin/bash
# side_by_side.sh - chorus (tensor_bench) and PyTorch (the anchor's gpt_step.py) training the same
# GPT (4 layers, width 256, 4 heads, context 128, batch 8, vocab 256), in one run.
#
#   bench/tensor/side_by_side.sh [BUILD_DIR]      (default build-tensor; run from the repo root)
#   env: REPS (3 launches per cell), STEPS (30 timed), WARMUP (5), ANCHOR (gpt_step.py's folder)
#
# Every cell is REPS separate process launches; the launches of all cells interleave (the outer
# loop is the repetition), so a burst of load from other users of the machine hits both sides
# alike. A launch reports the median step time of its STEPS steps; a cell is the median
# [min-max] over its launches. This machine is shared, so each launch runs under the anchor's
# runguard.py when it is there: it waits up to QUIET_WAIT seconds (default 60) for an idle
# machine, then flags the launch CONTENDED when other processes burnt > 5% of the 2 cores
# meanwhile. Cells use the clean launches when they have any ("clean n/N" says how many); the
# launch's cpu/wall (the cores it really got) and the load average are printed too.
#
# The output starts with the CPU (model, family, the AVX-512/AMX flags) and the library versions,
# and each chorus result names the kernels it ran: the f32 GEMM backend and, in bf16, the
# autocast GEMM's method per shape class; the table keeps them in its last column.
#
# chorus runs with no environment at all (out of the box). PyTorch runs in the anchor's settings
# (shared/anchors/torch_gpt/RESULTS.md): fp32 with OPENBLAS_CORETYPE=SkylakeX on AVX-512 CPUs
# (Debian's OpenBLAS 0.3.21 otherwise runs SSE3 kernels there; on a CPU without AVX-512 those
# kernels cannot run and its own choice stands, e.g. "Zen") and OPENBLAS_NUM_THREADS = threads, plus
# OMP_WAIT_POLICY=PASSIVE on 2 threads; bf16 autocast as installed. The steps match: forward +
# loss, backward, AdamW step; no gradient clipping; a fresh batch each step, outside the timing.
set -u
BUILD=${1:-build-tensor}
REPS=${REPS:-3}
STEPS=${STEPS:-30}
WARMUP=${WARMUP:-5}
ANCHOR=${ANCHOR:-$(cd "$(dirname "$0")/../.." && pwd)/../shared/anchors/torch_gpt}  # beside the checkout
PY=/usr/bin/python3
GUARD=()
[ -f "$ANCHOR/../runguard.py" ] && GUARD=($PY "$ANCHOR/../runguard.py" --quiet-wait "${QUIET_WAIT:-60}" --)
BENCH=$BUILD/bin/tensor_bench
[ -x "$BENCH" ] || { echo "no $BENCH: build tensor_bench first" >&2; exit 2; }
$PY -c 'import torch' 2>/dev/null || { echo "PyTorch missing: apt-get install python3-torch" >&2; exit 2; }
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT

# The machine, printed first and kept with the results: the CPU model and family, the vector
# flags that decide the kernels, and the library versions on both sides.
cpu_model=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
cpu_family=$(grep -m1 '^cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')
cpu_id=$(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')
flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
        grep -E '^(avx2|avx512f|avx512_bf16|avx512_fp16|avx512_vnni|amx_bf16|amx_tile)$' | tr '\n' ' ')
echo "# cpu: $cpu_model (family $cpu_family, model $cpu_id), $(nproc) cores; flags: $flags"
echo "# torch: $($PY -c 'import torch; print(torch.__version__, torch.backends.mkldnn.is_available() and "oneDNN" or "")' 2>/dev/null)"
echo "# oneDNN: $(ls /usr/lib/x86_64-linux-gnu/libdnnl.so.* 2>/dev/null | sed 's|.*/||' | tr '\n' ' ')"

# cell label | threads | chorus dtype | torch mode | torch environment
CORE=""
grep -qw avx512f <<< "$flags" && CORE="OPENBLAS_CORETYPE=SkylakeX "
CELLS=(
  "fp32 1 thread|1|f32|train|${CORE}OPENBLAS_NUM_THREADS=1"
  "fp32 2 threads|2|f32|train|${CORE}OPENBLAS_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE"
  "bf16 1 thread|1|bf16|bf16|"
  "bf16 2 threads|2|bf16|bf16|"
)

for rep in $(seq 1 "$REPS"); do
  for cell in "${CELLS[@]}"; do
    IFS='|' read -r label threads dtype mode torch_env <<< "$cell"
    load=$(cut -d' ' -f1 /proc/loadavg)
    raw=$("${GUARD[@]}" "$BENCH" --threads "$threads" --dtype "$dtype" --steps "$STEPS" \
          --warmup "$WARMUP")
    line=$(grep '^threads' <<< "$raw")
    clean=1; grep -q 'CONTENDED' <<< "$raw" && clean=0
    # "threads 1  gemm dnnl  step 195.1 ms [..]  5249 tokens/s  105.3 GFLOP/s  cpu/wall 0.96"
    tok=$(awk '{for (i = 1; i <= NF; ++i) if ($i == "tokens/s") print $(i - 1)}' <<< "$line")
    cw=$(awk '{print $NF}' <<< "$line")
    gemm=$(awk '{print $4}' <<< "$line")
    bf16=$(awk '$1 == "bf16" && $2 == "gemm" {print $3}' <<< "$raw")
    [ -n "$bf16" ] && gemm="$gemm; bf16 $bf16"
    echo "$label|chorus ($gemm)|$tok|$cw|$load|$clean" >> "$OUT"
    echo "rep $rep  $label  chorus  $tok tok/s  cpu/wall $cw  load $load  clean $clean  [$line]  [$gemm]"
    load=$(cut -d' ' -f1 /proc/loadavg)
    raw=$(cd "$ANCHOR" && env $torch_env "${GUARD[@]}" $PY gpt_step.py "$mode" \
          --threads "$threads" --steps "$STEPS" --warmup "$WARMUP" --fwd-steps 0 2>/dev/null)
    res=$(grep '^RESULT ' <<< "$raw")
    if [ -z "$res" ]; then
      echo "PyTorch's launch gave no result: (cd $ANCHOR && env $torch_env $PY gpt_step.py $mode" \
           "--threads $threads --steps 3) shows why" >&2
      exit 1
    fi
    clean=1; grep -q 'CONTENDED' <<< "$raw" && clean=0
    read -r tok cw < <($PY -c 'import json,sys; t=json.loads(sys.argv[1][7:])["train"]; print(round(t["tokens_per_s"]), round(t["cpu_per_wall"], 2))' "$res")
    echo "$label|PyTorch 1.13|$tok|$cw|$load|$clean" >> "$OUT"
    echo "rep $rep  $label  torch   $tok tok/s  cpu/wall $cw  load $load  clean $clean"
  done
done

echo
$PY - "$OUT" <<'EOF'
import statistics, sys
rows, kernels = {}, {}
for line in open(sys.argv[1]):
    label, who, tok, cw, load, clean = line.strip().split("|")
    if who.startswith("chorus"):
        kernels.setdefault(label, set()).add(who[len("chorus ("):-1])
    who = "chorus" if who.startswith("chorus") else "torch"
    rows.setdefault(label, {}).setdefault(who, []).append(
        (float(tok), float(cw), float(load), clean == "1"))
def pick(xs):  # the clean launches, if any
    c = [x for x in xs if x[3]]
    return (c or xs), len(c), len(xs)
med = statistics.median
print("| config | chorus tok/s | PyTorch 1.13 tok/s | chorus / PyTorch | cpu/wall chorus, torch | clean launches chorus, torch | chorus kernels |")
print("|---|---|---|---|---|---|---|")
for label, d in rows.items():
    (c, cn, ct), (t, tn, tt) = pick(d["chorus"]), pick(d["torch"])
    fmt = lambda xs: "%d [%d-%d]" % (med([x[0] for x in xs]), min(x[0] for x in xs), max(x[0] for x in xs))
    print("| %s | %s | %s | %.2f | %.2f, %.2f | %d/%d, %d/%d | %s |" % (
        label, fmt(c), fmt(t), med([x[0] for x in c]) / med([x[0] for x in t]),
        med([x[1] for x in c]), med([x[1] for x in t]), cn, ct, tn, tt,
        " / ".join(sorted(kernels.get(label, [])))))
EOF
