// Package webhooks_test verifies async result webhooks with an independent Standard Webhooks implementation,
// the standardwebhooks npm package: a real gatewayd (envtest snapshot) runs async requests against a model on a
// loopback socket and delivers to a receiver that fails its first 3 attempts; every captured delivery, failed
// ones included, must verify in Node.
package webhooks_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/gatewayd"
	"github.com/modelgate/modelgate/gatewayd/async"
	"github.com/modelgate/modelgate/gatewayd/async/queue"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/test/kubetest"
)

type delivery struct {
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
}

func TestAsyncWebhooksVerifyWithStandardWebhooks(t *testing.T) {
	node := gatewaytest.NodeWithPackage(t, "standardwebhooks")
	env := kubetest.StartTest(t, kubetest.Options{CRDs: true})
	cs := env.Clientset
	ctx := context.Background()
	ns, err := gatewaytest.CreateNamespace(ctx, cs, "webhooks")
	if err != nil {
		t.Fatal(err)
	}
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("a-32-byte-async-webhook-secret!!"))
	if err := gatewaytest.CreateSecret(ctx, cs, ns, "async-webhook", "secret", secret); err != nil {
		t.Fatal(err)
	}
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"result":%s,"text":"ünïcode ✓"}`, b)
	}))
	t.Cleanup(model.Close)
	var mu sync.Mutex
	var got []delivery
	delivered := map[string]bool{}
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		got = append(got, delivery{Headers: map[string]string{"webhook-id": r.Header.Get("webhook-id"),
			"webhook-timestamp": r.Header.Get("webhook-timestamp"), "webhook-signature": r.Header.Get("webhook-signature")}, Body: string(b)})
		if len(got) <= 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var p async.WebhookPayload
		_ = json.Unmarshal(b, &p)
		delivered[p.RequestID] = true
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(recv.Close)

	s := gatewaytest.Snapshot(ns, "INDEPENDENT", nil)
	key, rec := gatewaytest.NewWorkspaceKey("invoke", "WORKSPACE_INVOKE")
	s.WorkspaceAPIKeys = []snapshot.WorkspaceAPIKey{rec}
	s.Workspace.AsyncWebhookSecret = &snapshot.SecretRef{Name: "async-webhook", Key: "secret"}
	s.Models = []snapshot.ServedModel{{ID: "m", Environments: []snapshot.EnvironmentRoute{{Name: "production", Deployment: "v1"}}}}
	s.Deployments = []snapshot.Deployment{{ID: "v1", ModelID: "m", Kind: snapshot.DeploymentURL, URL: model.URL, PredictPath: "/", Active: true, Ready: true}}
	db, err := bolt.Open(filepath.Join(t.TempDir(), "gatewayd.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	store, err := queue.NewBolt(db)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gatewayd.New(gatewayd.Options{RESTConfig: env.Config, Namespaces: []string{ns}, Store: limits.NewMemory(), Async: store,
		DisableManagementAPI: true, AsyncConfig: async.Config{AllowInternalWebhooks: true, Poll: 10 * time.Millisecond,
			WebhookMinBackoff: 20 * time.Millisecond, WebhookMaxBackoff: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = gw.Serve(serveCtx, ln) }()
	t.Cleanup(func() { stop(); <-done })
	if err := gatewaytest.Publish(ctx, cs, s, 1, 0); err != nil {
		t.Fatal(err)
	}
	if err := gatewaytest.WaitVersion(gw, ns, 1, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	const n = 5
	for i := range n {
		body := fmt.Sprintf(`{"model_input": {"i": %d}, "webhook_endpoint": "%s/hook"}`, i, recv.URL)
		req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/models/m/production/async_predict", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("async_predict: %d", resp.StatusCode)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		k := len(delivered)
		mu.Unlock()
		if k == n {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	captured, k := append([]delivery(nil), got...), len(delivered)
	mu.Unlock()
	if k != n {
		t.Fatalf("the receiver got %d of %d results", k, n)
	}
	in, _ := json.Marshal(map[string]any{"secret": secret, "deliveries": captured})
	file := filepath.Join(t.TempDir(), "deliveries.json")
	if err := os.WriteFile(file, in, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(node, "verify.mjs", file).CombinedOutput() // from the package directory
	t.Logf("node: %s", out)
	if err != nil {
		t.Fatalf("standardwebhooks refused a delivery: %v", err)
	}
	if !strings.Contains(string(out), fmt.Sprintf("verified %d deliveries", len(captured))) {
		t.Fatalf("node verified the wrong number of deliveries (captured %d)", len(captured))
	}
}
