#!/usr/bin/env bash
# A real one-node Kubernetes cluster with modelgate installed by its Helm chart (docs/cluster.md).
#
#   hack/cluster.sh [up]          build what is missing, bring the cluster up, install the chart, wait for Ctrl-C
#   hack/cluster.sh exec -- CMD   run CMD inside the cluster's network namespace, with .dev/cluster.env sourced
#   hack/cluster.sh down          remove a cluster that a killed run left behind
#
# Needs root (a network namespace, mounts, cgroups) and Debian's containerd, runc, containernetworking-plugins and
# iptables. The Kubernetes binaries are built from source once and cached in ~/.cache/modelgate/cluster/<version>.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
netns=modelgate-cluster
cmd=${1:-up}
[[ $# -gt 0 ]] && shift

case $cmd in
up)
  bin_dir=$("$root/hack/envtest-binaries.sh" cluster)
  make -C "$root" --no-print-directory helm >/dev/null
  go build -C "$root" -o "$root/bin/cluster" ./test/cluster/cmd/cluster
  cd "$root"
  exec "$root/bin/cluster" -bin-dir "$bin_dir" -helm "$root/bin/helm" "$@"
  ;;
exec)
  [[ ${1:-} == -- ]] && shift
  [[ $# -gt 0 ]] || { echo "usage: hack/cluster.sh exec -- CMD [ARGS...]" >&2; exit 2; }
  [[ -e /var/run/netns/$netns ]] || { echo "no cluster is running: start one with make cluster" >&2; exit 1; }
  # nsenter --net changes only the network namespace (ip netns exec would also remount /sys).
  exec nsenter --net="/var/run/netns/$netns" -- bash -c 'set -a; . "$0"; set +a; exec "$@"' "$root/.dev/cluster.env" "$@"
  ;;
down)
  go build -C "$root" -o "$root/bin/cluster" ./test/cluster/cmd/cluster
  exec "$root/bin/cluster" -cleanup
  ;;
*)
  echo "usage: hack/cluster.sh [up|exec -- CMD|down]" >&2
  exit 2
  ;;
esac
