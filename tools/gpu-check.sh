#!/usr/bin/env bash
# tools/gpu-check.sh LOG_DIR — the GPU check, for a machine with an NVIDIA GPU (docs/GPU.md).
#
# Builds chorus (Release, CUDA on) in build-gpu-check/, then:
#   0. chorus-topo on this machine: its GPUs, matched to the runtime's ordinals by PCI bus id,
#      must agree with nvidia-smi;
#   1. the GPU kernel and runtime tests (kernels_gpu_test) as 1, 2 and 4 concurrent ranks, each
#      rank on device CHORUS_LOCAL_RANK % device count (its IPC tests start 2- and 4-process worlds);
#   2. the Communicator on device buffers and streams (comm_gpu_test: 1-, 2- and 4-rank worlds,
#      on the IPC path and on pinned-host staging); the tensor engine on the device against the
#      CPU engine, every op forward and backward with poisoned allocations (tensor_gpu_test);
#   3. chorus-gpu-bandwidth: device-to-device copy bandwidth (copy engine and chorus kernels), the
#      reference limit for collectives on one host;
#   4. chorus-bench --device all_reduce, reduce_scatter, all_gather and broadcast, 8 B to 1 GiB,
#      on 2 and 4 ranks over IPC; all_reduce and all_gather over staging.
# Prints one short table at the end (also LOG_DIR/table.txt); every step's output is in LOG_DIR.
# Needs no network: cmake, ninja, a C++ compiler, the CUDA toolkit, GoogleTest and hwloc must be
# installed (the first check names whatever is missing). Sized to finish in under 8 minutes on a
# 16-core host; exit status 0 when nothing failed.
#
# Environment: CHORUS_GPU_CHECK_BUILD_DIR (default <repo>/build-gpu-check), CUDACXX (nvcc to use),
# CHORUS_GPU_STEP_TIMEOUT (seconds per test/bench run, default 150).
set -uo pipefail

