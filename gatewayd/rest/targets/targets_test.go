package targets_test

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd"
	"github.com/modelgate/modelgate/gatewayd/cooldown"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/gatewayd/rest/targets"
	"github.com/modelgate/modelgate/gatewayd/tryplan"
	"github.com/modelgate/modelgate/gatewayd/view"
	"github.com/modelgate/modelgate/test/kubetest"
	"github.com/modelgate/modelgate/test/upstream"
)

// kube starts envtest on first use, so the unit tests of this package do not pay for it.
var kube kubetest.Lazy

func TestMain(m *testing.M) { kube.Main(m) }

// TestDescribe: a target no call tried is up with every outcome counted 0; one past its failures is cooling until
// the time the cooldown holds, in UTC; one whose cooldown has passed is up again with its tries still counted.
func TestDescribe(t *testing.T) {
	reg, err := cooldown.New(prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 29, 9, 0, 0, 0, time.FixedZone("CET", 3600))
	policy := tryplan.NewPolicy(3, nil, []int32{503, 429}, 2, 10*time.Second)
	ep := &view.Endpoint{ID: "ep-1", Slug: "s", Policy: policy,
		Targets: []view.Target{{Name: "a", Provider: "OPENAI", BaseURL: "http://a", Key: "ns/ep-1/a"},
			{Name: "b", Provider: "OPENAI", BaseURL: "http://b", Key: "ns/ep-1/b"},
			{Name: "c", Provider: "OPENAI", BaseURL: "http://c", Key: "ns/ep-1/c"}},
		Plan: []tryplan.Target{{Weight: 3, Priority: 0}, {Weight: 1, Priority: 1}, {Weight: 1, Priority: 0}}}
	cp := cooldown.Policy{Failures: policy.Failures, Duration: policy.Cooldown}
	b := reg.Target(cooldown.Name{Key: "ns/ep-1/b", Workspace: "ns", Slug: "s", TargetName: "b"})
	b.Record(cooldown.OK, now.Add(-time.Minute), cp, 0)
	b.Record(cooldown.Status, now.Add(-2*time.Second), cp, 0)
	b.Record(cooldown.Unreachable, now.Add(-time.Second), cp, 0)
	c := reg.Target(cooldown.Name{Key: "ns/ep-1/c", Workspace: "ns", Slug: "s", TargetName: "c"})
	c.Record(cooldown.Timeout, now.Add(-30*time.Second), cp, 0)
	c.Record(cooldown.Timeout, now.Add(-29*time.Second), cp, 0)
	c.Record(cooldown.Canceled, now.Add(-28*time.Second), cp, 0)

	a := targets.Describe(ep, reg, "gw-0", now)
	if a.EndpointID != "ep-1" || a.Slug != "s" || a.Replica != "gw-0" || a.Retry.Attempts != 2 ||
		!slices.Equal(a.Retry.OnStatus, []int{429, 503}) || a.Cooldown.Failures != 2 || a.Cooldown.DurationMS != 10000 {
		t.Fatalf("endpoint: %+v", a)
	}
	want := []struct {
		state string
		until string
		fails int
		tries map[string]int64
	}{
		{"up", "", 0, map[string]int64{"ok": 0, "status": 0, "unreachable": 0, "timeout": 0, "credentials": 0, "canceled": 0}},
		{"cooling", "2026-11-29T08:00:09Z", 0, map[string]int64{"ok": 1, "status": 1, "unreachable": 1, "timeout": 0, "credentials": 0, "canceled": 0}},
		{"up", "", 0, map[string]int64{"ok": 0, "status": 0, "unreachable": 0, "timeout": 2, "credentials": 0, "canceled": 1}},
	}
	for i, w := range want {
		got := a.Targets[i]
		until := ""
		if got.CoolingUntil != nil {
			until = *got.CoolingUntil
		}
		if got.State != w.state || until != w.until || got.ConsecutiveFailures != w.fails || !maps.Equal(got.TriesLastHour, w.tries) {
			t.Errorf("target %s: %s until %q, %d failures, tries %v; want %s until %q, %d, %v",
				got.Name, got.State, until, got.ConsecutiveFailures, got.TriesLastHour, w.state, w.until, w.fails, w.tries)
		}
	}
	if got := a.Targets[0]; got.Weight != 3 || got.Priority != 0 || a.Targets[1].Priority != 1 || got.BaseURL != "http://a" {
		t.Errorf("target a: %+v", got)
	}
}

