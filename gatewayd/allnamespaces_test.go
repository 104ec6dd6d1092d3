package gatewayd_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/modelgate/modelgate/gatewayd"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
)

// TestServeAllNamespaces: with no namespace list, gatewayd serves every namespace that has a snapshot, and is
// ready once each that had one at startup has loaded; a namespace published later is picked up too.
func TestServeAllNamespaces(t *testing.T) {
	startEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	keys := map[string]string{}
	publish := func() string {
		ns, err := gatewaytest.CreateNamespace(ctx, cs, "all")
		if err != nil {
			t.Fatal(err)
		}
		s := gatewaytest.Snapshot(ns, "INDEPENDENT", []gatewaytest.Group{{ID: "root", Models: models(slug)}})
		key, rec := gatewaytest.NewKey("k", "root")
		s.APIKeys = append(s.APIKeys, rec)
		keys[ns] = key
		if err := gatewaytest.Publish(ctx, cs, s, 1, 0); err != nil {
			t.Fatal(err)
		}
		return ns
	}
	a, b := publish(), publish()
	gw, err := gatewayd.New(gatewayd.Options{RESTConfig: cfg})
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
	f := &fixture{t: t, url: url}
	for ns, key := range keys {
		// No Endpoint is published, so an authenticated call for an allowed slug gets 503 model_not_ready.
		if r := f.post("/v1/chat/completions", "Api-Key "+key, map[string]any{"model": slug}); r.status != http.StatusServiceUnavailable {
			t.Errorf("key of %s: status %d, want 503 (authenticated, no Endpoint): %s", ns, r.status, r.body)
		}
	}
}