if (($# != 1)) || [[ $1 == -h || $1 == --help ]]; then
  sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOG_DIR=$(mkdir -p "$1" && cd "$1" && pwd) || { echo "gpu-check: cannot create $1" >&2; exit 2; }
BUILD_DIR=${CHORUS_GPU_CHECK_BUILD_DIR:-$ROOT/build-gpu-check}
STEP_TIMEOUT=${CHORUS_GPU_STEP_TIMEOUT:-150}
JOBS=$(nproc)
BIN=$BUILD_DIR/bin
TABLE=$LOG_DIR/table.txt
START=$SECONDS
failures=0
: >"$TABLE"

say() { printf '==> [%4ds] %s\n' $((SECONDS - START)) "$*"; }
row() { printf '%-30s %-9s %s\n' "$1" "$2" "$3" >>"$TABLE"; }
fail_row() {
  row "$1" FAIL "$2"
  failures=$((failures + 1))
}

# ---- 0. what is installed ------------------------------------------------------------------------
say "checking tools (log: $LOG_DIR/preflight.log)"
missing=()
command -v cmake >/dev/null || missing+=("cmake")
command -v ninja >/dev/null || missing+=("ninja-build (ninja)")
command -v c++ >/dev/null || command -v g++ >/dev/null || missing+=("a C++ compiler (g++)")
NVCC=${CUDACXX:-$(command -v nvcc || true)}
[[ -n $NVCC ]] || NVCC=/usr/local/cuda/bin/nvcc
[[ -x $NVCC ]] || missing+=("the CUDA toolkit (nvcc; set CUDACXX=/path/to/nvcc)")
gtest_found=0
for d in /usr/lib/*/cmake/GTest /usr/lib/cmake/GTest /usr/local/lib/cmake/GTest /usr/local/lib64/cmake/GTest; do
  [[ -e $d/GTestConfig.cmake ]] && gtest_found=1
done
((gtest_found)) || missing+=("GoogleTest (libgtest-dev)")
if ! command -v pkg-config >/dev/null; then
  missing+=("pkg-config")
elif ! pkg-config --exists hwloc; then
  missing+=("hwloc (libhwloc-dev; topo/ needs it)")
fi
bench_on=ON
benchmark_found=0
for d in /usr/lib/*/cmake/benchmark /usr/lib/cmake/benchmark /usr/local/lib/cmake/benchmark; do
  [[ -e $d/benchmarkConfig.cmake ]] && benchmark_found=1
done
{
  echo "cmake: $(command -v cmake) $(cmake --version 2>/dev/null | head -1)"
  echo "ninja: $(command -v ninja)"
  echo "nvcc: $NVCC $("$NVCC" --version 2>/dev/null | tail -1)"
  echo "GoogleTest found: $gtest_found; Google Benchmark found: $benchmark_found"
  nvidia-smi 2>&1 || echo "nvidia-smi: not available"
} >"$LOG_DIR/preflight.log" 2>&1
if ((${#missing[@]})); then
  echo "gpu-check: missing: ${missing[*]}" >&2
  echo "gpu-check: install them (tools/install-deps.sh lists the Debian packages) and rerun" >&2
  exit 1
fi
if ((!benchmark_found)); then
  # bench/ is one switch: without Google Benchmark neither chorus-bench nor the probe builds.
  bench_on=OFF
  say "Google Benchmark (libbenchmark-dev) missing: bench/ is off, bandwidth and collective steps will be skipped"
fi
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
row "machine" "" "${gpu_name:-no nvidia-smi}; $(nproc) cores; nvcc $("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"

# ---- 1. build ------------------------------------------------------------------------------------
say "configuring $BUILD_DIR (Release, CUDA on; log: $LOG_DIR/configure.log)"
if ! cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCHORUS_WITH_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DCHORUS_BUILD_BENCH=$bench_on >"$LOG_DIR/configure.log" 2>&1; then
  tail -n 30 "$LOG_DIR/configure.log" >&2
  echo "gpu-check: configure failed (full log: $LOG_DIR/configure.log)" >&2
  exit 1
fi
say "building the GPU tests and probe with $JOBS jobs (log: $LOG_DIR/build-gpu.log)"
t=$SECONDS
gpu_targets=(kernels_gpu_test gpu_ipc_peer comm_gpu_test tensor_gpu_test)
[[ $bench_on == ON ]] && gpu_targets+=(chorus-gpu-bandwidth)
if ! cmake --build "$BUILD_DIR" --parallel "$JOBS" --target "${gpu_targets[@]}" >"$LOG_DIR/build-gpu.log" 2>&1; then
  tail -n 40 "$LOG_DIR/build-gpu.log" >&2
  echo "gpu-check: build failed (full log: $LOG_DIR/build-gpu.log)" >&2
  exit 1
fi
row "build GPU targets" ok "$((SECONDS - t)) s"
have_bench=0
if [[ $bench_on == ON ]]; then
  say "building chorus-bench and chorus-run (log: $LOG_DIR/build-bench.log)"
  t=$SECONDS
  if cmake --build "$BUILD_DIR" --parallel "$JOBS" --target chorus-bench chorus-run \
    >"$LOG_DIR/build-bench.log" 2>&1; then
    have_bench=1
    row "build chorus-bench" ok "$((SECONDS - t)) s"
  else
    fail_row "build chorus-bench" "see build-bench.log"
  fi
fi
if readelf -d "$BIN/kernels_gpu_test" | grep -q 'NEEDED.*libcuda\.so'; then
  fail_row "no libcuda link" "kernels_gpu_test links the driver directly"
else
  row "no libcuda link" ok "cudart static; the driver is loaded at run time"
fi

# ---- 1b. topology: the GPUs as chorus-topo matches them to the runtime -----------------------------
# chorus-topo numbers GPUs by the CUDA runtime's ordinals, matched by PCI bus id; nvidia-smi must
# agree (under CUDA_DEVICE_ORDER=PCI_BUS_ID, which nvidia-smi always uses).
say "chorus-topo on this machine (log: $LOG_DIR/topo.log)"
if cmake --build "$BUILD_DIR" --parallel "$JOBS" --target chorus-topo >"$LOG_DIR/build-topo.log" 2>&1 &&
  CUDA_DEVICE_ORDER=PCI_BUS_ID "$BIN/chorus-topo" >"$LOG_DIR/topo.log" 2>&1 &&
  CUDA_DEVICE_ORDER=PCI_BUS_ID "$BIN/chorus-topo" --json >"$LOG_DIR/topo.json" 2>>"$LOG_DIR/topo.log"; then
  if command -v python3 >/dev/null && command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader >"$LOG_DIR/nvidia-smi-bus-ids.txt" 2>&1
    if detail=$(python3 - "$LOG_DIR/topo.json" "$LOG_DIR/nvidia-smi-bus-ids.txt" <<'PY'
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
  else
    row "topology GPUs" skipped "needs python3 and nvidia-smi to compare"
  fi
else
  fail_row "topology" "chorus-topo failed (see topo.log, build-topo.log)"
fi

# ---- 2. GPU tests on 1, 2 and 4 ranks ------------------------------------------------------------
# summarize LOG: "N passed, M skipped, K failed" from a gtest log.
summarize() {
  local passed skipped failed
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$1" | tail -1)
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$1" | tail -1)
  failed=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$1" | tail -1)
  echo "${passed:-0} passed, ${skipped:-0} skipped, ${failed:-0} failed"
}
for ranks in 1 2 4; do
  say "kernels_gpu_test as $ranks rank(s) (logs: $LOG_DIR/tests-np$ranks-rank*.log)"
  t=$SECONDS
  pids=()
  for ((r = 0; r < ranks; ++r)); do
    CHORUS_LOCAL_RANK=$r CHORUS_LOCAL_WORLD_SIZE=$ranks timeout "$STEP_TIMEOUT" \
      "$BIN/kernels_gpu_test" >"$LOG_DIR/tests-np$ranks-rank$r.log" 2>&1 &
    pids+=($!)
  done
  status=ok
  for pid in "${pids[@]}"; do wait "$pid" || status=FAIL; done
  detail="rank 0: $(summarize "$LOG_DIR/tests-np$ranks-rank0.log") ($((SECONDS - t)) s)"
  if [[ $status == ok ]] && grep -q 'no GPU:' "$LOG_DIR/tests-np$ranks-rank0.log"; then
    detail+="; $(grep -m1 -o 'no GPU:.*' "$LOG_DIR/tests-np$ranks-rank0.log")"
  fi
  if [[ $status == ok ]]; then row "GPU tests np$ranks" ok "$detail"; else fail_row "GPU tests np$ranks" "$detail"; fi
done

# ---- 2b. the Communicator on device buffers ---------------------------------------------------------
# comm_gpu_test forks its own ranks (1, 2 and 4 per world, sharing the GPUs); its collective and
# stream-order tests run once per path (CHORUS_GPU_PATH=ipc and staging).
say "comm_gpu_test (log: $LOG_DIR/comm-gpu-tests.log)"
t=$SECONDS
if timeout $((3 * STEP_TIMEOUT)) "$BIN/comm_gpu_test" >"$LOG_DIR/comm-gpu-tests.log" 2>&1; then
  row "comm GPU tests" ok "$(summarize "$LOG_DIR/comm-gpu-tests.log") ($((SECONDS - t)) s)"
else
  fail_row "comm GPU tests" "$(summarize "$LOG_DIR/comm-gpu-tests.log") ($((SECONDS - t)) s; see comm-gpu-tests.log)"
fi

# ---- 2c. the tensor engine on the device --------------------------------------------------------
say "tensor_gpu_test (log: $LOG_DIR/tensor-gpu-tests.log)"
t=$SECONDS
if timeout "$STEP_TIMEOUT" "$BIN/tensor_gpu_test" >"$LOG_DIR/tensor-gpu-tests.log" 2>&1; then
  row "tensor GPU tests" ok "$(summarize "$LOG_DIR/tensor-gpu-tests.log") ($((SECONDS - t)) s)"
else
  fail_row "tensor GPU tests" "$(summarize "$LOG_DIR/tensor-gpu-tests.log") ($((SECONDS - t)) s; see tensor-gpu-tests.log)"
fi

# ---- 3. the copy-bandwidth reference -------------------------------------------------------------
copy_gbs=""
if [[ $bench_on == ON ]]; then
  say "chorus-gpu-bandwidth, 1 GiB (log: $LOG_DIR/bandwidth.log)"
  if timeout "$STEP_TIMEOUT" "$BIN/chorus-gpu-bandwidth" --bytes 1G --iters 20 >"$LOG_DIR/bandwidth.log" 2>&1; then
    while IFS=$'\t' read -r _ name bytes ms gbs; do
      row "$name" "$gbs" "GB/s at $((bytes >> 20)) MiB ($ms ms)"
      [[ $name == copy_engine ]] && copy_gbs=$gbs
    done < <(grep '^result' "$LOG_DIR/bandwidth.log")
  else
    fail_row "bandwidth probe" "$(tail -1 "$LOG_DIR/bandwidth.log")"
  fi
else
  row "bandwidth probe" skipped "needs bench/ (Google Benchmark missing)"
fi

# ---- 4. collectives on device buffers ------------------------------------------------------------
if ((!have_bench)); then
  row "collectives" skipped "chorus-bench was not built"
else
  for path in ipc staging; do
  for ranks in 2 4; do
    # Staging is the known baseline: its all_reduce and all_gather suffice to compare, and keep
    # the step inside the budget.
    colls=(all_reduce reduce_scatter all_gather broadcast)
    [[ $path == staging ]] && colls=(all_reduce all_gather)
    for coll in "${colls[@]}"; do
      log=$LOG_DIR/bench-$coll-np$ranks-$path.log
      say "chorus-bench $coll --device on $ranks ranks, $path path (log: $log)"
      # IPC path: 8 B to 1 GiB (all_reduce doubling, through the 256 MiB target size; the others
      # in steps of 8). Staging, far slower: all_reduce 8 B to 256 MiB in steps of 32, all_gather
      # 8 B to 128 MiB.
      if [[ $path == ipc ]]; then
        sizes=(-b 8 -e 1G -f 8)
        [[ $coll == all_reduce ]] && sizes=(-b 8 -e 1G -f 2)
      else
        sizes=(-b 8 -e 128M -f 8)
        [[ $coll == all_reduce ]] && sizes=(-b 8 -e 256M -f 32)
      fi
      if CHORUS_GPU_PATH=$path timeout "$STEP_TIMEOUT" "$BIN/chorus-run" -n "$ranks" \
        "$BIN/chorus-bench" "$coll" --device "${sizes[@]}" -n 10 -w 3 -c 1 >"$log" 2>&1; then
        # Data lines: size count type redop root time algbw busbw #wrong (out of place), then in place.
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
          }' "$log")
        if [[ $detail == *"wrong 0" ]]; then
          row "$coll np$ranks $path" ok "$detail"
        else
          fail_row "$coll np$ranks $path" "$detail"
        fi
      else
        fail_row "$coll np$ranks $path" "exit status $? (see $(basename "$log"))"
      fi
    done
  done
  done
fi

# ---- the table -----------------------------------------------------------------------------------
say "done in $((SECONDS - START)) s; $failures failure(s); logs in $LOG_DIR"
echo
printf '%-30s %-9s %s\n' "step" "result" "detail"
cat "$TABLE"
((failures == 0))
