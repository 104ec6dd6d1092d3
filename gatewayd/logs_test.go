package gatewayd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

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

// writeModel writes Model sentiment, with environments (name -> deployment), and its ModelDeployments to the
// API server: the logs route reads them there, as the manager would have them. No manager runs here, so the test
// writes them.
func (f *modelFixture) writeModel(environments map[string]string, deployments ...string) {
	f.t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: kubetest.Scheme()})
	if err != nil {
		f.t.Fatal(err)
	}
	ctx := context.Background()
	for _, id := range deployments {
		if err := c.Create(ctx, &gatewayv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: f.ns},
			Spec: gatewayv1.ModelDeploymentSpec{ModelID: "sentiment", Source: gatewayv1.DeploymentSource{URL: "http://model.invalid"}}}); err != nil {
			f.t.Fatal(err)
		}
	}
	m := &gatewayv1.Model{ObjectMeta: metav1.ObjectMeta{Name: "sentiment", Namespace: f.ns}}
	for _, name := range slices.Sorted(maps.Keys(environments)) {
		m.Spec.Environments = append(m.Spec.Environments, gatewayv1.ModelEnvironment{Name: name, Deployment: environments[name]})
	}
	if err := c.Create(ctx, m); err != nil {
		f.t.Fatal(err)
	}
}

// tracedModel is a model server that records the X-Request-Id of every call it receives.
type tracedModel struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
}

// newTracedModel starts a tracedModel. answer, when not nil, may answer call n (from 1) itself and say so;
// every other call gets {"ok":true}.
func newTracedModel(t *testing.T, answer func(n int, w http.ResponseWriter) bool) *tracedModel {
	m := &tracedModel{}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		m.mu.Lock()
		m.seen = append(m.seen, r.Header.Get("X-Request-Id"))
		n := len(m.seen)
		m.mu.Unlock()
		if answer == nil || !answer(n, w) {
			_, _ = w.Write([]byte(`{"ok":true}`))
		}
	}))
	t.Cleanup(m.Close)
	return m
}

// ids returns the request ids received so far.
func (m *tracedModel) ids() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.seen)
}

// TestPredictInLogs: a predict call that reached a deployment appears in that deployment's logs, through the
// management API of the same gatewayd, with the request id the caller saw in X-Request-Id and the model server
// received; a call the model failed appears at ERROR.
func TestPredictInLogs(t *testing.T) {
	f := newModelFixture(t, 0)
	traced := newTracedModel(t, nil)
	down, _ := net.Listen("tcp", "127.0.0.1:0")
	downURL := "http://" + down.Addr().String()
	down.Close()
	f.deployment("v1").URL = traced.URL
	f.snap.Models[1].Environments = append(f.snap.Models[1].Environments, snapshot.EnvironmentRoute{Name: "broken", Deployment: "down"})
	f.snap.Deployments = append(f.snap.Deployments, snapshot.Deployment{ID: "down", ModelID: "sentiment", Kind: snapshot.DeploymentURL,
		URL: downURL, PredictPath: "/predict", Active: true, Ready: true})
	f.publish()
	f.writeModel(map[string]string{"production": "v1", "broken": "down"}, "v1", "v2", "down")

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
	if seen, want := traced.ids(), []string{kept, minted, replaced}; !slices.Equal(seen, want) {
		t.Errorf("the model server received ids %q, want %q", seen, want)
	}
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

// TestAsyncInLogs: each attempt the async dispatcher makes appears in the deployment's logs under the async
// request's id, which the model server receives as X-Request-Id: a 503 at ERROR, then the 200 that succeeded.
func TestAsyncInLogs(t *testing.T) {
	f := newModelFixtureOpts(t, fixtureOpts{async: true})
	flaky := newTracedModel(t, func(n int, w http.ResponseWriter) bool {
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	f.deployment("v1").URL = flaky.URL
	f.publish()
	f.writeModel(map[string]string{"production": "v1"}, "v1")

	r := f.post("/models/sentiment/production/async_predict", "Bearer "+f.keys["invoke"],
		map[string]any{"model_input": map[string]any{"text": "hi"}, "inference_retry_config": map[string]any{"initial_delay_ms": 1, "max_delay_ms": 2}})
	if r.status != http.StatusCreated {
		t.Fatalf("async_predict: %d %s", r.status, r.body)
	}
	var accepted struct {
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal(r.body, &accepted); err != nil || accepted.RequestID == "" {
		t.Fatalf("async_predict answer %s", r.body)
	}
	// The dispatcher writes a line once an attempt's answer is in; wait for both. gatewayd runs on the fixture's
	// fake clock: each poll moves it a second, past the retry's delay and into a new window of the logs route's
	// rate limit.
	var lines []logLine
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		f.clock.SetTime(f.clock.Now().Add(time.Second))
		if lines = f.logs("v1", map[string]any{"direction": "asc"}); len(lines) >= 2 {
			break
		}
	}
	want := []struct{ message, level string }{{`^async attempt 1: 503 \d+ms$`, "ERROR"}, {`^async attempt 2: 200 \d+ms$`, "INFO"}}
	if len(lines) != len(want) {
		t.Fatalf("logs of v1: %+v, want the two attempts", lines)
	}
	for i, w := range want {
		l := lines[i]
		if l.RequestID == nil || *l.RequestID != accepted.RequestID || !regexp.MustCompile(w.message).MatchString(l.Message) || l.Level != w.level {
			t.Errorf("line %d = %+v, want request id %s, %s at %s", i, l, accepted.RequestID, w.message, w.level)
		}
	}
	if seen := flaky.ids(); !slices.Equal(seen, []string{accepted.RequestID, accepted.RequestID}) {
		t.Errorf("the model server received ids %q, want the request id %s on both attempts", seen, accepted.RequestID)
	}
}
