package gatewayd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/test/kubetest"
)

// logLine is one line of a logs answer.
type logLine struct {
	Timestamp string  `json:"timestamp"`
	Message   string  `json:"message"`
	Replica   *string `json:"replica"`
	RequestID *string `json:"request_id"`
	Level     string  `json:"level"`
}

// logs calls the logs route of deployment (or environment alias) id of model sentiment.
func (f *modelFixture) logs(id string, body map[string]any) []logLine {
	f.t.Helper()
	r := f.post("/v1/models/sentiment/deployments/"+id+"/logs", "Bearer "+f.keys["manage"], body)
	if r.status != http.StatusOK {
		f.t.Fatalf("logs of %s: %d %s", id, r.status, r.body)
	}
	var out struct{ Logs []logLine }
	if err := json.Unmarshal(r.body, &out); err != nil {
		f.t.Fatal(err)
	}
	return out.Logs
}

// TestPredictInLogs: a predict call that reached a deployment appears in that deployment's logs, through the
// management API of the same gatewayd, with the request id the caller saw in X-Request-Id and the model server
// received; a call the model failed appears at ERROR.
func TestPredictInLogs(t *testing.T) {
	f := newModelFixture(t, 0)
	// A model server that records the request id it receives.
	var mu sync.Mutex
	var seen []string
	traced := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		seen = append(seen, r.Header.Get("X-Request-Id"))
		mu.Unlock()
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(traced.Close)
	down, _ := net.Listen("tcp", "127.0.0.1:0")
	downURL := "http://" + down.Addr().String()
	down.Close()
	f.deployment("v1").URL = traced.URL
	f.snap.Models[1].Environments = append(f.snap.Models[1].Environments, snapshot.EnvironmentRoute{Name: "broken", Deployment: "down"})
	f.snap.Deployments = append(f.snap.Deployments, snapshot.Deployment{ID: "down", ModelID: "sentiment", Kind: snapshot.DeploymentURL,
		URL: downURL, PredictPath: "/predict", Active: true, Ready: true})
	f.publish()
	// The logs route reads the Model and its deployments from the API server, as the manager would have them;
	// no manager runs here, so the test writes them.
	c, err := client.New(cfg, client.Options{Scheme: kubetest.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, id := range []string{"v1", "v2", "down"} {
		if err := c.Create(ctx, &gatewayv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: f.ns},
			Spec: gatewayv1.ModelDeploymentSpec{ModelID: "sentiment", Source: gatewayv1.DeploymentSource{URL: "http://model.invalid"}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Create(ctx, &gatewayv1.Model{ObjectMeta: metav1.ObjectMeta{Name: "sentiment", Namespace: f.ns},
		Spec: gatewayv1.ModelSpec{Environments: []gatewayv1.ModelEnvironment{{Name: "production", Deployment: "v1"}, {Name: "broken", Deployment: "down"}}}}); err != nil {
		t.Fatal(err)
	}

	call := func(path, requestID string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, f.url+path, bytes.NewReader([]byte(`{"text":"hi"}`)))
		req.Header.Set("Authorization", "Bearer "+f.keys["invoke"])
		req.Header.Set("Content-Type", "application/json")
		if requestID != "" {
			req.Header.Set("X-Request-Id", requestID)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("X-Request-Id")
	}
	// The caller's id is kept; a call without one, or with one unsafe to echo, gets a new one.
	status, kept := call("/models/sentiment/production/predict", "trace-0001")
	if status != 200 || kept != "trace-0001" {
		t.Fatalf("with X-Request-Id trace-0001: %d, answered id %q", status, kept)
	}
	status, minted := call("/models/sentiment/deployment/v1/predict", "")
	if status != 200 || !regexp.MustCompile(`^req_[0-9a-f]{24}$`).MatchString(minted) {
		t.Fatalf("without X-Request-Id: %d, answered id %q; want a new req_ id", status, minted)
	}
	status, replaced := call("/models/sentiment/production/predict", "bad id\twith spaces")
	if status != 200 || replaced == "bad id\twith spaces" || replaced == "" {
		t.Fatalf("with an unsafe X-Request-Id: %d, answered id %q; want a new one", status, replaced)
	}
	mu.Lock()
	if want := []string{kept, minted, replaced}; len(seen) != 3 || seen[0] != want[0] || seen[1] != want[1] || seen[2] != want[2] {
		t.Errorf("the model server received ids %q, want %q", seen, want)
	}
	mu.Unlock()
	if status, failed := call("/models/sentiment/environments/broken/predict", "trace-down"); status != http.StatusBadGateway || failed != "trace-down" {
		t.Fatalf("the down deployment: %d, id %q; want 502 with trace-down", status, failed)
	}
	// A call refused before it reached a deployment (unknown environment) is in no deployment's log.
	call("/models/sentiment/environments/nope/predict", "trace-nowhere")

	host, _ := os.Hostname()
	lines := f.logs("production", map[string]any{"direction": "asc"})
	msg := regexp.MustCompile(`^POST /(production|deployment/v1)/predict 200 \d+ms$`)
	if len(lines) != 3 {
		t.Fatalf("logs of production: %+v, want the 3 calls to v1", lines)
	}
	for i, id := range []string{kept, minted, replaced} {
		l := lines[i]
		if l.RequestID == nil || *l.RequestID != id || !msg.MatchString(l.Message) || l.Level != "INFO" || l.Replica == nil || *l.Replica != host {
			t.Errorf("line %d = %+v, want request id %s, a 200 line, INFO, replica %s", i, l, id, host)
		}
	}
	// search_pattern finds a call by its request id.
	if got := f.logs("v1", map[string]any{"search_pattern": "^trace-0001$"}); len(got) != 1 || *got[0].RequestID != "trace-0001" {
		t.Errorf("search by request id: %+v", got)
	}
	got := f.logs("down", map[string]any{"min_level": "ERROR"})
	if len(got) != 1 || *got[0].RequestID != "trace-down" || !regexp.MustCompile(`^POST /environments/broken/predict 502 \d+ms$`).MatchString(got[0].Message) {
		t.Errorf("ERROR lines of down: %+v, want its 502", got)
	}
	if got := f.logs("v2", nil); len(got) != 0 {
		t.Errorf("logs of v2, never called: %+v", got)
	}
}
