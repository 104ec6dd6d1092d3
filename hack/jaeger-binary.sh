#!/usr/bin/env bash
# Builds Jaeger (v2: an OpenTelemetry Collector distribution with an OTLP receiver, memory storage and the query
# API; built from Go sources alone it serves no UI pages, which hack/jaeger-ui.sh builds) from source through the Go module proxy, as hack/envtest-binaries.sh builds
# kube-apiserver, and caches it outside the repository, in ${MODELGATE_CACHE:-~/.cache/modelgate}/jaeger/<version>.
# Prints the binary's path. The tracing tests (gatewayd, gatewayd/async, controllers; through test/jaegertest) and
# `make run TRACING=1` run it on loopback ports.
#
#   JAEGER=$(hack/jaeger-binary.sh)
set -euo pipefail

version=${JAEGER_VERSION:-v1.76.0}
cache=${MODELGATE_CACHE:-$HOME/.cache/modelgate}
out="$cache/jaeger/$version"
if [[ -x "$out/jaeger" ]]; then
  echo "$out/jaeger"
  exit 0
fi
echo "jaeger: building github.com/jaegertracing/jaeger/cmd/jaeger@$version into $out (several minutes the first time)" >&2
mkdir -p "$out"

# Jaeger's go.mod has a replace directive, which `go install pkg@version` refuses; a wrapper module that requires
# Jaeger and repeats its replaces builds the same dependency versions (Jaeger's go.mod lists them all).
jaeger_mod=$(go mod download -json "github.com/jaegertracing/jaeger@$version" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
work="$cache/build/jaeger-$version"
mkdir -p "$work"
{
  echo "module modelgate.local/jaeger-build"
  echo
  echo "go 1.26"
  echo
  echo "require github.com/jaegertracing/jaeger $version"
  echo
  grep -E '^replace ' "$jaeger_mod" || true
} >"$work/go.mod"
cat >"$work/tools.go" <<'GO'
//go:build tools

package tools

import _ "github.com/jaegertracing/jaeger/cmd/jaeger"
GO
(cd "$work" && GOFLAGS=-mod=mod go mod tidy -e >&2 && GOFLAGS=-mod=mod go build -o "$out/jaeger.tmp" github.com/jaegertracing/jaeger/cmd/jaeger >&2)
# Renamed only once it links, so a build stopped halfway leaves nothing the cache check would trust.
mv "$out/jaeger.tmp" "$out/jaeger"
echo "$out/jaeger"
