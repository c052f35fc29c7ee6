#!/usr/bin/env bash
# tools/gpu-check.sh [--prebuilt DIR] [--budget SECONDS] LOG_DIR — the GPU check (docs/GPU.md).
#        tools/gpu-check.sh --targets      the CMake targets it runs, one line
#
# With --prebuilt DIR it runs the programs of an unpacked `tools/chorus gpu-pack` (DIR/bin, with
# the shared libraries of DIR/lib): no compiler, cmake or package is needed, only the GPU driver.
# Without it, it first builds them (Release, CUDA on) in build-gpu-check/, which needs cmake, ninja,
# a C++ compiler, the CUDA toolkit, GoogleTest, Google Benchmark, hwloc and UCX.
#
# Then it runs its steps in the order of what they tell, each with a time limit; a step whose
# limit no longer fits in the budget (--budget, default 420 s, counted from the first step) is
# reported as skipped, never cut off:
#   1. the GPU kernel and runtime tests at 1 rank (kernels_gpu_test)
#   2. the Communicator on device buffers over IPC (comm_gpu_test, its IPC worlds)
#   3. chorus-gpu-bandwidth: device-to-device copy bandwidth, the reference for collectives
#   4. chorus-bench --device all_reduce on 2 and 4 ranks over IPC, 8 B to 1 GiB; between them,
#      the IPC path's cost constants (chorus-tune --device --probe on 2 ranks) and chorus-bench
#      --device --explain by them: predicted beside measured
#   5. the tensor engine on the device against the CPU engine, every op forward and backward with
#      poisoned allocations (tensor_gpu_test)
#   6. the rest: chorus-topo against nvidia-smi; the kernel tests as 2 and 4 concurrent ranks;
#      reduce_scatter, all_gather and broadcast over IPC; all_reduce with registered buffers;
#      all_reduce and all_gather over pinned-host staging; the Communicator's other GPU tests.
# Without a device every step reports "no device" with the reason.
#
# LOG_DIR gets table.txt (the table printed at the end) and logs.tar.gz (every step's log; the
# logs also stay in LOG_DIR/logs). Exit status 0 when no step failed.
#
# Environment: CHORUS_GPU_CHECK_BUILD_DIR (default <repo>/build-gpu-check), CUDACXX (nvcc to use).
set -uo pipefail

# The CMake targets the steps run (what tools/chorus gpu-pack builds and packs).
TARGETS=(kernels_gpu_test gpu_ipc_peer comm_gpu_test tensor_gpu_test train_gpu_test
  chorus-gpu-bandwidth chorus-bench chorus-run chorus-topo chorus-train chorus-tune)

usage() {
  sed -n '2,/^# Environment/p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

PREBUILT=""
BUDGET=420
LOG_ARG=""
while (($#)); do
  case $1 in
    --targets)
      echo "${TARGETS[*]}"
      exit 0
      ;;
    --prebuilt)
      (($# >= 2)) || usage
      PREBUILT=$2
      shift
      ;;
    --budget)
      (($# >= 2)) && [[ $2 =~ ^[0-9]+$ ]] || {
        echo "gpu-check: --budget takes a number of seconds" >&2
        exit 2
      }
      BUDGET=$2
      shift
      ;;
    -h | --help) usage ;;
    -*)
      echo "gpu-check: unknown option $1" >&2
      usage
      ;;
    *)
      [[ -z $LOG_ARG ]] || usage
      LOG_ARG=$1
      ;;
  esac
  shift
done
[[ -n $LOG_ARG ]] || usage
LOG_DIR=$(mkdir -p "$LOG_ARG/logs" && cd "$LOG_ARG" && pwd) || {
  echo "gpu-check: cannot create $LOG_ARG" >&2
  exit 2
}
LOGS=$LOG_DIR/logs
TABLE=$LOG_DIR/table.txt
T0=$SECONDS
failures=0
devices=0
: >"$TABLE"

say() { printf '==> [%4ds] %s\n' $((SECONDS - T0)) "$*"; }
row() { printf '%-32s %-10s %s\n' "$1" "$2" "$3" >>"$TABLE"; }
fail_row() {
  row "$1" FAIL "$2"
  failures=$((failures + 1))
}

