#!/usr/bin/env bash
# Installs the Debian packages that chorus's build and tests need. Idempotent: when every package
# is already installed it touches nothing and returns at once.
#
#   tools/install-deps.sh            install what is missing
#   tools/install-deps.sh --check    only report what is missing (exit 1 if anything is)
#   tools/install-deps.sh --with-mpi also the peers bench/compare/compare.py measures against
#                                    (Open MPI, MPICH, Gloo) and its timing tools
set -euo pipefail

# One list; append here when a new dependency appears.
PACKAGES=(
  build-essential
  cmake
  ninja-build
  pkg-config
  git
  libgtest-dev
  libgmock-dev
  libbenchmark-dev
  libdnnl-dev
  libopenblas-dev
  python3
  procps
  iproute2
  libhwloc-dev
  hwloc
  graphviz
  python3-matplotlib
  libucx-dev
  iproute2
  hipcc
  libamdhip64-dev
  python3-torch
  libtorch-dev
  pybind11-dev
  python3-pybind11
  python3-pytest
  clang-format-14
)

die() {
  echo "install-deps: $*" >&2
  exit 1
}

missing_packages() {
  local pkg status
  for pkg in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
    [[ "$status" == "installed" ]] || echo "$pkg"
  done
}

command -v dpkg-query >/dev/null || die "dpkg-query not found: this script supports Debian and Ubuntu only"

check_only=0
for arg in "$@"; do
  case $arg in
    --check) check_only=1 ;;
    --with-mpi) PACKAGES+=(openmpi-bin libopenmpi-dev mpich libmpich-dev libgloo-dev hyperfine ucx-utils) ;;
    *) die "unknown argument '$arg' (use --check and/or --with-mpi)" ;;
  esac
done

mapfile -t missing < <(missing_packages)
if ((${#missing[@]} == 0)); then
  exit 0
fi
if ((check_only)); then
  echo "install-deps: missing: ${missing[*]}" >&2
  exit 1
fi

if ((EUID == 0)); then
  as_root=()
elif command -v sudo >/dev/null; then
  as_root=(sudo)
else
  die "need root to install ${missing[*]} (run as root, or install sudo)"
fi

echo "install-deps: installing ${missing[*]}" >&2
# A held dpkg lock (another apt run, unattended-upgrades) is waited for instead of failing.
apt_get=("${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600)
"${apt_get[@]}" update -q || die "apt-get update failed"
"${apt_get[@]}" install -y -q --no-install-recommends "${missing[@]}" ||
  die "apt-get install failed for: ${missing[*]}"
