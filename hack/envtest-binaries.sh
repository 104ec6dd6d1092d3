#!/usr/bin/env bash
# Builds the envtest control-plane binaries (kube-apiserver, etcd, kubectl) from source through the
# Go module proxy, because no prebuilt binary download is reachable from CI or developer machines.
#
# With the argument `cluster` it builds, in addition, what a real one-node cluster runs (docs/cluster.md):
# kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy and kubectl, stamped with their
# version (a node must report v1.Y.Z, not v0.0.0-master), plus etcd, into ${MODELGATE_CACHE}/cluster/<version>,
# and prints that directory. The compiled packages are shared with the envtest build through Go's build cache.
#
# The Kubernetes version follows k8s.io/api in go.mod (v0.Y.Z -> v1.Y.Z). The binaries are cached
# outside the repository, in ${MODELGATE_CACHE:-~/.cache/modelgate}/envtest/<version>, and the script
# prints that directory, ready for KUBEBUILDER_ASSETS.
#
#   export KUBEBUILDER_ASSETS=$(hack/envtest-binaries.sh)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
api_version=$(cd "$root" && go list -m -f '{{.Version}}' k8s.io/api)
kube_version="v1${api_version#v0}"
# etcd follows the version that kube-apiserver itself is built against.
kube_mod=$(go mod download -json "k8s.io/kubernetes@${kube_version}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
etcd_version=${ETCD_VERSION:-$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2; exit}' "$kube_mod")}

mode=${1:-envtest}
cache=${MODELGATE_CACHE:-$HOME/.cache/modelgate}
out="$cache/envtest/$kube_version"
cluster_out="$cache/cluster/$kube_version"
cluster_bins=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
log() { echo "envtest: $*" >&2; }

have_all() {
  local dir=$1
  shift
  for b in "$@"; do [[ -x "$dir/$b" ]] || return 1; done
}

if [[ $mode == envtest ]] && have_all "$out" kube-apiserver etcd kubectl; then
  echo "$out"
  exit 0
fi
if [[ $mode == cluster ]] && have_all "$cluster_out" "${cluster_bins[@]}" etcd; then
  echo "$cluster_out"
  exit 0
fi
[[ $mode == envtest || $mode == cluster ]] || { echo "usage: $0 [cluster]" >&2; exit 2; }
mkdir -p "$out"

# kube_module writes the wrapper module that builds k8s.io/kubernetes commands from the module proxy.
kube_module() {
  local work="$cache/build/kube-$kube_version"
  mkdir -p "$work"
  {
    echo "module modelgate.local/envtest-kube"
    echo
    echo "go 1.26"
    echo
    echo "require k8s.io/kubernetes $kube_version"
    echo
    # k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with local paths,
    # which a dependent module cannot see; point each at its published release instead.
    grep -E '^\s+k8s.io/[a-z0-9-]+ v0.0.0$' "$kube_mod" | awk -v v="$api_version" '{print "replace " $1 " => " $1 " " v}'
  } >"$work/go.mod"
  cat >"$work/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
  (cd "$work" && GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true)
  echo "$work"
}

build_kube() {
  local work
  work=$(kube_module)
  log "building kube-apiserver and kubectl $kube_version (several minutes on 2 cores)"
  (cd "$work" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags=-s -o "$out/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver)
  (cd "$work" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags=-s -o "$out/kubectl" k8s.io/kubernetes/cmd/kubectl)
}

build_etcd() {
  local work="$cache/build/etcd-$etcd_version"
  mkdir -p "$work"
  cat >"$work/go.mod" <<MOD
module modelgate.local/envtest-etcd

go 1.26

require go.etcd.io/etcd/server/v3 $etcd_version
MOD
  cat >"$work/main.go" <<'GO'
// Command etcd is the etcd server, built for envtest.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  log "building etcd $etcd_version"
  (cd "$work" && GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1)
  (cd "$work" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags=-s -o "$out/etcd" .)
}

# build_cluster links every component with the version stamp that kubectl, the node status and version-skew
# checks read. -mod=mod because the wrapper module's go.sum is written by tidy on first use.
build_cluster() {
  local work minor=${kube_version#v1.}
  minor=${minor%%.*}
  work=$(kube_module)
  mkdir -p "$cluster_out"
  local pkg=k8s.io/component-base/version
  local ldflags="-s -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  for b in "${cluster_bins[@]}"; do
    [[ -x "$cluster_out/$b" ]] && continue
    log "building $b $kube_version for the cluster"
    (cd "$work" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags="$ldflags" -o "$cluster_out/$b.tmp" "k8s.io/kubernetes/cmd/$b")
    mv "$cluster_out/$b.tmp" "$cluster_out/$b"
  done
  cp "$out/etcd" "$cluster_out/etcd"
}

[[ -x "$out/etcd" ]] || build_etcd
if [[ $mode == cluster ]]; then
  build_cluster
  echo "$cluster_out"
  exit 0
fi
have_all "$out" kube-apiserver kubectl || build_kube
echo "$out"
