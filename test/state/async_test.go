package state

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

// asyncModel is a model server for the async restart tests. Each call's body is {"n": i}. It records how many
// times each n ran, and fails the test's invariant when one n runs twice at the same time. While hold is set,
// calls wait (reading the body first, so a caller that dies is noticed) until their caller goes away or hold
// is cleared; otherwise they take delay.
type asyncModel struct {
	srv   *httptest.Server
	mu    sync.Mutex
	ran   map[int]int
	now   map[int]int
	twice []int
	held  int
	hold  chan struct{} // closed to release held calls
	delay time.Duration
}

func newAsyncModel(t *testing.T, hold bool, delay time.Duration) *asyncModel {
	m := &asyncModel{ran: map[int]int{}, now: map[int]int{}, delay: delay, hold: make(chan struct{})}
	if !hold {
		close(m.hold)
	}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct{ N int }
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &in)
		m.mu.Lock()
		m.ran[in.N]++
		m.now[in.N]++
		if m.now[in.N] > 1 {
			m.twice = append(m.twice, in.N)
		}
		hold := m.hold
		select {
		case <-hold:
		default:
			m.held++
		}
		m.mu.Unlock()
		defer func() { m.mu.Lock(); m.now[in.N]--; m.mu.Unlock() }()
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		}
		select {
		case <-time.After(m.delay):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *asyncModel) release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-m.hold:
	default:
		close(m.hold)
	}
}

func (m *asyncModel) heldCalls() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.held
}

// asyncWorkspace serves model "m" with url deployment "m-v1" at the model server, four requests at a time, and
// nKeys invoke keys (status polls are limited per key).
func asyncWorkspace(t *testing.T, model *asyncModel, nKeys int) (*workspace, []string) {
	var keys []string
	w := newWorkspace(t, gatewayv1.LimitEnforcement("INDEPENDENT"), nil, func(s *snapshot.Snapshot) {
		for i := range nKeys {
			key, rec := gatewaytest.NewWorkspaceKey(fmt.Sprint("invoke-", i), "WORKSPACE_INVOKE")
			keys = append(keys, key)
			s.WorkspaceAPIKeys = append(s.WorkspaceAPIKeys, rec)
		}
		s.Models = []snapshot.ServedModel{{ID: "m", Environments: []snapshot.EnvironmentRoute{{Name: "production", Deployment: "m-v1"}}}}
		s.Deployments = []snapshot.Deployment{{ID: "m-v1", ModelID: "m", Kind: snapshot.DeploymentURL, URL: model.srv.URL,
			PredictPath: "/predict", Active: true, Ready: true, ConcurrencyTarget: 4}}
	})
	return w, keys
}

func asyncCall(t *testing.T, method, url, key string, body []byte) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Api-Key "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

func enqueueAsync(t *testing.T, url, key string, n int) string {
	t.Helper()
	status, m := asyncCall(t, http.MethodPost, url+"/models/m/production/async_predict", key, fmt.Appendf(nil, `{"model_input": {"n": %d}}`, n))
	if status != http.StatusCreated {
		t.Fatalf("async_predict %d: %d %v", n, status, m)
	}
	return m["request_id"].(string)
}

