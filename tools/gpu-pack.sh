#!/usr/bin/env bash
# tools/gpu-pack.sh BUILD_DIR DIR — packs the programs of the GPU check (tools/gpu-check.sh
# --targets, already built in BUILD_DIR) so that they run on a machine with a GPU driver and
# nothing else of chorus's dependencies. `tools/chorus gpu-pack DIR` builds and calls this.
#
# Writes DIR/chorus-gpu-check.tar.gz, which unpacks into chorus-gpu-check/:
#   bin/       the programs, stripped
#   lib/       the shared libraries they load that are not the C and C++ runtime (which the
#              machine has, newer): hwloc, UCX, libnuma, libudev, ... as ldd names them;
#   lib/ucx/   UCX's transport modules whose own libraries could be packed (UCX_MODULE_DIR)
#   bench/     the training benchmark's scripts (bench/gpu/*.py: chorus-train against PyTorch)
#   gpu-check.sh, run.sh (the runner), MANIFEST (commit, build, what was packed)
# and DIR/run-gpu-check.sh, which unpacks the archive beside itself into a temporary folder and
# runs the check from it:
#   DIR/run-gpu-check.sh OUT_DIR [--budget SECONDS]  ->  OUT_DIR/table.txt, OUT_DIR/logs.tar.gz
set -euo pipefail

if (($# != 2)); then
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "$1" && pwd)
mkdir -p "$2"
OUT=$(cd "$2" && pwd)
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
PACK=$STAGE/chorus-gpu-check
mkdir -p "$PACK/bin" "$PACK/lib/ucx"

read -r -a targets <<<"$("$ROOT/tools/gpu-check.sh" --targets)"
for t in "${targets[@]}"; do
  [[ -x $BUILD/bin/$t ]] || { echo "gpu-pack: $BUILD/bin/$t was not built" >&2; exit 1; }
  cp "$BUILD/bin/$t" "$PACK/bin/"
  strip --strip-unneeded "$PACK/bin/$t"
done

# The C and C++ runtime stays out: the machine's own is as new or newer, and two copies of libc
# in one process cannot work.
runtime='/(ld-linux[^/]*|libc|libm|libpthread|libdl|librt|libresolv|libutil|libstdc\+\+|libgcc_s)\.so'
# libs_of FILE...: the absolute paths of the shared libraries FILEs load, runtime excluded;
# fails when one cannot be found.
libs_of() {
  local out
  out=$(ldd "$@" 2>&1) || true
  if grep -q 'not found' <<<"$out"; then
    return 1
  fi
  awk '/=> \// { print $3 }' <<<"$out" | grep -Ev "$runtime" | sort -u
}
pack_libs() {
  local lib
  for lib in "$@"; do
    [[ -e $PACK/lib/$(basename "$lib") ]] || cp -L "$lib" "$PACK/lib/"
  done
}
if ! found=$(libs_of "$PACK"/bin/*); then
  echo "gpu-pack: a program needs a library this machine lacks:" >&2
  ldd "$PACK"/bin/* | grep 'not found' >&2
  exit 1
fi
mapfile -t libs <<<"$found"
pack_libs "${libs[@]}"

# UCX loads its transports as modules from <libucs's folder>/ucx: pack those whose libraries
# could be packed too.
modules=0 left_out=()
ucs=$(printf '%s\n' "${libs[@]}" | grep '/libucs\.so' || true)
if [[ -n $ucs && -d $(dirname "$ucs")/ucx ]]; then
  for m in "$(dirname "$ucs")"/ucx/*.so*; do
    if mlibs=$(libs_of "$m"); then
      cp -L "$m" "$PACK/lib/ucx/"
      mapfile -t mlist <<<"$mlibs"
      [[ -z ${mlist[0]:-} ]] || pack_libs "${mlist[@]}"
      modules=$((modules + 1))
    else
      left_out+=("$(basename "$m")")
    fi
  done
fi

cp "$ROOT/tools/gpu-check.sh" "$PACK/"
mkdir -p "$PACK/bench"
cp "$ROOT/bench/gpu/gpt_side_by_side.py" "$ROOT/bench/gpu/torch_gpt.py" "$PACK/bench/"
cat >"$PACK/run.sh" <<'RUN'
#!/usr/bin/env bash
# run.sh LOG_DIR [--budget SECONDS]: the GPU check on the programs beside this script.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log=${1:?usage: run.sh LOG_DIR [--budget SECONDS]}
shift
exec "$here/gpu-check.sh" --prebuilt "$here" "$@" "$log"
RUN
chmod +x "$PACK/run.sh"
{
  echo "commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(
    git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "packed $(date -u '+%Y-%m-%d %H:%M UTC') on $(. /etc/os-release && echo "$PRETTY_NAME")"
  grep -E '^(CMAKE_BUILD_TYPE|CMAKE_CUDA_ARCHITECTURES|CMAKE_CUDA_COMPILER):' \
    "$BUILD/CMakeCache.txt" | sed 's/^/build /'
  echo "programs ${targets[*]}"
  echo "libraries $(cd "$PACK/lib" && ls -p | grep -v / | tr '\n' ' ')"
  echo "ucx modules $modules packed${left_out[*]:+; left out (libraries missing here): ${left_out[*]}}"
} >"$PACK/MANIFEST"

tar -czf "$OUT/chorus-gpu-check.tar.gz" -C "$STAGE" chorus-gpu-check
cat >"$OUT/run-gpu-check.sh" <<'RUN'
#!/usr/bin/env bash
# run-gpu-check.sh OUT_DIR [--budget SECONDS]: unpacks chorus-gpu-check.tar.gz (beside this script)
# into a temporary folder, runs the GPU check from there and leaves OUT_DIR/table.txt and
# OUT_DIR/logs.tar.gz. Exit status: the check's.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:?usage: run-gpu-check.sh OUT_DIR [--budget SECONDS]}
shift
mkdir -p "$out" || exit 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xzf "$here/chorus-gpu-check.tar.gz" -C "$work" || exit 2
"$work/chorus-gpu-check/run.sh" "$work/logs" "$@"
rc=$?
cp "$work/logs/table.txt" "$work/logs/logs.tar.gz" "$out/" 2>/dev/null
exit $rc
RUN
chmod +x "$OUT/run-gpu-check.sh"
echo "gpu-pack: $OUT/chorus-gpu-check.tar.gz ($(du -h "$OUT/chorus-gpu-check.tar.gz" | cut -f1)," \
  "${#targets[@]} programs, ${#libs[@]} libraries, $modules UCX modules); run it with" \
  "$OUT/run-gpu-check.sh OUT_DIR"