# ---- the programs: unpacked, or built here --------------------------------------------------------
if [[ -n $PREBUILT ]]; then
  PACK=$(cd "$PREBUILT" 2>/dev/null && pwd) || {
    echo "gpu-check: no folder $PREBUILT" >&2
    exit 2
  }
  BIN=$PACK/bin
  for t in "${TARGETS[@]}"; do
    [[ -x $BIN/$t ]] || {
      echo "gpu-check: $BIN/$t is missing: is $PACK an unpacked tools/chorus gpu-pack?" >&2
      exit 2
    }
  done
  export LD_LIBRARY_PATH=$PACK/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  [[ -d $PACK/lib/ucx ]] && export UCX_MODULE_DIR=$PACK/lib/ucx
  # The kernel tests start their IPC peer from here, not from the path it was built at.
  export CHORUS_GPU_IPC_PEER=$BIN/gpu_ipc_peer
  built="prebuilt $(sed -n 's/^commit //p' "$PACK/MANIFEST" 2>/dev/null)"
  BENCH_DIR=$PACK/bench
else
  ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  BUILD_DIR=${CHORUS_GPU_CHECK_BUILD_DIR:-$ROOT/build-gpu-check}
  BIN=$BUILD_DIR/bin
  BENCH_DIR=$ROOT/bench/gpu
  NVCC=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
  missing=()
  for tool in cmake ninja g++; do command -v $tool >/dev/null || missing+=("$tool"); done
  [[ -x $NVCC ]] || missing+=("the CUDA toolkit (nvcc; set CUDACXX=/path/to/nvcc)")
  if ((${#missing[@]})); then
    echo "gpu-check: missing: ${missing[*]}; build elsewhere with tools/chorus gpu-pack and" \
      "run with --prebuilt" >&2
    exit 1
  fi
  say "building ${TARGETS[*]} in $BUILD_DIR (log: $LOGS/build.log)"
  if ! {
    cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCHORUS_WITH_CUDA=ON \
      -DCMAKE_CUDA_COMPILER="$NVCC" && cmake --build "$BUILD_DIR" --target "${TARGETS[@]}"
  } >"$LOGS/build.log" 2>&1; then
    tail -n 40 "$LOGS/build.log" >&2
    echo "gpu-check: the build failed (log: $LOGS/build.log)" >&2
    exit 1
  fi
  built="built here in $((SECONDS - T0)) s"
  T0=$SECONDS
fi

# ---- the machine ----------------------------------------------------------------------------------
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "host: $(uname -srm); $(nproc) cores"
  echo "programs: $built"
  [[ -n $PREBUILT ]] && cat "$PACK/MANIFEST"
  nvidia-smi 2>&1 || echo "nvidia-smi: not available"
} >"$LOGS/machine.log" 2>&1
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null |
  head -1)
devices=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
row "machine" "" "${gpu:-no nvidia-smi}; $devices GPU(s); $(nproc) cores; $(date -u +%F)"
row "programs" "" "$built"

# ---- steps ----------------------------------------------------------------------------------------
# step NAME LIMIT LOG COMMAND...: runs COMMAND (output in LOGS/LOG) if LIMIT seconds still fit in
# the budget, else reports it skipped. Sets step_status (ok, failed, timeout, nodevice, skipped)
# and step_time.
step_status=skipped
step_time=0
step() {
  local name=$1 limit=$2 log=$LOGS/$3
  shift 3
  local left=$((BUDGET - (SECONDS - T0)))
  if ((limit > left)); then
    row "$name" skipped "needs up to $limit s; $left s of the $BUDGET s budget left"
    step_status=skipped
    return 1
  fi
  say "$name (limit $limit s; log: $log)"
  local t=$SECONDS rc=0
  timeout --kill-after=5 "$limit" "$@" >"$log" 2>&1 || rc=$?
  step_time=$((SECONDS - t))
  if ((rc == 124 || rc == 137)); then
    step_status=timeout
  elif grep -q 'no GPU' "$log" && { ((rc == 0)) || ! grep -q '^\[  FAILED  \]' "$log"; }; then
    step_status=nodevice
  elif ((rc == 0)); then
    step_status=ok
  else
    step_status=failed
  fi
  return 0
}

# report NAME DETAIL: one row for the step just run.
report() {
  case $step_status in
    ok) row "$1" ok "$2 ($step_time s)" ;;
    nodevice) row "$1" "no device" "$(grep -m1 -o 'no GPU.*' "$LOG_LAST" | cut -c1-110)" ;;
    timeout) fail_row "$1" "did not end within its limit ($step_time s; see $(basename "$LOG_LAST"))" ;;
    failed) fail_row "$1" "$2 ($step_time s; see $(basename "$LOG_LAST"))" ;;
  esac
}

