package cli

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/test/stack"
)

// TestAsync: requests queued from a file and from stdin, their status, a cancel of a QUEUED request and of one
// that already ran, refusals naming the field, and --wait on the status route's 429.
func TestAsync(t *testing.T) {
	admin := as(t, adminKey)
	// A model that holds every call until released: with one slot (one replica, concurrency 1), the first
	// request runs and the second stays QUEUED.
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	}))
	defer slow.Close()
	defer free() // runs before slow.Close, which waits for the held calls
	ctx := context.Background()
	if err := st.Client.Create(ctx, &gatewayv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: st.Namespace, Name: "cli-slow-v1"},
		Spec: gatewayv1.ModelDeploymentSpec{ModelID: "cli-slow", Source: gatewayv1.DeploymentSource{URL: slow.URL}}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Client.Create(ctx, &gatewayv1.Model{ObjectMeta: metav1.ObjectMeta{Namespace: st.Namespace, Name: "cli-slow"},
		Spec: gatewayv1.ModelSpec{Environments: []gatewayv1.ModelEnvironment{{Name: gatewayv1.EnvironmentProduction, Deployment: "cli-slow-v1"}}}}); err != nil {
		t.Fatal(err)
	}
	waitActive(t, "cli-slow", "cli-slow-v1")

	in := writeFile(t, "input.json", `{"text":"hold me"}`)
	var first string
	eventually(t, "gatewayd serving cli-slow", func() (bool, string) {
		r := admin.run("async", "predict", "cli-slow", "-f", in)
		first = strings.TrimSpace(r.stdout)
		return r.code == 0, r.String()
	})
	eventually(t, "the first request running", func() (bool, string) {
		got := admin.json("async", "status", "cli-slow", first)
		return got["status"] == "IN_PROGRESS", ""
	})
	second := strings.TrimSpace(admin.ok("async", "predict", "cli-slow", "-f", in, "--priority", "2").stdout)
	if r := admin.ok("async", "status", "cli-slow", second); !strings.Contains(r.stdout, "QUEUED") || !strings.Contains(r.stdout, "REQUEST") {
		t.Errorf("status of the queued request: %v", r)
	}
	if r := admin.ok("async", "cancel", "cli-slow", second); strings.TrimSpace(r.stdout) != "Canceled "+second {
		t.Errorf("cancel of a QUEUED request: %v", r)
	}
	if got := admin.json("async", "status", "cli-slow", second); got["status"] != "CANCELED" {
		t.Errorf("status after cancel: %v", got)
	}
	free()
	eventually(t, "the first request succeeding", func() (bool, string) {
		got := admin.json("async", "status", "cli-slow", first)
		return got["status"] == "SUCCEEDED", ""
	})
	if r := admin.ok("async", "cancel", "cli-slow", first); !strings.Contains(r.stdout, "Not canceled: ") {
		t.Errorf("cancel of a finished request: %v", r)
	}

	// From stdin, to the demo model's staging environment.
	stdin := &cli{t: t, key: adminKey, stdin: `{"text":"I love it"}`}
	id := strings.TrimSpace(stdin.ok("async", "predict", stack.ModelName, "--environment", stack.ModelStagingEnv, "--priority", "1").stdout)
	eventually(t, "the demo request succeeding", func() (bool, string) {
		got := admin.json("async", "status", stack.ModelName, id)
		return got["status"] == "SUCCEEDED", ""
	})

	admin.refused(exitInvalid, []string{"HTTP 400 client_error", "priority: "}, "async", "predict", stack.ModelName, "-f", in, "--priority", "7")
	admin.refused(exitInvalid, []string{"inference_retry_config.max_attempts: "}, "async", "predict", stack.ModelName, "-f", in, "--max-attempts", "20")
	admin.refused(exitUsage, []string{"must be JSON"}, "async", "predict", stack.ModelName, "-f", writeFile(t, "bad", "not json"))
	admin.refused(exitNotFound, []string{"HTTP 404"}, "async", "status", stack.ModelName, "no-such-request")

	// Status allows 20 calls a second per key. After a burst, the CLI answers exit 6 and the wait; with --wait it
	// waits that long once and answers. A burst that misses the second is tried again.
	burst := func() {
		var wg sync.WaitGroup
		for range 25 {
			wg.Go(func() { call(adminKey, http.MethodGet, "/models/"+stack.ModelName+"/async_request/"+id) })
		}
		wg.Wait()
	}
	eventually(t, "a status refused with 429", func() (bool, string) {
		burst()
		r := admin.run("async", "status", stack.ModelName, id)
		return r.code == exitRateLimited && strings.Contains(r.stderr, "HTTP 429 rate_limited") && strings.Contains(r.stderr, "retry after"), r.String()
	})
	eventually(t, "--wait waiting out a 429", func() (bool, string) {
		burst()
		r := admin.run("async", "status", stack.ModelName, id, "--wait")
		return r.code == 0 && strings.Contains(r.stderr, "Rate limited; waiting") && strings.Contains(r.stdout, "SUCCEEDED"), r.String()
	})
}
