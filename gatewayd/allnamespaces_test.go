package gatewayd_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/modelgate/modelgate/gatewayd"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
)

// TestServeAllNamespaces: with no namespace list, gatewayd serves every namespace that has a snapshot, and is
// ready once each that had one at startup has loaded; a namespace published later is picked up too. Workspaces
// that use the same external id and slug count in series of their own, and each workspace's export key reads
// its own series only.
func TestServeAllNamespaces(t *testing.T) {
	kube.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	keys, exportKeys := map[string]string{}, map[string]string{}
	publish := func() string {
		ns, err := gatewaytest.CreateNamespace(ctx, cs, "all")
		if err != nil {
			t.Fatal(err)
		}
		s := gatewaytest.Snapshot(ns, "INDEPENDENT", []gatewaytest.Group{{ID: "root", Models: models(slug)}})
		key, rec := gatewaytest.NewKey("k", "root")
		s.APIKeys = append(s.APIKeys, rec)
		keys[ns] = key
		export, exportRec := gatewaytest.NewWorkspaceKey("export", "WORKSPACE_EXPORT_METRICS")
		s.WorkspaceAPIKeys = append(s.WorkspaceAPIKeys, exportRec)
		exportKeys[ns] = export
		if err := gatewaytest.Publish(ctx, cs, s, 1, 0); err != nil {
			t.Fatal(err)
		}
		return ns
	}
	a, b := publish(), publish()
	metricsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gatewayd.New(gatewayd.Options{RESTConfig: asGatewayd(t), MetricsListener: metricsLn})
	if err != nil {
		t.Fatal(err)
	}
	url, err := gatewaytest.Serve(ctx, gw)
	if err != nil {
		t.Fatal(err)
	}
	if err := gatewaytest.WaitReady(gw, loadDeadline); err != nil {
		t.Fatal(err)
	}
	// Ready means every namespace present at startup is loaded, with no further waiting.
	for _, ns := range []string{a, b} {
		if gw.View().Namespace(ns) == nil {
			t.Fatalf("ready before namespace %s was loaded", ns)
		}
	}
	c := publish()
	if err := gatewaytest.WaitVersion(gw, c, 1, loadDeadline); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, url: url, metricsURL: "http://" + metricsLn.Addr().String()}
	for ns, key := range keys {
		// No Endpoint is published, so an authenticated call for an allowed slug gets 503 model_not_ready.
		if r := f.post("/v1/chat/completions", "Api-Key "+key, map[string]any{"model": slug}); r.status != http.StatusServiceUnavailable {
			t.Errorf("key of %s: status %d, want 503 (authenticated, no Endpoint): %s", ns, r.status, r.body)
		}
	}
	series := func(ns string) string {
		return `service_model_api_inference_requests_total{external_entity_id="ext-root",model="demo/echo",status_code="503",workspace="` + ns + `"}`
	}
	for ns := range keys {
		if got := f.metric(series(ns)); got != 1 {
			t.Errorf("workspace %s: %v calls in its series, want 1", ns, got)
		}
		code, body := getWith(t, url+"/v1/metrics", "Bearer "+exportKeys[ns])
		if code != http.StatusOK || !strings.Contains(body, series(ns)+" 1") {
			t.Errorf("export key of %s: %d, want its series:\n%s", ns, code, body)
		}
		for other := range keys {
			if other != ns && strings.Contains(body, other) {
				t.Errorf("export key of %s reads series of workspace %s:\n%s", ns, other, body)
			}
		}
	}
}
