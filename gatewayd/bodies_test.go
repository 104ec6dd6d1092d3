package gatewayd_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgate/modelgate/api/stats"
)

// patience bounds how long a slow-body test waits for gatewayd: far past the body deadline the tests configure,
// so a pass never depends on timing, while a connection gatewayd holds fails the test instead of hanging it.
const patience = 20 * time.Second

// stalled is what gatewayd did with a request whose body stalled: the answer's status (0 when it closed the
// connection without one) and its error_code.
type stalled struct {
	status int
	code   string
}

// sendStalled sends, on a real connection, a request's head declaring a body of length bytes (chunked when
// length is negative), then start, then nothing more; it returns what gatewayd answered, and fails the test when
// gatewayd neither answers nor closes the connection within patience. Safe to call from several goroutines.
func sendStalled(t *testing.T, baseURL, method, path, auth string, length int, start string) stalled {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(baseURL, "http://"))
	if err != nil {
		t.Error(err)
		return stalled{}
	}
	defer conn.Close()
	head := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n", method, path)
	if auth != "" {
		head += "Authorization: " + auth + "\r\n"
	}
	if length >= 0 {
		head += fmt.Sprintf("Content-Length: %d\r\n\r\n%s", length, start)
	} else {
		head += fmt.Sprintf("Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(start), start)
	}
	if _, err := io.WriteString(conn, head); err != nil {
		t.Error(err)
		return stalled{}
	}
	_ = conn.SetReadDeadline(time.Now().Add(patience))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Errorf("%s %s (auth %v): gatewayd held the connection for %s", method, path, auth != "", patience)
		}
		return stalled{}
	}
	defer resp.Body.Close()
	var env struct {
		Code string `json:"error_code"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&env)
	return stalled{status: resp.StatusCode, code: env.Code}
}

// bodiless are the routes that take no body beyond GET and DELETE: a body sent to them is never read, and their
// answer does not wait for it.
var bodiless = regexp.MustCompile(`/wake$|/logout$`)

// wildcard is a path wildcard of a mux pattern ({name} or {name...}).
var wildcard = regexp.MustCompile(`\{([a-z_]+)(\.\.\.)?\}`)

// TestEveryRouteHonoursTheBodyDeadline walks every route gatewayd registered (Gateway.Routes, the mux's own list)
// and sends each a body that stalls, without credentials and with a key that may manage the workspace: each
// answers or closes the connection (never holds it past the body's deadline), and a route that takes a body never
// answers 2xx for one that did not arrive (docs/security.md "Request bodies").
func TestEveryRouteHonoursTheBodyDeadline(t *testing.T) {
	f := newModelFixtureOpts(t, fixtureOpts{async: true, bodyReadTimeout: 300 * time.Millisecond})
	values := map[string]string{"model_id": "sentiment", "deployment_id": "v1", "env_name": "production", "group_id": "root",
		"chain_id": "chain", "request_id": "req", "build": f.ns + ".build", "image_name": "image", "prefix": "mgk_prefix",
		"api_key_prefix": "mgk_prefix", "endpoint_id": "echo", "team_id": "team"}
	routes := f.gw.Routes()
	if len(routes) < 40 {
		t.Fatalf("only %d routes registered: %q", len(routes), routes)
	}
	var wg sync.WaitGroup
	for _, pattern := range routes {
		method, path, ok := strings.Cut(pattern, " ")
		if !ok {
			method, path = http.MethodPost, pattern
		}
		path = wildcard.ReplaceAllStringFunc(path, func(w string) string {
			name := wildcard.FindStringSubmatch(w)[1]
			if v, ok := values[name]; ok {
				return v
			}
			return "x"
		})
		if strings.HasSuffix(path, "/") {
			path += "unrouted"
		}
		for _, auth := range []string{"", "Bearer " + f.keys["manage"]} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got := sendStalled(t, f.url, method, path, auth, 1000, `{"a":`)
				if got.status >= 200 && got.status < 300 && method != http.MethodGet && method != http.MethodDelete && !bodiless.MatchString(path) {
					t.Errorf("%s (%s, auth %v): %d for a body that never arrived", pattern, path, auth != "", got.status)
				}
			}()
		}
	}
	wg.Wait()
}

// TestStalledBodyGetsNoSuccess: a predict call whose body stalls is answered 408 timeout once the body's deadline
// passes, and the model is never called; the same holds on the OpenAI and management routes, and a call without
// credentials gets its 401 at once, its body never read (issue 29, items 1 and 2).
func TestStalledBodyGetsNoSuccess(t *testing.T) {
	f := newModelFixtureOpts(t, fixtureOpts{bodyReadTimeout: 300 * time.Millisecond})
	f.served.Store("")
	invoke, manage := "Bearer "+f.keys["invoke"], "Bearer "+f.keys["manage"]
	for _, tc := range []struct {
		name, path, auth string
		want             int
	}{
		{"predict", "/models/sentiment/production/predict", invoke, http.StatusRequestTimeout},
		{"predict without a key", "/models/sentiment/production/predict", "", http.StatusUnauthorized},
		{"chat completions", "/v1/chat/completions", invoke, http.StatusRequestTimeout},
		{"management", "/v1/gateway/groups", manage, http.StatusRequestTimeout},
		{"management without a key", "/v1/gateway/groups", "", http.StatusUnauthorized},
	} {
		got := sendStalled(t, f.url, http.MethodPost, tc.path, tc.auth, 1000, `{"text":`)
		if got.status != tc.want {
			t.Errorf("%s: %+v, want %d", tc.name, got, tc.want)
		}
	}
	if s := f.served.Load().(string); s != "" {
		t.Errorf("the model server %s was called for a body that never arrived", s)
	}
}

// TestPredictBodyOverCap: a predict body over the cap is 413 payload_too_large: at once, with nothing forwarded,
// when its Content-Length says so, and when it streams past the cap, with the model's call cut before its body
// was complete (issue 29, item 3).
func TestPredictBodyOverCap(t *testing.T) {
	const max = 256 << 10
	f := newModelFixtureOpts(t, fixtureOpts{maxBodyBytes: max})
	var calls, whole atomic.Int64
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if _, err := io.ReadAll(r.Body); err == nil {
			whole.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(model.Close)
	f.deployment("v1").URL = model.URL
	f.publish()
	path, auth := "/models/sentiment/production/predict", "Bearer "+f.keys["invoke"]

	if got := sendStalled(t, f.url, http.MethodPost, path, auth, 40000000, ""); got.status != http.StatusRequestEntityTooLarge || got.code != "payload_too_large" {
		t.Errorf("declared 40000000 bytes: %+v, want 413 payload_too_large", got)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("the model was called %d times for a body declared over the cap", n)
	}
	if got := sendStalled(t, f.url, http.MethodPost, path, auth, -1, strings.Repeat("a", max+1)); got.status != http.StatusRequestEntityTooLarge || got.code != "payload_too_large" {
		t.Errorf("chunked past the cap: %+v, want 413 payload_too_large", got)
	}
	if n := whole.Load(); n != 0 {
		t.Errorf("the model read %d whole bodies past the cap, want its call cut", n)
	}
	// Within the cap the call goes through.
	if code, _, _, _ := f.predict(path, auth, "application/json", []byte(`{"a":1}`)); code != http.StatusOK {
		t.Errorf("a body within the cap: %d", code)
	}
}

// TestSlowSyncCallHoldsNoAsyncSlot: a sync predict whose body is still arriving does not take the only dispatch
// slot of a url deployment, so a queued async request runs meanwhile (issue 29, item 10).
func TestSlowSyncCallHoldsNoAsyncSlot(t *testing.T) {
	f := newModelFixtureOpts(t, fixtureOpts{async: true})
	// v1 has one replica and a concurrency target of 1: one slot. The slow call's body stays half-sent until the
	// test ends (its deadline is gatewayd's default minute).
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "POST /models/sentiment/production/predict HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"text\":", f.keys["invoke"]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(patience)
	for f.inFlight("v1") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the slow call never reached the deployment")
		}
		time.Sleep(10 * time.Millisecond)
	}
	r := f.post("/models/sentiment/production/async_predict", "Bearer "+f.keys["invoke"], map[string]any{"model_input": map[string]any{"text": "hi"}})
	var accepted struct {
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal(r.body, &accepted); r.status != http.StatusCreated || err != nil {
		t.Fatalf("async_predict: %d %s", r.status, r.body)
	}
	var status struct {
		Status string `json:"status"`
	}
	for status.Status != "SUCCEEDED" {
		if time.Now().After(deadline) {
			t.Fatalf("the async request is %s while a slow sync call's body is still arriving, want SUCCEEDED", status.Status)
		}
		time.Sleep(20 * time.Millisecond)
		f.clock.SetTime(f.clock.Now().Add(time.Second))
		req, _ := http.NewRequest(http.MethodGet, f.url+"/models/sentiment/async_request/"+accepted.RequestID, nil)
		req.Header.Set("Authorization", "Bearer "+f.keys["invoke"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = json.NewDecoder(resp.Body).Decode(&status)
		resp.Body.Close()
	}
}

// inFlight is the calls in flight to deployment id that gatewayd reports to the autoscaler (api/stats).
func (f *fixture) inFlight(id string) int64 {
	f.t.Helper()
	resp, err := http.Get(f.metricsURL + stats.Path)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	var st stats.Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		f.t.Fatal(err)
	}
	for _, d := range st.Deployments {
		if d.DeploymentID == id {
			return d.InFlight
		}
	}
	return 0
}
