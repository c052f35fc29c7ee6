#!/usr/bin/env bash
# Makes (up K) or removes (down) K network namespaces chxb-h0..h<K-1> posing as hosts, as the
# test fixture does (netns_hosts.h): one veth device `cveth` per host, 10.213.0.<i+1>/24, the
# other ends on a bridge in namespace chxb-s. For benchmarks and manual runs (docs/MULTIHOST.md).
#   tests/comm_ucx/netns_hosts.sh up 2
#   ip netns exec chxb-h0 ...      # a process on "host 0"
#   tests/comm_ucx/netns_hosts.sh down
set -euo pipefail
prefix=${CHX_PREFIX:-chxb}
case ${1:-} in
  up)
    k=${2:-2}
    ip netns add "$prefix-s"
    ip -n "$prefix-s" link add br0 type bridge
    ip -n "$prefix-s" link set br0 up
    for ((i = 0; i < k; i++)); do
      ns=$prefix-h$i
      ip netns add "$ns"
      ip -n "$ns" link set lo up
      ip -n "$ns" link add cveth type veth peer name "p$i" netns "$prefix-s"
      ip -n "$ns" addr add "10.213.0.$((i + 1))/24" dev cveth
      ip -n "$ns" link set cveth up
      ip -n "$prefix-s" link set "p$i" master br0
      ip -n "$prefix-s" link set "p$i" up
    done
    ;;
  down)
    for ns in $(ip netns list | awk '{print $1}' | grep "^$prefix-" || true); do ip netns del "$ns"; done
    ;;
  *)
    echo "usage: $0 up K | down" >&2
    exit 2
    ;;
esac