// TestRouteShowsThisReplicasCooldown runs a real gatewayd with an Endpoint of two targets on a loopback upstream:
// target-0, tried first (priority 0), answers 503; target-1 answers. Each model call of a federated key through
// the OpenAI route fails on target-0 and is served by target-1, until target-0's third consecutive failure takes
// it out of rotation. The route shows that, as a workspace key reads it, step by step.
func TestRouteShowsThisReplicasCooldown(t *testing.T) {
	env := kube.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ns, err := gatewaytest.CreateNamespace(ctx, env.Clientset, "targets")
	if err != nil {
		t.Fatal(err)
	}
	up := upstream.New(upstream.Options{})
	t.Cleanup(up.Close)
	const slug = "pair/chat"
	snap := gatewaytest.Snapshot(ns, "INDEPENDENT", []gatewaytest.Group{{ID: "acme", Models: []gatewayv1.ModelConfig{{Slug: slug}}}})
	fedKey, rec := gatewaytest.NewKey("key-acme", "acme")
	snap.APIKeys = []snapshot.APIKey{rec}
	admin, wrec := gatewaytest.NewWorkspaceKey("admin", string(gatewayv1.KeyTypeManageAll))
	snap.WorkspaceAPIKeys = []snapshot.WorkspaceAPIKey{wrec}
	snap.Endpoints = []snapshot.Endpoint{
		{ID: "ep-pair", Slug: slug, Targets: []snapshot.Target{
			{Name: "target-0", Provider: "OPENAI", BaseURL: up.BaseURL(), TargetModel: "status-503"},
			{Name: "target-1", Provider: "OPENAI", BaseURL: up.BaseURL(), TargetModel: "echo", Weight: 2, Priority: 1}}},
		{ID: "ep-idle", Slug: "idle/chat", Targets: []snapshot.Target{{Name: "only", Provider: "OPENAI", BaseURL: up.BaseURL()}}},
	}
	// The envtest admin: the management API this route sits beside reads nothing here, and the Endpoint's targets
	// need no Secret.
	gw, err := gatewayd.New(gatewayd.Options{RESTConfig: env.Config, Namespaces: []string{ns}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	if err := gatewaytest.Publish(ctx, env.Clientset, snap, 1, 0); err != nil {
		t.Fatal(err)
	}
	stop, err := gatewaytest.Start(ctx, gw, ln, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	if err := gatewaytest.WaitVersion(gw, ns, 1, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	chat := func() {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions",
			strings.NewReader(`{"model":"`+slug+`","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Api-Key "+fedKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("chat: %d %s, want 200 from target-1", resp.StatusCode, body)
		}
	}
	read := func(id string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url+"/v1/gateway/endpoints/"+id+"/targets", nil)
		req.Header.Set("Authorization", "Bearer "+admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	answer := func(id string) targets.Answer {
		t.Helper()
		code, body := read(id)
		var a targets.Answer
		if err := json.Unmarshal(body, &a); code != http.StatusOK || err != nil || len(a.Targets) == 0 {
			t.Fatalf("GET %s targets: %d %s", id, code, body)
		}
		return a
	}

	host, _ := os.Hostname()
	a := answer("ep-idle")
	if a.Replica != host || a.Slug != "idle/chat" || a.Retry.Attempts != 0 || a.Cooldown.Failures != 3 || a.Cooldown.DurationMS != 30000 ||
		!slices.Equal(a.Retry.OnStatus, []int{429, 500, 502, 503, 504}) {
		t.Errorf("idle endpoint: %+v", a)
	}
	if got := a.Targets[0]; got.Name != "only" || got.State != targets.StateUp || got.CoolingUntil != nil || got.TriesLastHour["ok"] != 0 || len(got.TriesLastHour) != 6 {
		t.Errorf("a target no call tried: %+v", got)
	}

	chat()
	chat()
	a = answer("ep-pair")
	if a.Retry.Attempts != 1 {
		t.Errorf("two targets: %d further attempts, want 1", a.Retry.Attempts)
	}
	if t0, t1 := a.Targets[0], a.Targets[1]; t0.State != targets.StateUp || t0.ConsecutiveFailures != 2 || t0.TriesLastHour["status"] != 2 ||
		t1.State != targets.StateUp || t1.TriesLastHour["ok"] != 2 || t1.Weight != 2 || t1.Priority != 1 || t0.Weight != 1 || t0.BaseURL != up.BaseURL() {
		t.Fatalf("after two calls: %+v", a.Targets)
	}

	before := time.Now()
	chat()
	chat()
	after := time.Now()
	a = answer("ep-pair")
	t0, t1 := a.Targets[0], a.Targets[1]
	if t0.State != targets.StateCooling || t0.CoolingUntil == nil || t0.TriesLastHour["status"] != 3 || t0.ConsecutiveFailures != 0 {
		t.Fatalf("after the third failure and one more call: target-0 %+v, want cooling with 3 failed tries (the fourth call skipped it)", t0)
	}
	until, err := time.Parse(time.RFC3339Nano, *t0.CoolingUntil)
	if err != nil || until.Before(before.Add(30*time.Second)) || until.After(after.Add(30*time.Second)) {
		t.Errorf("target-0 cooling until %s, want 30 s after its third failure (%s .. %s)", *t0.CoolingUntil, before, after)
	}
	if t1.State != targets.StateUp || t1.CoolingUntil != nil || t1.TriesLastHour["ok"] != 4 {
		t.Errorf("target-1: %+v, want up with 4 ok tries", t1)
	}
	// One replica (no peers Service): its own state is the only one, and no replica went unanswered.
	if len(t0.Replicas) != 1 || t0.Replicas[0].Replica != host || t0.Replicas[0].State != targets.StateCooling ||
		a.UnansweredReplicas == nil || len(a.UnansweredReplicas) != 0 {
		t.Errorf("replicas of target-0: %+v, unanswered %v; want this replica alone", t0.Replicas, a.UnansweredReplicas)
	}

	for _, c := range []struct {
		id   string
		code int
		want string
	}{{"ep-none", http.StatusNotFound, `"error_code":"not_found"`}, {"Not_An_Id", http.StatusBadRequest, `"field":"endpoint_id"`}} {
		if code, body := read(c.id); code != c.code || !strings.Contains(string(body), c.want) {
			t.Errorf("GET %s targets: %d %s, want %d with %s", c.id, code, body, c.code, c.want)
		}
	}
}

// replica is one replica's part of the targets route: its cooldown state, its Cluster and its metrics listener
// (a loopback server answering targets.Path).
type replica struct {
	reg  *cooldown.Registry
	c    *targets.Cluster
	addr string
}

func newReplica(t *testing.T, name string, v *view.View, now time.Time, peers func(context.Context) ([]string, error)) *replica {
	t.Helper()
	reg, err := cooldown.New(prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{reg: reg}
	r.c = targets.New(targets.Options{View: func() *view.View { return v }, Cooldown: reg, Replica: name, Now: func() time.Time { return now }, Peers: peers})
	mux := http.NewServeMux()
	mux.Handle("GET "+targets.Path, r.c)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	r.addr = strings.TrimPrefix(srv.URL, "http://")
	return r
}

// record makes n tries of outcome o of the target name of Endpoint ep-1, each a second apart, ending at end.
func (r *replica) record(name string, o cooldown.Outcome, n int, end time.Time, p cooldown.Policy) {
	st := r.reg.Target(cooldown.Name{Key: "ws/ep-1/" + name, Workspace: "ws", Slug: "s", TargetName: name})
	for i := range n {
		st.Record(o, end.Add(time.Duration(i-n+1)*time.Second), p, 0)
	}
}

// TestMergesEveryReplica: the route of replica A reads the state of every replica at targets.Path on their
// loopback listeners: A's own address in the list of peers is not read twice, B's state is merged in by target
// (cooling on any is cooling, until the latest time; the most consecutive failures; tries summed, each replica's
// own state listed), C, whose view lacks the Endpoint, is left out, and a closed port is listed as unanswered.
func TestMergesEveryReplica(t *testing.T) {
	now := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	s := &snapshot.Snapshot{Namespace: "ws", Endpoints: []snapshot.Endpoint{{ID: "ep-1", Slug: "s", Targets: []snapshot.Target{
		{Name: "a", Provider: "OPENAI", BaseURL: "http://a"}, {Name: "b", Provider: "OPENAI", BaseURL: "http://b"}}}}}
	ns, err := view.Build(s, 1, "x", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	v := view.Empty().With(ns)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	var addrs []string
	a := newReplica(t, "gw-a", v, now, func(context.Context) ([]string, error) { return addrs, nil })
	b := newReplica(t, "gw-b", v, now, nil)
	c := newReplica(t, "gw-c", view.Empty(), now, nil)
	addrs = []string{a.addr, b.addr, c.addr, closedAddr}

	p := cooldown.Policy{Failures: 3, Duration: 30 * time.Second}
	a.record("a", cooldown.Unreachable, 3, now.Add(-20*time.Second), p) // out until now+10s
	b.record("a", cooldown.Status, 3, now.Add(-5*time.Second), p)       // out until now+25s
	a.record("b", cooldown.OK, 4, now, p)
	a.record("b", cooldown.Timeout, 1, now, p)
	b.record("b", cooldown.OK, 2, now.Add(-time.Minute), p)
	b.record("b", cooldown.Timeout, 2, now, p)
	c.record("b", cooldown.OK, 100, now, p) // C serves no such Endpoint: never counted

	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/gateway/endpoints/{endpoint_id}/targets", func(w http.ResponseWriter, r *http.Request) { a.c.Handler(w, r, "ws") })
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/gateway/endpoints/ep-1/targets", nil))
	var got targets.Answer
	if err := json.Unmarshal(rec.Body.Bytes(), &got); rec.Code != http.StatusOK || err != nil || len(got.Targets) != 2 {
		t.Fatalf("A's answer: %d %s", rec.Code, rec.Body)
	}
	if got.Replica != "gw-a" || !slices.Equal(got.UnansweredReplicas, []string{closedAddr}) {
		t.Errorf("replica %q, unanswered %v; want gw-a and the closed port %s", got.Replica, got.UnansweredReplicas, closedAddr)
	}
	ta, tb := got.Targets[0], got.Targets[1]
	names := func(rs []targets.ReplicaState) (out []string) {
		for _, r := range rs {
			out = append(out, r.Replica)
		}
		return out
	}
	if ta.State != targets.StateCooling || ta.CoolingUntil == nil || *ta.CoolingUntil != "2026-11-29T09:00:25Z" ||
		!slices.Equal(names(ta.Replicas), []string{"gw-a", "gw-b"}) || *ta.Replicas[0].CoolingUntil != "2026-11-29T09:00:10Z" ||
		ta.TriesLastHour["unreachable"] != 3 || ta.TriesLastHour["status"] != 3 || ta.Replicas[0].TriesLastHour["status"] != 0 {
		t.Errorf("target a: %+v %+v, want cooling until B's 09:00:25, A's own until 09:00:10, 3 unreachable and 3 status tries", ta, ta.Replicas)
	}
	if tb.State != targets.StateUp || tb.CoolingUntil != nil || tb.ConsecutiveFailures != 2 || tb.TriesLastHour["ok"] != 6 || tb.TriesLastHour["timeout"] != 3 ||
		!slices.Equal(names(tb.Replicas), []string{"gw-a", "gw-b"}) || tb.Replicas[0].ConsecutiveFailures != 1 || tb.Replicas[1].TriesLastHour["ok"] != 2 {
		t.Errorf("target b: %+v %+v, want up, 2 consecutive failures (B's), 6 ok and 3 timeouts", tb, tb.Replicas)
	}

	// The internal route refuses a call that does not name both, as the request log's does.
	rec = httptest.NewRecorder()
	a.c.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, targets.Path+"?namespace=ws", nil))
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `"field":"endpoint_id"`) {
		t.Errorf("%s without endpoint_id: %d %s", targets.Path, rec.Code, rec.Body)
	}
}
