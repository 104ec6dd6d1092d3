package rest_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/rest"
	"github.com/modelgate/modelgate/gatewayd/rest/resttest"
)

// BenchmarkApplyToEnforced measures apply-to-enforced latency through the real control plane (envtest, webhooks,
// controllers, snapshot materializer). A write is answered only once the snapshot reflects it, so the latency of
// the REST call is what a client waits before its change is enforced. Each op is one group create or one key mint;
// p50 and p99 are reported as custom metrics. The directory polls the snapshot every 20 ms, which adds up to that
// much to each figure; gatewayd's informer-driven loader does not.
//
//	KUBEBUILDER_ASSETS=$HOME/.cache/modelgate/envtest/v1.37.1 go test ./gatewayd/rest/ -run '^$' -bench ApplyToEnforced -benchtime 100x
func BenchmarkApplyToEnforced(b *testing.B) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		b.Skip("KUBEBUILDER_ASSETS is not set")
	}
	logf.SetLogger(logr.Discard())
	bctx, stop := context.WithCancel(context.Background())
	defer stop()
	env, err := resttest.StartControlPlane(bctx)
	defer func() { _ = env.Stop() }()
	if err != nil {
		b.Fatal(err)
	}
	c := env.Client
	d := resttest.NewDirectory(c)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-"}}
	if err := c.Create(bctx, ns); err != nil {
		b.Fatal(err)
	}
	d.Add(ns.Name)
	key := "mgw_benchbenchbe.S3cr3tS3cr3tS3cr3tS3cr3tS3cr3tAb"
	sum := sha256.Sum256([]byte(key))
	if err := c.Create(bctx, &gatewayv1.WorkspaceAPIKey{
		ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: ns.Name},
		Spec: gatewayv1.WorkspaceAPIKeySpec{Type: gatewayv1.KeyTypeManageAll,
			KeySource: gatewayv1.KeySource{Prefix: key[:16], Hash: hex.EncodeToString(sum[:])}},
	}); err != nil {
		b.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, ok := d.WorkspaceKey(key); ok {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("seed key never reached the snapshot")
		}
	}
	mux := http.NewServeMux()
	rest.New(rest.Options{Client: c, Directory: d, ReadYourWritesTimeout: 30 * time.Second}).Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	post := func(path string, body any) (map[string]any, time.Duration) {
		raw, _ := json.Marshal(body)
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, bytes.NewReader(raw))
		req.Header.Set("Authorization", "Bearer "+key)
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		took := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		if resp.StatusCode != http.StatusCreated {
			b.Fatalf("POST %s: %d %v", path, resp.StatusCode, out)
		}
		return out, took
	}
	var groups, mints []time.Duration
	b.ResetTimer()
	for i := range b.N {
		g, took := post("/v1/gateway/groups", map[string]any{
			"metadata": map[string]any{"external_entity_id": fmt.Sprintf("bench-%d", i)},
			"models":   []any{map[string]any{"slug": "demo/echo"}},
		})
		groups = append(groups, took)
		_, took = post("/v1/gateway/groups/"+g["id"].(string)+"/api_keys", nil)
		mints = append(mints, took)
	}
	b.StopTimer()
	report := func(name string, ds []time.Duration) {
		slices.Sort(ds)
		b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, name+"-p50-ms")
		b.ReportMetric(float64(ds[(len(ds)*99)/100].Microseconds())/1000, name+"-p99-ms")
	}
	report("group", groups)
	report("mint", mints)
}