# gtest_summary LOG: "N passed, M skipped, K failed".
gtest_summary() {
  local passed skipped failed
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$1" | tail -1)
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$1" | tail -1)
  failed=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$1" | tail -1)
  echo "${passed:-0} passed, ${skipped:-0} skipped, ${failed:-0} failed"
}

# gtest NAME LIMIT LOG BINARY ARGS...
gtest() {
  local name=$1 limit=$2 log=$3
  shift 3
  LOG_LAST=$LOGS/$log
  step "$name" "$limit" "$log" "$@" || return 0
  report "$name" "$(gtest_summary "$LOG_LAST")"
}

# kernel_ranks N LIMIT: kernels_gpu_test as N concurrent ranks (device local rank % count).
kernel_ranks() {
  local n=$1
  local script="pids=(); for ((r = 0; r < $n; ++r)); do
    CHORUS_LOCAL_RANK=\$r CHORUS_LOCAL_WORLD_SIZE=$n '$BIN/kernels_gpu_test' >'$LOGS/kernels-np$n-rank'\$r.log 2>&1 &
    pids+=(\$!); done; s=0; for p in \${pids[@]}; do wait \$p || s=1; done
    cat '$LOGS/kernels-np$n-rank0.log'; exit \$s"
  gtest "kernel tests np$n" "$2" "kernels-np$n.log" bash -c "$script"
}

copy_gbs=""
bandwidth() {
  LOG_LAST=$LOGS/bandwidth.log
  step "bandwidth probe" 60 bandwidth.log "$BIN/chorus-gpu-bandwidth" --bytes 1G --iters 20 ||
    return 0
  if [[ $step_status != ok ]]; then
    report "bandwidth probe" "$(tail -1 "$LOG_LAST")"
    return 0
  fi
  while IFS=$'\t' read -r _ name bytes ms gbs; do
    row "$name" "$gbs" "GB/s at $((bytes >> 20)) MiB ($ms ms)"
    [[ $name == copy_engine ]] && copy_gbs=$gbs
  done < <(grep '^result' "$LOG_LAST")
}

# collective COLL RANKS PATH [--register]: chorus-bench --device over CHORUS_GPU_PATH=PATH.
collective() {
  local coll=$1 ranks=$2 path=$3 extra=${4:-}
  local name="$coll np$ranks $path${extra:+ registered}"
  local log="bench-$coll-np$ranks-$path${extra:+-registered}.log"
  # IPC: 8 B to 1 GiB (all_reduce at every power of two); staging, far slower: to 256 MiB in
  # steps of 32 (all_reduce) and to 128 MiB in steps of 8.
  local sizes=(-b 8 -e 1G -f 8)
  [[ $coll == all_reduce ]] && sizes=(-b 8 -e 1G -f 2)
  if [[ $path == staging ]]; then
    sizes=(-b 8 -e 128M -f 8)
    [[ $coll == all_reduce ]] && sizes=(-b 8 -e 256M -f 32)
  fi
  LOG_LAST=$LOGS/$log
  step "$name" 60 "$log" env CHORUS_GPU_PATH="$path" "$BIN/chorus-run" -n "$ranks" \
    "$BIN/chorus-bench" "$coll" --device $extra "${sizes[@]}" -n 10 -w 3 -c 1 || return 0
  if [[ $step_status != ok ]]; then
    report "$name" "exit status not 0"
    return 0
  fi
  # Data lines: size count type redop root time algbw busbw #wrong (out of place), then in place.
  local detail
  detail=$(awk -v copy="$copy_gbs" '
    !/^#/ && NF >= 13 && $1 ~ /^[0-9]+$/ {
      if (!first) { first = 1; lat = $6 }
      last_size = $1; bus = $8; wrong += $9 + $13
      if ($1 == 268435456) bus256 = $8
    }
    END {
      if (!first) { print "no result lines"; exit }
      s = sprintf("8 B: %s us", lat)
      if (bus256 != "" && last_size != 268435456) {
        s = s sprintf("; 256 MiB: busbw %s GB/s", bus256)
        if (copy > 0) s = s sprintf(" (%.0f%% of copy)", 100 * bus256 / copy)
      }
      s = s sprintf("; %d MiB: busbw %s GB/s", last_size / 1048576, bus)
      if (copy > 0) s = s sprintf(" (%.0f%% of copy)", 100 * bus / copy)
      print s "; wrong " wrong
    }' "$LOG_LAST")
  if [[ $detail == *"wrong 0" ]]; then row "$name" ok "$detail"; else fail_row "$name" "$detail"; fi
}

