// Package layers checks that imports in the module only point down the layers of docs/architecture.md:
//
//	api -> controllers, webhooks -> gatewayd/{httperr, ingress, limits, view, reload, auth, authz, discovery, billing, keyuse, state, wake,
//	    requestlog, podlogs, sessions, stdwebhook, tryplan, cooldown}
//	    -> gatewayd/upstream
//	    -> gatewayd/provider (and one package per provider kind below it) -> gatewayd/clientapi
//	    -> gatewayd/failover
//	    -> gatewayd/route
//	    -> gatewayd/inference, gatewayd/rest, gatewayd/async -> gatewayd -> cmd
//
// (gatewayd/async/queue, the async store, sits with the state packages.)
//
// The control plane (controllers, webhooks) and the data plane (gatewayd) meet only in api/: rules the webhook,
// the reconciler and REST share live there, so no data-plane package imports the control plane. A package may
// import its own layer's packages only where the table says so, and never one of a higher layer.
// Test files are not checked: a test may start a manager to exercise the REST API against real webhooks.
//
// It also checks that docs/architecture.md has a row for every package of the module (docs_test.go).
package layers

import (
	"os/exec"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/modelgate/modelgate/"

// layer is a set of packages, by path prefix, and what they may import besides the packages of lower layers.
type layer struct {
	name string
	// prefixes match a package path exactly or as a parent directory.
	prefixes []string
	// peers are the prefixes of this layer a package of it may import; its own subtree is always allowed.
	peers []string
	// dataPlane layers may not import the control plane.
	dataPlane bool
}

// layers, lowest first.
const controlPlane = "control plane"

var layers = []layer{
	{name: "api", prefixes: []string{"api"}, peers: []string{"api"}},
	{name: controlPlane, prefixes: []string{"controllers", "webhooks"}},
	{name: "data-plane state and views", prefixes: []string{
		"gatewayd/httperr", "gatewayd/limits", "gatewayd/view", "gatewayd/reload", "gatewayd/auth", "gatewayd/concurrency",
		"gatewayd/authz", "gatewayd/discovery", "gatewayd/billing", "gatewayd/keyuse", "gatewayd/state", "gatewayd/version",
		"gatewayd/async/queue", "gatewayd/requestlog", "gatewayd/podlogs", "gatewayd/wake", "gatewayd/ingress", "gatewayd/sessions",
		"gatewayd/stdwebhook", "gatewayd/tryplan", "gatewayd/cooldown",
	}, peers: []string{
		"gatewayd/httperr", "gatewayd/limits", "gatewayd/view", "gatewayd/reload", "gatewayd/auth", "gatewayd/concurrency",
		"gatewayd/authz", "gatewayd/discovery", "gatewayd/billing", "gatewayd/keyuse", "gatewayd/state", "gatewayd/version",
		"gatewayd/async/queue", "gatewayd/requestlog", "gatewayd/podlogs", "gatewayd/wake", "gatewayd/ingress", "gatewayd/sessions",
		"gatewayd/stdwebhook", "gatewayd/tryplan", "gatewayd/cooldown",
	}, dataPlane: true},
	{name: "forwarding core", prefixes: []string{"gatewayd/upstream"}, dataPlane: true},
	// One package per provider kind under gatewayd/provider, each behind its one interface.
	{name: "providers", prefixes: []string{"gatewayd/provider"}, dataPlane: true},
	// The client APIs other than OpenAI's, each translated into OpenAI's shape (they share the providers' readers).
	{name: "client APIs", prefixes: []string{"gatewayd/clientapi"}, dataPlane: true},
	// The try loop of Endpoint calls, over the providers.
	{name: "try loop", prefixes: []string{"gatewayd/failover"}, dataPlane: true},
	// The route step: which deployment or Endpoint a model call names, and its upstream target. The sync and the
	// async model-call handlers both ask it, so neither imports the other.
	{name: "route step", prefixes: []string{"gatewayd/route"}, dataPlane: true},
	{name: "handlers", prefixes: []string{"gatewayd/inference", "gatewayd/rest", "gatewayd/async"}, dataPlane: true},
	{name: "data-plane assembly", prefixes: []string{"gatewayd"}, dataPlane: true},
	// gatewayd/rest/resttest, the fixture of the REST suites, starts the manager and envtest: a test harness.
	{name: "mains and test harnesses", prefixes: []string{"cmd", "test", "gatewayd/rest/resttest"}, peers: []string{"cmd", "test"}},
}

func under(pkg, prefix string) bool { return pkg == prefix || strings.HasPrefix(pkg, prefix+"/") }

// place returns the layer index of pkg and the prefix that matched, the longest one across layers.
func place(pkg string) (int, string) {
	best, bestPrefix := -1, ""
	for i, l := range layers {
		for _, p := range l.prefixes {
			if under(pkg, p) && len(p) > len(bestPrefix) {
				best, bestPrefix = i, p
			}
		}
	}
	return best, bestPrefix
}

// allowed reports whether from may import to.
func allowed(from, to string) bool {
	fl, fp := place(from)
	tl, tp := place(to)
	switch {
	case fl < 0 || tl < 0:
		return false
	case layers[fl].dataPlane && layers[tl].name == controlPlane:
		return false
	case tl < fl:
		return true
	case tl > fl:
		return false
	case fp == tp:
		return true
	}
	for _, p := range layers[fl].peers {
		if under(to, p) {
			return true
		}
	}
	return false
}

func TestImportsPointDown(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}|{{join .Imports " "}}`, module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var bad []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		from, imports, _ := strings.Cut(line, "|")
		from = strings.TrimPrefix(from, module)
		if l, _ := place(from); l < 0 {
			bad = append(bad, from+": in no layer; add it to the table in test/layers and docs/architecture.md")
			continue
		}
		for _, to := range strings.Fields(imports) {
			if !strings.HasPrefix(to, module) {
				continue
			}
			to = strings.TrimPrefix(to, module)
			if !allowed(from, to) {
				bad = append(bad, from+" -> "+to)
			}
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Errorf("import against the layers: %s", b)
	}
}

// TestTableRefusesUpwardAndSidewaysEdges pins the table itself, so a loosened table shows up in review.
func TestTableRefusesUpwardAndSidewaysEdges(t *testing.T) {
	for _, tc := range []struct {
		from, to string
		ok       bool
	}{
		{"gatewayd/rest/groups", "api/v1alpha1/hierarchy", true},
		{"gatewayd/rest/groups", "gatewayd/rest/kit", true},
		{"gatewayd/inference", "gatewayd/upstream", true},
		{"gatewayd/upstream", "gatewayd/view", true},
		{"gatewayd/auth", "gatewayd/view", true},
		{"gatewayd", "gatewayd/rest", true},
		{"cmd/gatewayd", "gatewayd/state", true},
		{"controllers", "api/snapshot", true},
		{"gatewayd/rest", "controllers/translate", false},
		{"gatewayd/view", "controllers", false},
		{"webhooks", "controllers", false},
		{"controllers", "webhooks", false},
		{"gatewayd/inference", "gatewayd/rest", false},
		{"gatewayd/rest", "gatewayd/inference", false},
		{"gatewayd/upstream", "gatewayd/inference", false},
		{"gatewayd/view", "gatewayd/upstream", false},
		{"gatewayd/inference", "gatewayd", false},
		{"gatewayd/inference", "gatewayd/route", true},
		{"gatewayd/async", "gatewayd/route", true},
		{"gatewayd/route", "gatewayd/upstream", true},
		{"gatewayd/route", "gatewayd/inference", false},
		{"gatewayd/upstream", "gatewayd/route", false},
		{"gatewayd/async", "gatewayd/inference", false},
		{"gatewayd/state", "gatewayd/async/queue", true},
		{"gatewayd/async", "gatewayd/async/queue", true},
		{"gatewayd/inference", "gatewayd/async", false},
		{"gatewayd/async", "gatewayd/rest", false},
		{"gatewayd/async/queue", "gatewayd/upstream", false},
		{"api/v1alpha1", "gatewayd/view", false},
		{"gatewayd", "test/upstream", false},
		{"gatewayd", "cmd/gatewayd", false},
		{"gatewayd/rest/resttest", "controllers", true},
		{"gatewayd/rest/resttest", "test/kubetest", true},
		{"gatewayd/rest", "gatewayd/rest/resttest", false},
	} {
		if got := allowed(tc.from, tc.to); got != tc.ok {
			t.Errorf("%s -> %s: allowed %v, want %v", tc.from, tc.to, got, tc.ok)
		}
	}
}
