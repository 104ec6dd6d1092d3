#!/usr/bin/env bash
# Builds the assets of Jaeger's web UI (jaeger-ui, a separate JavaScript project: the Jaeger that
# hack/jaeger-binary.sh builds from Go sources serves its query API but no UI pages) at the release that matches
# that Jaeger, and caches them outside the repository, in ${MODELGATE_CACHE:-~/.cache/modelgate}/jaeger-ui/<version>.
# Prints the assets' directory. `make run TRACING=1` serves them on Jaeger's :16686 when they are there, and
# test/browser's Jaeger scenario opens a failed-over call's trace in them (docs/operations.md "Traces").
#
# jaeger-ui's source comes from JAEGER_UI_SRC (a git checkout of github.com/jaegertracing/jaeger-ui) or, without
# it, from a clone of GitHub; its npm packages come from the npm registry through its package-lock.json.
#
#   JAEGER_UI=$(hack/jaeger-ui.sh)
set -euo pipefail

version=${JAEGER_VERSION:-v1.76.0}
cache=${MODELGATE_CACHE:-$HOME/.cache/modelgate}
out="$cache/jaeger-ui/$version"
if [[ -f "$out/index.html" ]]; then
  echo "$out"
  exit 0
fi
echo "jaeger-ui: building jaeger-ui $version into $out (a few minutes the first time)" >&2
work="$cache/build/jaeger-ui-$version"
rm -rf "$work"
mkdir -p "$(dirname "$work")"
git clone --quiet "${JAEGER_UI_SRC:-https://github.com/jaegertracing/jaeger-ui}" "$work" >&2
git -C "$work" -c advice.detachedHead=false checkout --quiet "$version" >&2
# The release asks for Node.js 24 in package.json's engines and its .npmrc makes that strict; it builds on the
# Node.js 20 that Debian machines here have. Its install scripts only set up git hooks.
(cd "$work" && npm ci --engine-strict=false --ignore-scripts --no-audit --no-fund >&2 && npm run build >&2)
# Copied into place only once built, so a build stopped halfway leaves nothing the cache check would trust.
rm -rf "$out.tmp"
mkdir -p "$(dirname "$out")"
cp -r "$work/packages/jaeger-ui/build" "$out.tmp"
mv "$out.tmp" "$out"
rm -rf "$work"
echo "$out"