# ipc_constants RANKS: chorus-tune --device fits the IPC path's constants on RANKS ranks (into the
# log folder, not the host's cache), then chorus-bench --device --explain chooses and predicts by
# them: all_reduce in place, the selector's prediction of its choice against the time measured.
ipc_constants() {
  local n=$1 cost=$LOGS/cost-ipc-np$1.txt
  local name="ipc constants np$n"
  LOG_LAST=$LOGS/tune-ipc-np$n.log
  step "$name" 150 "tune-ipc-np$n.log" "$BIN/chorus-run" -n "$n" "$BIN/chorus-tune" --device \
    --probe --colls all_reduce,reduce_scatter,all_gather,broadcast \
    --cost-out "$cost" || return 0
  report "$name" "$(grep -c '^ipc ' "$cost" 2>/dev/null) lines fitted (cost-ipc-np$n.txt)"
  [[ $step_status == ok ]] || return 0
  name="all_reduce np$n ipc predicted"
  LOG_LAST=$LOGS/bench-ipc-explain-np$n.log
  step "$name" 60 "bench-ipc-explain-np$n.log" env CHORUS_COST_FILE="$cost" \
    "$BIN/chorus-run" -n "$n" "$BIN/chorus-bench" all_reduce --device --explain -b 8 -e 256M \
    -f 4 -n 10 -w 3 -c 1 || return 0
  if [[ $step_status != ok ]]; then
    report "$name" "exit status not 0"
    return 0
  fi
  # Data lines: size count type redop root, out of place (time algbw busbw #wrong), in place
  # (the same), pred, algorithm.
  local detail
  detail=$(awk '!/^#/ && NF >= 15 && $1 ~ /^[0-9]+$/ && $14 > 0 && $10 > 0 {
      r = $14 / $10; e = r > 1 ? r - 1 : 1 - r; errs[n++] = e; wrong += $9 + $13
      if (e > worst) { worst = e; at = $1; pred = $14; meas = $10 } }
    END {
      if (!n) { print "no predicted lines"; exit }
      for (i = 1; i < n; ++i) for (j = i; j > 0 && errs[j - 1] > errs[j]; --j) {
        t = errs[j]; errs[j] = errs[j - 1]; errs[j - 1] = t }
      printf "%d sizes: median error %.0f%%, worst %.0f%% at %d B (%s us predicted, %s measured); wrong %d\n",
        n, 100 * errs[int(n / 2)], 100 * worst, at, pred, meas, wrong }' "$LOG_LAST")
  if [[ $detail == *"wrong 0" ]]; then row "$name" ok "$detail"; else fail_row "$name" "$detail"; fi
}

# The GPT-2 small training benchmark: chorus-train against PyTorch eager and compiled on this
# GPU, and two ranks sharing it (bench/gpu/gpt_side_by_side.py; its table goes into the log).
training_benchmark() {
  local name="GPT-2 small vs PyTorch"
  if ! command -v python3 >/dev/null; then
    row "$name" skipped "needs python3"
    return 0
  fi
  LOG_LAST=$LOGS/bench-gpt2.log
  step "$name" 240 bench-gpt2.log python3 "$BENCH_DIR/gpt_side_by_side.py" "$BIN" --reps 1 \
    --steps 10 --warmup 3 --timeout 100 || return 0
  local detail
  detail=$(awk -F'|' '/^\| (chorus|eager|compile|chorus-dp2) / {
    gsub(/ /, "", $2); gsub(/ /, "", $3); gsub(/ /, "", $5); printf "%s%s %s tok/s %s", sep, $2, $3, $5; sep = "; " }' \
    "$LOG_LAST")
  report "$name" "${detail:-no table}"
}

