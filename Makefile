# modelgate: a Kubernetes-native model gateway.
#
# Newcomers need two targets: `make run` starts the whole product locally, `make test` runs every suite.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

LOCALBIN ?= $(CURDIR)/bin
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
HELM ?= $(LOCALBIN)/helm
CONTROLLER_TOOLS_VERSION ?= v0.23.0
HELM_VERSION ?= v3.22.0
GOTESTFLAGS ?=
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/modelgate/modelgate/gatewayd/version.Version=$(VERSION)

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate CRDs, RBAC and webhook configuration from markers.
	$(CONTROLLER_GEN) rbac:roleName=manager crd webhook paths="./api/...;./controllers/...;./webhooks/..." \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac output:webhook:artifacts:config=config/webhook
	@# The chart ships the same CRDs; Helm installs files under crds/ before the templates.
	cp config/crd/bases/*.yaml charts/modelgate/crds/

.PHONY: generate
generate: controller-gen ## Generate DeepCopy methods.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

.PHONY: fmt
fmt: ## Run go fmt.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: envtest
envtest: ## Build kube-apiserver, etcd and kubectl from source (cached outside the repo) and print their directory.
	@hack/envtest-binaries.sh

.PHONY: jaeger
jaeger: ## Build Jaeger (its OTLP receiver and query API, for the tracing test and `make run TRACING=1`) from source, cached outside the repo, and print its path.
	@hack/jaeger-binary.sh

.PHONY: jaeger-ui
jaeger-ui: ## Build Jaeger's web UI (jaeger-ui, cloned from GitHub or JAEGER_UI_SRC, built with npm), cached outside the repo, so `make run TRACING=1` serves it; print its path.
	@hack/jaeger-ui.sh

.PHONY: verify-generated
verify-generated: manifests generate ## Fail when generated files are out of date.
	@git diff --exit-code -- api config charts/modelgate/crds || { echo "Generated files are stale: run 'make manifests generate' and commit." >&2; exit 1; }

.PHONY: tidy-check
tidy-check: ## Fail when go.mod or go.sum is not what `go mod tidy` would write (a direct import marked indirect, a module no longer used).
	@go mod tidy -diff || { echo "go.mod is not tidy: run 'go mod tidy' and commit." >&2; exit 1; }

.PHONY: test
# helm is installed before the suites: the /v1 and gatewayd suites act as the ServiceAccount the chart renders, so
# several packages need bin/helm at once.
test: manifests generate vet tidy-check dashboard-check helm client-deps jaeger ## Run every suite: unit, golden, envtest (ginkgo), gatewayd integration (traces read back from Jaeger), Redis and client tests, the cluster suite, then a short fuzz.
	KUBEBUILDER_ASSETS="$$(hack/envtest-binaries.sh)" MODELGATE_JAEGER="$$(hack/jaeger-binary.sh)" go test $(GOTESTFLAGS) -count=1 -timeout 30m ./...
	$(MAKE) --no-print-directory test-cluster
	$(MAKE) --no-print-directory fuzz

# The cluster suite runs on its own, after the others, so that the cluster has the machine's two cores to itself.
# A plain `go test ./...` skips it (it needs the cluster's binaries, and root); this step always runs it.
.PHONY: test-cluster
test-cluster: helm ## The cluster suite: a one-node cluster built from source, the Helm chart installed on it, the README tour against it (docs/cluster.md; needs root).
	MODELGATE_CLUSTER_BIN="$$(hack/envtest-binaries.sh cluster)" MODELGATE_CLUSTER_SUITE=required MODELGATE_HELM=$(HELM) \
		go test -count=1 -timeout 30m -v -run '^TestCluster' ./test/cluster/

# FUZZTIME bounds each fuzz target: in `make test`, long enough to try new inputs on the parsers and handlers,
# short enough for CI. Run `make fuzz FUZZTIME=10m` to dig deeper.
FUZZTIME ?= 15s
FUZZ_TARGETS := FuzzDecode:./api/snapshot/ FuzzValidate:./api/v1alpha1/hierarchy/ FuzzRewriteBody:./gatewayd/provider/openai/ FuzzInferenceBody:./gatewayd/provider/openai/ FuzzHandlers:./gatewayd/rest/ FuzzParseBody:./gatewayd/async/ FuzzScan:./gatewayd/podlogs/ \
	FuzzAnthropicRequest:./gatewayd/provider/anthropic/ FuzzAnthropicAnswer:./gatewayd/provider/anthropic/ FuzzAnthropicStream:./gatewayd/provider/anthropic/ \
	FuzzMessagesRequest:./gatewayd/clientapi/messages/ FuzzMessagesStream:./gatewayd/clientapi/messages/ \
	FuzzTranslation:./gatewayd/provider/gemini/ FuzzTranslation:./gatewayd/provider/bedrock/

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME.
	@for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t%%:*} ($(FUZZTIME))"; \
		go test -run '^$$' -fuzz "^$${t%%:*}$$" -fuzztime $(FUZZTIME) -parallel 2 "$${t#*:}" || exit 1; \
	done

# BENCHTIME keeps the micro-benchmarks short enough that `make bench` fits in 10 minutes on 2 cores;
# LOADBENCH_FLAGS reach the harness (for example -quick, -skip-propagation, -strict).
BENCHTIME ?= 200ms
LOADBENCH_FLAGS ?=
# ASYNC_BENCHTIME is the async benchmarks' iterations: enough requests for a p99.
ASYNC_BENCHTIME ?= 2000x
ASYNC_BENCH = go test -run '^$$' -bench '^BenchmarkAsync' -benchtime=$(ASYNC_BENCHTIME) ./gatewayd/async/

# The peers of the load harness: Debian's nginx, and Portkey's gateway pinned in test/loadbench/portkey's lockfile.
# Installed when missing (apt-get needs root or sudo); a peer that still is not there is skipped, and its rows say so.
PORTKEY_DIR := test/loadbench/portkey

# The Node packages of the client tests, each from its lockfile: test/anthropic drives /v1/messages with
# @anthropic-ai/sdk.
.PHONY: client-deps
client-deps: ## Install the client tests' Node packages (npm ci from their lockfiles).
	npm ci --prefix test/anthropic --no-audit --no-fund

.PHONY: bench-peers
bench-peers: ## Install the harness's peers when missing: nginx (apt) and @portkey-ai/gateway (npm ci from the lockfile).
	@command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || { \
		if [ "$$(id -u)" -eq 0 ]; then apt-get update -qq && apt-get install -y -qq --no-install-recommends nginx </dev/null; \
		else sudo -n apt-get update -qq && sudo -n apt-get install -y -qq --no-install-recommends nginx </dev/null; fi \
		|| echo "bench-peers: could not install nginx; its rows will say not installed"; }
	@[ -f $(PORTKEY_DIR)/node_modules/@portkey-ai/gateway/build/start-server.js ] || \
		{ command -v npm >/dev/null && npm ci --prefix $(PORTKEY_DIR) --no-audit --no-fund; } || \
		echo "bench-peers: could not install Portkey; its rows will say not installed"

.PHONY: bench
bench: bench-peers jaeger ## Run the Go micro-benchmarks, the async benchmarks (which write their table), then the side-by-side load harness; rewrites docs/benchmarks.md.
	@# Only the packages that define benchmarks, so nothing else is compiled for nothing.
	KUBEBUILDER_ASSETS="$$(hack/envtest-binaries.sh)" go test -run '^$$' -skip '^BenchmarkAsync' -bench . -benchmem -benchtime=$(BENCHTIME) \
		$$(grep -rl --include='*_test.go' --exclude-dir=node_modules '^func Benchmark' . | xargs -n1 dirname | sort -u)
	@# The async benchmarks run on their own for a fixed count; their table in docs/benchmarks.md is written from that run.
	$(MAKE) bench-async
	KUBEBUILDER_ASSETS="$$(hack/envtest-binaries.sh)" $(LOCALBIN)/loadbench -docs docs/benchmarks.md -floor $(LOADBENCH_FLAGS)

.PHONY: bench-async
bench-async: ## Only the async benchmarks (a minute or two), and their table in docs/benchmarks.md, as make bench writes it.
	@mkdir -p $(LOCALBIN)
	KUBEBUILDER_ASSETS="$$(hack/envtest-binaries.sh)" $(ASYNC_BENCH) > $(LOCALBIN)/async-bench.txt || { cat $(LOCALBIN)/async-bench.txt; exit 1; }
	@cat $(LOCALBIN)/async-bench.txt
	go build -o $(LOCALBIN)/loadbench ./test/loadbench/cmd/loadbench
	$(LOCALBIN)/loadbench -docs docs/benchmarks.md -async-results $(LOCALBIN)/async-bench.txt -async-command "make bench-async   # also a step of make bench: $(ASYNC_BENCH)"

# SERIES_SIZES are the group counts of the scale series (10 keys per group).
SERIES_SIZES ?= 10000,30000,100000

.PHONY: bench-scale
bench-scale: ## The scale series: 10k, 30k and 100k groups, both snapshot layouts; rewrites its section of docs/benchmarks.md and docs/scale-series.png (tens of minutes).
	go build -o $(LOCALBIN)/loadbench ./test/loadbench/cmd/loadbench
	KUBEBUILDER_ASSETS="$$(hack/envtest-binaries.sh)" $(LOCALBIN)/loadbench -scale-series -series-sizes $(SERIES_SIZES) \
		-docs docs/benchmarks.md -series-plot docs/scale-series.png $(LOADBENCH_FLAGS)

.PHONY: bench-syscalls
bench-syscalls: bench-peers ## System calls per request of nginx and of gatewayd in its own process (perf's syscall tracepoints; about a minute), prints the table, leaves docs alone.
	@command -v perf >/dev/null || apt-get install -y linux-perf >/dev/null 2>&1 || { echo "bench-syscalls: needs perf (Debian: linux-perf)"; exit 2; }
	go build -o $(LOCALBIN)/loadbench ./test/loadbench/cmd/loadbench
	KUBEBUILDER_ASSETS="$$(hack/envtest-binaries.sh)" $(LOCALBIN)/loadbench -syscalls -throughput-duration 4s $(LOADBENCH_FLAGS)

.PHONY: bench-servers
bench-servers: bench-peers ## The server evaluation: the load rounds with gatewayd in its own process also served by fasthttp, and the two floor proxies (about 4 minutes), then the per-call counts of all five; leaves docs alone.
	go build -o $(LOCALBIN)/loadbench ./test/loadbench/cmd/loadbench
	KUBEBUILDER_ASSETS="$$(hack/envtest-binaries.sh)" $(LOCALBIN)/loadbench -skip-propagation -skip-scale -stream-duration 200ms -server-eval -floor $(LOADBENCH_FLAGS)
	KUBEBUILDER_ASSETS="$$(hack/envtest-binaries.sh)" $(LOCALBIN)/loadbench -syscalls -floor -throughput-duration 4s $(LOADBENCH_FLAGS)

.PHONY: bench-load
bench-load: bench-peers jaeger ## Only the harness's load rounds (OpenAI route, /production/predict, bare proxy, direct, the peers and the floor proxies): about 3 minutes, prints the table, leaves docs alone.
	go build -o $(LOCALBIN)/loadbench ./test/loadbench/cmd/loadbench
	KUBEBUILDER_ASSETS="$$(hack/envtest-binaries.sh)" $(LOCALBIN)/loadbench -skip-propagation -skip-scale -stream-duration 200ms -floor $(LOADBENCH_FLAGS)

##@ Dashboard

DASHBOARD_WEB := gatewayd/dashboard/web

.PHONY: dashboard
dashboard: ## Build the operator dashboard: npm ci from the lockfile, API types from gatewayd/rest/openapi.json, then the bundle into gatewayd/dashboard/dist (committed, embedded by go:embed).
	cd $(DASHBOARD_WEB) && npm ci --no-audit --no-fund && npm run typegen && npm run build

.PHONY: dashboard-check
dashboard-check: dashboard ## Rebuild the dashboard and fail on any difference from what is committed; run its unit tests (vitest).
	@git diff --exit-code -- gatewayd/dashboard/dist $(DASHBOARD_WEB)/src/api-types.ts && \
		test -z "$$(git status --porcelain --untracked-files=all -- gatewayd/dashboard/dist $(DASHBOARD_WEB)/src/api-types.ts)" || \
		{ echo "The dashboard bundle or its API types are stale: run 'make dashboard' and commit." >&2; exit 1; }
	cd $(DASHBOARD_WEB) && npx vitest run

##@ Build

.PHONY: build
build: generate ## Build every binary of cmd/ into bin/: manager, gatewayd, the modelgate CLI, the demo servers.
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o $(LOCALBIN)/ ./cmd/...

.PHONY: cluster
cluster: manifests generate helm ## Bring up a one-node cluster built from source with the Helm chart installed, until Ctrl-C (docs/cluster.md; needs root).
	hack/cluster.sh up

.PHONY: run
run: manifests generate ## Start the whole product locally: apiserver, etcd, CRDs, manager with webhooks, gatewayd, demo upstream. INFO and above on the terminal, the full log in .dev/devstack.log; RUN_ARGS=--debug shows DEBUG too; TRACING=1 starts Jaeger too, with every call traced into it.
	@# A built binary, not `go run`: go run exits 1 on Ctrl-C even when the stack stopped cleanly.
	go build -o $(LOCALBIN)/devstack ./cmd/devstack
	KUBEBUILDER_ASSETS="$$(hack/envtest-binaries.sh)" $(if $(TRACING),MODELGATE_JAEGER="$$(hack/jaeger-binary.sh)") \
		$(LOCALBIN)/devstack $(if $(TRACING),--tracing) $(RUN_ARGS)

.PHONY: docker-build
docker-build: ## Build the container image (needs a Docker engine).
	docker build -t modelgate:$(VERSION) .

##@ Tools

$(LOCALBIN):
	mkdir -p $(LOCALBIN)

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN)
$(CONTROLLER_GEN): | $(LOCALBIN)
	GOBIN=$(LOCALBIN) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)

.PHONY: helm
helm: $(HELM) ## Install helm into bin/ from the Go module proxy (the chart tests use it).
$(HELM): | $(LOCALBIN)
	GOBIN=$(LOCALBIN) go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
