package e2e

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// TestPromoteUnderSteadyLoad: while callers keep calling a model's production route, promoting another deployment
// switches the serving deployment with no failed call. The whole product runs: the REST API writes the Model, the
// manager publishes the snapshot, gatewayd loads it; both deployments are url sources on real servers.
func TestPromoteUnderSteadyLoad(t *testing.T) {
	s := theStack(t)
	ctx := context.Background()
	var served [2]atomic.Int64
	servers := make([]*httptest.Server, 2)
	for i := range servers {
		servers[i] = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			if r.URL.Path == "/predict" {
				served[i].Add(1)
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"ok":true}`))
		}))
		defer servers[i].Close()
	}
	for i, id := range []string{"promote-a", "promote-b"} {
		if err := s.Client.Create(ctx, &gatewayv1.ModelDeployment{
			ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: s.Namespace},
			Spec:       gatewayv1.ModelDeploymentSpec{ModelID: "promote", Source: gatewayv1.DeploymentSource{URL: servers[i].URL}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Client.Create(ctx, &gatewayv1.Model{
		ObjectMeta: metav1.ObjectMeta{Name: "promote", Namespace: s.Namespace},
		Spec:       gatewayv1.ModelSpec{Environments: []gatewayv1.ModelEnvironment{{Name: "production", Deployment: "promote-a"}}},
	}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, s.Client, s.Namespace, "promote-a", gatewayv1.StatusActive)
	waitStatus(t, s.Client, s.Namespace, "promote-b", gatewayv1.StatusActive)
	predict := s.GatewayURL + "/models/promote/production/predict"
	deadline := time.Now().Add(30 * time.Second)
	for send(t, http.MethodPost, predict, "Bearer "+s.APIKey, map[string]any{"x": 1}).code != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("the model never answered through gatewayd")
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Four callers keep calling until the promotion has answered and 200 calls have been made.
	var calls, failed atomic.Int64
	var failures sync.Map
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest(http.MethodPost, predict, strings.NewReader(`{"x":1}`))
				req.Header.Set("Authorization", "Bearer "+s.APIKey)
				req.Header.Set("Content-Type", "application/json")
				resp, err := httpClient.Do(req)
				calls.Add(1)
				if err != nil {
					failed.Add(1)
					failures.Store(err.Error(), true)
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed.Add(1)
					failures.Store(string(body), true)
				}
			}
		})
	}
	for calls.Load() < 100 {
		time.Sleep(5 * time.Millisecond)
	}
	r := admin(t, s, http.MethodPost, "/v1/models/promote/environments/production/promote", map[string]any{"deployment_id": "promote-b"})
	if r.code != http.StatusOK {
		t.Errorf("promote: %s", r)
	}
	for calls.Load() < 250 {
		time.Sleep(5 * time.Millisecond)
	}
	afterPromote := served[1].Load()
	for served[1].Load() < afterPromote+20 {
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	failures.Range(func(k, _ any) bool { t.Errorf("failed call: %v", k); return true })
	if failed.Load() != 0 {
		t.Fatalf("%d of %d calls failed during the promotion", failed.Load(), calls.Load())
	}
	if served[0].Load() == 0 || served[1].Load() == 0 {
		t.Fatalf("calls served by a: %d, by b: %d; want both before and after the promotion", served[0].Load(), served[1].Load())
	}
	t.Logf("%d calls, 0 failed; a served %d, b served %d", calls.Load(), served[0].Load(), served[1].Load())
}

func waitStatus(t *testing.T, c client.Client, ns, id string, want gatewayv1.DeploymentStatus) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		d := &gatewayv1.ModelDeployment{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: id}, d); err == nil && d.Status.Status == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("deployment %s never reached %s", id, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
