#!/usr/bin/env bash
# Builds the envtest control-plane binaries (kube-apiserver, etcd, kubectl) from source through the
# Go module proxy, because no prebuilt binary download is reachable from CI or developer machines.
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

cache=${MODELGATE_CACHE:-$HOME/.cache/modelgate}
out="$cache/envtest/$kube_version"
if [[ -x "$out/kube-apiserver" && -x "$out/etcd" && -x "$out/kubectl" ]]; then
  echo "$out"
  exit 0
fi
mkdir -p "$out"
log() { echo "envtest: $*" >&2; }

build_kube() {
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
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
  log "building kube-apiserver and kubectl $kube_version (several minutes on 2 cores)"
  (cd "$work" && GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true)
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

[[ -x "$out/etcd" ]] || build_etcd
[[ -x "$out/kube-apiserver" && -x "$out/kubectl" ]] || build_kube
echo "$out"