topology() {
  LOG_LAST=$LOGS/topo.log
  step "topology GPUs" 30 topo.log env CUDA_DEVICE_ORDER=PCI_BUS_ID "$BIN/chorus-topo" --json ||
    return 0
  if [[ $step_status != ok ]]; then
    report "topology GPUs" "chorus-topo failed"
    return 0
  fi
  if ! command -v nvidia-smi >/dev/null; then
    row "topology GPUs" "no device" "no nvidia-smi to compare chorus-topo's GPUs with"
    return 0
  fi
  if ! command -v python3 >/dev/null; then
    row "topology GPUs" skipped "needs python3 to compare"
    return 0
  fi
  nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader >"$LOGS/nvidia-smi-bus-ids.txt" 2>&1
  # chorus-topo numbers GPUs by the runtime's ordinals, matched by PCI bus id; nvidia-smi must
  # agree (under CUDA_DEVICE_ORDER=PCI_BUS_ID, which nvidia-smi always uses).
  local detail
  if detail=$(python3 - "$LOG_LAST" "$LOGS/nvidia-smi-bus-ids.txt" <<'PY'
import json, sys
topo = json.load(open(sys.argv[1]))
hosts = topo["hosts"] if "hosts" in topo else [topo.get("host", topo)]
ours = {n["os_index"]: n["pci_bus_id"].lower() for h in hosts for n in h["nodes"]
        if n["kind"] == "gpu" and "os_index" in n}
smi = {}
for line in open(sys.argv[2]):
    index, bus = [x.strip() for x in line.split(",")]
    smi[int(index)] = bus.lower()[-12:]
bad = [i for i in smi if ours.get(i) != smi[i]]
print(f"{len(ours)} GPUs, bus ids {'match' if not bad and len(ours) == len(smi) else 'differ'}: "
      + ", ".join(f"GPU{i} {ours.get(i, '-')}/{smi[i]}" for i in sorted(smi)))
sys.exit(1 if bad or len(ours) != len(smi) else 0)
PY
  ); then row "topology GPUs" ok "$detail"; else fail_row "topology GPUs" "$detail"; fi
}

# The order of value: what has never run first.
gtest "kernel tests np1" 90 kernels-np1.log env CHORUS_LOCAL_RANK=0 CHORUS_LOCAL_WORLD_SIZE=1 \
  "$BIN/kernels_gpu_test"
gtest "comm GPU tests, IPC" 150 comm-gpu-ipc.log "$BIN/comm_gpu_test" \
  '--gtest_filter=*_ipc*:*IpcPath*'
bandwidth
collective all_reduce 2 ipc
ipc_constants 2
collective all_reduce 4 ipc
gtest "tensor GPU tests" 120 tensor-gpu.log "$BIN/tensor_gpu_test"
gtest "training on the GPU" 240 train-gpu.log "$BIN/train_gpu_test"
training_benchmark
topology
kernel_ranks 2 60
kernel_ranks 4 60
for ranks in 2 4; do
  for coll in reduce_scatter all_gather broadcast; do collective $coll $ranks ipc; done
done
collective all_reduce 2 ipc --register
collective all_reduce 4 ipc --register
for ranks in 2 4; do
  for coll in all_reduce all_gather; do collective $coll $ranks staging; done
done
gtest "comm GPU tests, the rest" 240 comm-gpu-rest.log "$BIN/comm_gpu_test" \
  '--gtest_filter=-*_ipc*:*IpcPath*'

# ---- the table and the archive --------------------------------------------------------------------
tar -czf "$LOG_DIR/logs.tar.gz" -C "$LOG_DIR" logs 2>/dev/null
say "done in $((SECONDS - T0)) s of a $BUDGET s budget; $failures failure(s); logs in $LOGS"
{
  echo
  printf '%-32s %-10s %s\n' "step" "result" "detail"
  cat "$TABLE"
} | tee "$LOG_DIR/table.print"
mv "$LOG_DIR/table.print" "$TABLE"
((failures == 0))