// waitDrained waits until the deployment's queue is empty and nothing runs.
func waitDrained(t *testing.T, url, key string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var m map[string]any
	for time.Now().Before(deadline) {
		var status int
		status, m = asyncCall(t, http.MethodGet, url+"/models/m/production/async_queue_status", key, nil)
		if status == http.StatusOK && m["num_queued_requests"] == 0.0 && m["num_in_progress_requests"] == 0.0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("queue not drained after %s: %v", timeout, m)
}

// checkAllSucceeded reads every request's status (spreading the polls over the keys, 20 per second each) and
// checks that each is SUCCEEDED and that each input ran at least once.
func checkAllSucceeded(t *testing.T, url string, keys, ids []string, model *asyncModel) {
	t.Helper()
	for i, id := range ids {
		status, m := asyncCall(t, http.MethodGet, url+"/models/m/async_request/"+id, keys[i%len(keys)], nil)
		if status != http.StatusOK || m["status"] != "SUCCEEDED" {
			t.Errorf("request %d (%s): %d %v", i, id, status, m)
		}
	}
	model.mu.Lock()
	defer model.mu.Unlock()
	for i := range ids {
		if model.ran[i] < 1 {
			t.Errorf("input %d never ran", i)
		}
	}
	if len(model.twice) > 0 {
		t.Errorf("inputs ran twice at the same time: %v", model.twice)
	}
}

// TestAsyncSIGKILLEmbedded: the only gatewayd, on the embedded store, is killed with SIGKILL while 4 requests
// run and 100 wait. After a restart on the same state every request reaches SUCCEEDED and each ran at least
// once (the 4 that were running run again once their lease expires).
func TestAsyncSIGKILLEmbedded(t *testing.T) {
	model := newAsyncModel(t, true, 0)
	w, keys := asyncWorkspace(t, model, 8)
	flags := []string{"--store=embedded", "--state-dir=" + t.TempDir(), "--async-lease=2s", "--async-predict-rate=100000"}
	g := startGatewayd(t, w.ns, flags...)
	var ids []string
	for i := range 104 {
		ids = append(ids, enqueueAsync(t, g.url, keys[0], i))
	}
	deadline := time.Now().Add(30 * time.Second)
	for model.heldCalls() < 4 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := model.heldCalls(); n != 4 {
		t.Fatalf("%d requests running before the kill, want 4", n)
	}
	status, m := asyncCall(t, http.MethodGet, g.url+"/models/m/production/async_queue_status", keys[0], nil)
	if status != http.StatusOK || m["num_queued_requests"] != 100.0 || m["num_in_progress_requests"] != 4.0 {
		t.Fatalf("before the kill: %d %v", status, m)
	}
	g.signal(syscall.SIGKILL)
	model.release()
	g = startGatewayd(t, w.ns, flags...)
	waitDrained(t, g.url, keys[0], 60*time.Second)
	checkAllSucceeded(t, g.url, keys, ids, model)
	// The 4 cut by the kill ran again; the others ran once.
	model.mu.Lock()
	defer model.mu.Unlock()
	again := 0
	for _, n := range model.ran {
		if n > 1 {
			again++
		}
	}
	if again != 4 {
		t.Fatalf("%d inputs ran more than once, want the 4 that the kill cut", again)
	}
}

// TestAsyncRedisReplicaKilledMidRun: two gatewayd processes share Redis; one is killed with SIGKILL mid-run.
// Nothing is lost, every request runs at least once, and no request ever runs twice at the same time.
func TestAsyncRedisReplicaKilledMidRun(t *testing.T) {
	rs := redistest.Start(t)
	model := newAsyncModel(t, false, 20*time.Millisecond)
	w, keys := asyncWorkspace(t, model, 8)
	flags := []string{"--store=redis", "--redis-url=" + rs.URL(), "--async-lease=2s", "--async-predict-rate=100000"}
	a, b := startGatewayd(t, w.ns, flags...), startGatewayd(t, w.ns, flags...)
	var ids []string
	for i := range 100 {
		url := a.url
		if i%2 == 1 {
			url = b.url
		}
		ids = append(ids, enqueueAsync(t, url, keys[0], i))
	}
	// Kill b once some requests have run, while others run and wait.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		model.mu.Lock()
		n := len(model.ran)
		model.mu.Unlock()
		if n >= 20 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.signal(syscall.SIGKILL)
	waitDrained(t, a.url, keys[0], 60*time.Second)
	checkAllSucceeded(t, a.url, keys, ids, model)
}

// TestAsyncSIGTERMPutsRunningBack: a graceful stop cuts the running requests and puts them back in the queue at
// once. The lease is an hour, so only that (not a lease expiry) lets the restarted gatewayd run them.
func TestAsyncSIGTERMPutsRunningBack(t *testing.T) {
	model := newAsyncModel(t, true, 0)
	w, keys := asyncWorkspace(t, model, 2)
	flags := []string{"--store=embedded", "--state-dir=" + t.TempDir(), "--async-lease=1h", "--async-predict-rate=100000"}
	g := startGatewayd(t, w.ns, flags...)
	var ids []string
	for i := range 10 {
		ids = append(ids, enqueueAsync(t, g.url, keys[0], i))
	}
	deadline := time.Now().Add(30 * time.Second)
	for model.heldCalls() < 4 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	g.signal(syscall.SIGTERM)
	model.release()
	g = startGatewayd(t, w.ns, flags...)
	waitDrained(t, g.url, keys[0], 30*time.Second)
	checkAllSucceeded(t, g.url, keys, ids, model)
}
