package gatewayd_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/billing"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
)

// faultUpstream is an OpenAI-compatible upstream on a loopback port whose answer the test sets (setMode): an
// answer naming the server, an error status, a reset connection, no answer at all, or a stream that breaks after
// its first event. It records every request it receives, in the order of a counter shared by every server of
// the test, so a call's tries can be told apart by the request id gatewayd sends with each.
type faultUpstream struct {
	name string
	srv  *httptest.Server
	mode atomic.Pointer[func() string] // the mode of each request, drawn when it arrives
	seq  *atomic.Int64
	mu   sync.Mutex
	got  []faultRequest
}

type faultRequest struct {
	seq  int64
	id   string
	mode string
	body string
}

// Modes of a faultUpstream. "status:<n>" answers n with an OpenAI error body; "429:<s>" answers 429 with
// Retry-After: s.
const (
	modeOK    = "ok"
	modeReset = "reset"
	modeHang  = "hang"
	modeBreak = "break"
)

func newFaultUpstream(t *testing.T, name string, seq *atomic.Int64) *faultUpstream {
	u := &faultUpstream{name: name, seq: seq}
	u.setMode(modeOK)
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *faultUpstream) setMode(m string)            { u.setModes(func() string { return m }) }
func (u *faultUpstream) setModes(draw func() string) { u.mode.Store(&draw) }
func (u *faultUpstream) baseURL() string             { return u.srv.URL + "/v1" }
func (u *faultUpstream) target(priority int32) snapshot.Target {
	return snapshot.Target{Name: u.name, Provider: "OPENAI", BaseURL: u.baseURL(), Priority: priority}
}

func (u *faultUpstream) requests() []faultRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]faultRequest(nil), u.got...)
}

func (u *faultUpstream) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	mode := (*u.mode.Load())()
	u.mu.Lock()
	u.got = append(u.got, faultRequest{seq: u.seq.Add(1), id: r.Header.Get("X-Request-Id"), mode: mode, body: string(body)})
	u.mu.Unlock()
	var req struct{ Stream bool }
	_ = json.Unmarshal(body, &req)
	switch {
	case mode == modeOK && !req.Stream:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":%q}}],"usage":{"prompt_tokens":2,"completion_tokens":5,"total_tokens":7}}`, u.name)
	case mode == modeOK || mode == modeBreak:
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", u.name)
		w.(http.Flusher).Flush()
		if mode == modeBreak {
			hijackAndReset(w)
			return
		}
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":5}}\n\ndata: [DONE]\n\n")
	case mode == modeReset:
		hijackAndReset(w)
	case mode == modeHang:
		<-r.Context().Done()
	case strings.HasPrefix(mode, "429:"):
		w.Header().Set("Retry-After", strings.TrimPrefix(mode, "429:"))
		writeUpstreamError(w, http.StatusTooManyRequests)
	case strings.HasPrefix(mode, "status:"):
		code, _ := strconv.Atoi(strings.TrimPrefix(mode, "status:"))
		writeUpstreamError(w, code)
	}
}

func writeUpstreamError(w http.ResponseWriter, code int) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"error":{"message":"upstream says %d","type":"server_error"}}`, code)
}

// hijackAndReset closes the connection with a TCP reset (SO_LINGER 0).
func hijackAndReset(w http.ResponseWriter) {
	conn, buf, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	_ = buf.Flush()
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// refusedURL is a loopback base URL that refuses every connection: port 1 (tcpmux), on which nothing listens
// here. A port freed by the test could be taken by another package's server meanwhile.
const refusedURL = "http://127.0.0.1:1/v1"

// ids are the request ids a server received.
func (u *faultUpstream) ids() []string {
	var out []string
	for _, r := range u.requests() {
		out = append(out, r.id)
	}
	return out
}

// content is the answering server's name, read from a chat answer.
func content(t *testing.T, r result) string {
	t.Helper()
	var v struct {
		Choices []struct{ Message struct{ Content string } }
	}
	if err := json.Unmarshal(r.body, &v); err != nil || len(v.Choices) == 0 {
		t.Fatalf("not a chat answer (%d): %s", r.status, r.body)
	}
	return v.Choices[0].Message.Content
}

// failoverFixture serves one group whose models are slugs, each routed by the Endpoint given, with billing on.
func failoverFixture(t *testing.T, store billing.Store, endpoints []snapshot.Endpoint, models []gatewayv1.ModelConfig) *fixture {
	t.Helper()
	f := newFixture(t, fixtureOpts{mode: "INDEPENDENT", groups: []gatewaytest.Group{{ID: "root", Models: models}},
		endpoints: endpoints, billing: store, upstreamTimeout: 300 * time.Millisecond})
	// Today 10:00 UTC: within the billing store's retention, which counts back from the wall clock, and far
	// from a DAY window's end.
	f.clock.SetTime(time.Now().UTC().Truncate(24 * time.Hour).Add(10 * time.Hour))
	f.publish()
	return f
}

func boltBilling(t *testing.T) *billing.Bolt {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "billing.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return billing.NewBolt(db)
}

// events waits until the workspace has n billing events and returns them by request id.
func events(t *testing.T, store billing.Store, ns string, n int) map[string]billing.Event {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := map[string]billing.Event{}
		cursor := ""
		total := 0
		for {
			page, next, err := store.List(context.Background(), ns, billing.Query{Cursor: cursor, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range page {
				if _, dup := out[e.RequestID]; dup {
					t.Fatalf("two billing events for request %s", e.RequestID)
				}
				out[e.RequestID] = e
			}
			total += len(page)
			if next == "" {
				break
			}
			cursor = next
		}
		if total >= n || time.Now().After(deadline) {
			if total != n {
				t.Errorf("%d billing events, want exactly %d", total, n)
			}
			return out
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func endpoint(slug string, targets []snapshot.Target, retry *snapshot.Retry, cool *snapshot.Cooldown) snapshot.Endpoint {
	return snapshot.Endpoint{ID: strings.ReplaceAll(slug, "/", "-"), Slug: slug, Targets: targets, Retry: retry, Cooldown: cool}
}

func attempts(n int32) *snapshot.Retry { return &snapshot.Retry{Attempts: &n} }

// never keeps a target in rotation however often it fails, to test one rule at a time.
var never = &snapshot.Cooldown{Failures: 1000}

// TestFailoverRules: each rule of docs/routing.md "Endpoints with several targets", against real sockets.
func TestFailoverRules(t *testing.T) {
	var seq atomic.Int64
	up := func(name string) *faultUpstream { return newFaultUpstream(t, name, &seq) }
	kinds := []string{"refused", modeReset, modeHang, "status:500", "status:502", "status:503", "status:504", "429:1"}
	kindA := map[string]*faultUpstream{}
	kindB := map[string]*faultUpstream{}
	var eps []snapshot.Endpoint
	var slugs []gatewayv1.ModelConfig
	add := func(slug string, e snapshot.Endpoint) {
		eps = append(eps, e)
		slugs = append(slugs, gatewayv1.ModelConfig{Slug: slug})
	}
	for _, k := range kinds {
		a, b := up("a-"+k), up("b-"+k)
		a.setMode(k)
		kindA[k], kindB[k] = a, b
		ta := a.target(0)
		if k == "refused" {
			ta.BaseURL = refusedURL
		}
		tb := b.target(1)
		tb.TargetModel = "model-of-b"
		add("kind/"+k, endpoint("kind/"+k, []snapshot.Target{ta, tb}, nil, never))
	}
	other, otherB := up("other-a"), up("other-b")
	other.setMode("status:400")
	add("other", endpoint("other", []snapshot.Target{other.target(0), otherB.target(1)}, nil, never))
	prioA, prioB, prioC := up("prio-a"), up("prio-b"), up("prio-c")
	prioA.setMode("status:503")
	prioB.setMode("status:503")
	add("prio", endpoint("prio", []snapshot.Target{prioC.target(1), prioA.target(0), prioB.target(0)}, nil, never))
	coolA, coolB := up("cool-a"), up("cool-b")
	coolA.setMode("status:503")
	add("cool", endpoint("cool", []snapshot.Target{coolA.target(0), coolB.target(1)}, nil, &snapshot.Cooldown{Failures: 2, DurationMillis: 30_000}))
	panicA, panicB := up("panic-a"), up("panic-b")
	panicA.setMode("status:503")
	panicB.setMode("status:503")
	add("panic", endpoint("panic", []snapshot.Target{panicA.target(0), panicB.target(1)}, nil, &snapshot.Cooldown{Failures: 1, DurationMillis: 30_000}))
	raA, raB := up("ra-a"), up("ra-b")
	raA.setMode("429:120")
	raB.setMode("429:7")
	add("ra", endpoint("ra", []snapshot.Target{raA.target(0), raB.target(1)}, nil, never))
	streamA, streamB := up("stream-a"), up("stream-b")
	streamA.setMode(modeBreak)
	add("stream", endpoint("stream", []snapshot.Target{streamA.target(0), streamB.target(1)}, nil, never))
	onceA, onceB := up("once-a"), up("once-b")
	onceA.setMode("status:503")
	add("once", endpoint("once", []snapshot.Target{onceA.target(0), onceB.target(1)}, nil, never))
	slugs[len(slugs)-1] = limited("once", "REQUEST", "DAY", 2)
	store := boltBilling(t)
	f := failoverFixture(t, store, eps, slugs)
	var callIDs []string // every call records one billing event
	chat := func(model string) result {
		r := f.post("/v1/chat/completions", "Api-Key "+f.keys["root"], map[string]any{
			"model": model, "messages": []any{map[string]any{"role": "user", "content": "hello world"}}, "temperature": 0.5})
		callIDs = append(callIDs, r.header.Get("X-Request-Id"))
		return r
	}

	// Rule 2: a try fails on a refused or reset connection, a timeout before the first byte, or a status of
	// onStatus, and the call moves on (rule 3) with the body gatewayd holds, rewritten for the other target.
	t.Run("each failure moves to the next target", func(t *testing.T) {
		for _, k := range kinds {
			r := chat("kind/" + k)
			if r.status != http.StatusOK || content(t, r) != "b-"+k {
				t.Errorf("%s: answered %d %s, want the second target's answer", k, r.status, r.body)
				continue
			}
			a, b := kindA[k].requests(), kindB[k].requests()
			if len(b) != 1 || (k != "refused" && len(a) != 1) {
				t.Errorf("%s: tries %d on the failing target, %d on the other; want 1 and 1", k, len(a), len(b))
				continue
			}
			if k != "refused" && (a[0].id != b[0].id || a[0].body != strings.Replace(b[0].body, `"model-of-b"`, `"kind/`+k+`"`, 1)) {
				t.Errorf("%s: the second try is not the same call: %s %q then %s %q", k, a[0].id, a[0].body, b[0].id, b[0].body)
			}
		}
	})
	// Rule 2: any other answer goes to the client as it is, with no further try.
	t.Run("a status outside onStatus is the answer", func(t *testing.T) {
		r := chat("other")
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "upstream says 400") || len(otherB.requests()) != 0 {
			t.Fatalf("answered %d %s, other target tried %d times", r.status, r.body, len(otherB.requests()))
		}
	})
	// Rule 3: the other targets of the same priority before the next priority.
	t.Run("same priority first", func(t *testing.T) {
		r := chat("prio")
		if r.status != http.StatusOK || content(t, r) != "prio-c" {
			t.Fatalf("answered %d %s", r.status, r.body)
		}
		a, b, c := prioA.requests(), prioB.requests(), prioC.requests()
		if len(a) != 1 || len(b) != 1 || len(c) != 1 || c[0].seq < a[0].seq || c[0].seq < b[0].seq {
			t.Fatalf("tries: %v %v %v; want one on each, the priority-1 target last", a, b, c)
		}
	})
	// Rule 3: a target cooling down is skipped; its failures in a row take it out, and the next calls go to
	// the other target at once.
	t.Run("a cooling target is skipped", func(t *testing.T) {
		for range 2 {
			if r := chat("cool"); r.status != http.StatusOK || content(t, r) != "cool-b" {
				t.Fatalf("answered %d %s", r.status, r.body)
			}
		}
		if n := len(coolA.requests()); n != 2 {
			t.Fatalf("failing target tried %d times in two calls, want 2", n)
		}
		coolA.setMode(modeOK)
		for range 3 {
			if r := chat("cool"); r.status != http.StatusOK || content(t, r) != "cool-b" {
				t.Fatalf("while cooling: answered %d %s", r.status, r.body)
			}
		}
		if n := len(coolA.requests()); n != 2 {
			t.Fatalf("the cooling target was tried: %d tries", n)
		}
		if up := f.metric(`modelgate_upstream_target_up{slug="cool",target="cool-a",workspace="` + f.ns + `"}`); up != 0 {
			t.Errorf("modelgate_upstream_target_up of the cooling target = %v, want 0", up)
		}
		f.clock.SetTime(f.clock.Now().Add(31 * time.Second))
		if r := chat("cool"); r.status != http.StatusOK || content(t, r) != "cool-a" {
			t.Fatalf("after the cooldown: answered %d %s, want the first target back", r.status, r.body)
		}
	})
	// Rule 3: when every target is cooling the call still tries them in plan order; a cooldown alone never fails
	// a call.
	t.Run("every target cooling is still tried", func(t *testing.T) {
		if r := chat("panic"); r.status != http.StatusServiceUnavailable {
			t.Fatalf("both failing: answered %d %s", r.status, r.body)
		}
		panicA.setMode(modeOK)
		panicB.setMode(modeOK)
		if r := chat("panic"); r.status != http.StatusOK || content(t, r) != "panic-a" {
			t.Fatalf("both cooling: answered %d %s, want the first in plan order", r.status, r.body)
		}
	})
	// Rule 3: an upstream 429's Retry-After keeps that target out at least that long, and the client gets the
	// last try's answer with its Retry-After when every try failed.
	t.Run("Retry-After", func(t *testing.T) {
		r := chat("ra")
		if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "7" || !strings.Contains(string(r.body), "upstream says 429") {
			t.Fatalf("answered %d %v %s; want the last try's 429 with its Retry-After", r.status, r.header, r.body)
		}
		raA.setMode(modeOK)
		raB.setMode(modeOK)
		f.clock.SetTime(f.clock.Now().Add(60 * time.Second)) // past the cooldown's failures count, within A's 120 s
		if r := chat("ra"); r.status != http.StatusOK || content(t, r) != "ra-b" {
			t.Fatalf("within A's Retry-After: answered %d %s", r.status, r.body)
		}
		if n := len(raA.requests()); n != 1 {
			t.Fatalf("the target was tried within its Retry-After: %d tries", n)
		}
		f.clock.SetTime(f.clock.Now().Add(61 * time.Second))
		if r := chat("ra"); r.status != http.StatusOK || content(t, r) != "ra-a" {
			t.Fatalf("after A's Retry-After: answered %d %s", r.status, r.body)
		}
	})
	// Rule 4: once a byte of a stream reached the client, no other try is made.
	t.Run("no try after a stream's first byte", func(t *testing.T) {
		body, _ := json.Marshal(map[string]any{"model": "stream", "stream": true, "messages": []any{}})
		req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/chat/completions", strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Api-Key "+f.keys["root"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		callIDs = append(callIDs, resp.Header.Get("X-Request-Id"))
		first := readSSE(t, bufio.NewReader(resp.Body))
		rest, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(first, "stream-a") || strings.Contains(string(rest), "stream-b") {
			t.Fatalf("got %d %q then %q", resp.StatusCode, first, rest)
		}
		if n := len(streamB.requests()); n != 0 {
			t.Fatalf("a second try was made after the stream began: %d", n)
		}
	})
	// Rule 1: the client's call is charged once: two calls of two tries each fit a limit of 2 requests a day,
	// and each has one billing event naming the answering target and the tries.
	t.Run("charged once", func(t *testing.T) {
		var ids []string
		for range 2 {
			r := chat("once")
			if r.status != http.StatusOK {
				t.Fatalf("answered %d %s", r.status, r.body)
			}
			ids = append(ids, r.header.Get("X-Request-Id"))
		}
		if r := chat("once"); r.status != http.StatusTooManyRequests {
			t.Fatalf("third call answered %d, want 429 at the limit of 2", r.status)
		}
		if n := len(onceA.requests()) + len(onceB.requests()); n != 4 {
			t.Fatalf("%d tries, want 4", n)
		}
		all := events(t, store, f.ns, len(callIDs))
		for _, id := range callIDs {
			if _, ok := all[id]; !ok {
				t.Errorf("no billing event for call %s", id)
			}
		}
		for _, id := range ids {
			e, ok := all[id]
			if !ok || e.Target != "once-b" || e.Provider != "OPENAI" || e.Attempts != 2 || e.Tokens.InputTokens != 2 || e.Tokens.OutputTokens != 5 {
				t.Errorf("billing event of %s: %+v", id, e)
			}
		}
	})
	// Rule 6: the tries by outcome.
	t.Run("metrics", func(t *testing.T) {
		for series, want := range map[string]float64{
			`modelgate_upstream_tries_total{outcome="status",slug="once",target="once-a",workspace="` + f.ns + `"}`:             2,
			`modelgate_upstream_tries_total{outcome="ok",slug="once",target="once-b",workspace="` + f.ns + `"}`:                 2,
			`modelgate_upstream_tries_total{outcome="unreachable",slug="kind/reset",target="a-reset",workspace="` + f.ns + `"}`: 1,
			`modelgate_upstream_tries_total{outcome="timeout",slug="kind/hang",target="a-hang",workspace="` + f.ns + `"}`:       1,
		} {
			if got := f.metric(series); got != want {
				t.Errorf("%s = %v, want %v", series, got, want)
			}
		}
	})
}

// TestFailoverChaos: three targets fail at random (a seeded draw per try: error statuses, a 429 with Retry-After,
// resets, hangs past the timeout, a 400) over 2,000 calls from four clients, while the clock moves a second per
// call so cooldowns come and go. Every call is answered by the rules, the day's request limit admits exactly its
// threshold, and every call has exactly one billing event naming its tries.
func TestFailoverChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 calls")
	}
	const calls, threshold, clients = 2000, 1900, 4
	var seq atomic.Int64
	rng := newLockedRand(42)
	// The draws: mostly answers, then the failures of rule 2, and a 400 that is an answer too.
	draws := []struct {
		mode   string
		weight int
	}{{modeOK, 45}, {"status:503", 15}, {"status:500", 5}, {"429:2", 10}, {modeReset, 10}, {modeHang, 3}, {"status:400", 2}, {"status:502", 10}}
	total := 0
	for _, d := range draws {
		total += d.weight
	}
	draw := func() string {
		n := rng.intN(total)
		for _, d := range draws {
			if n -= d.weight; n < 0 {
				return d.mode
			}
		}
		return modeOK
	}
	servers := []*faultUpstream{newFaultUpstream(t, "t0", &seq), newFaultUpstream(t, "t1", &seq), newFaultUpstream(t, "t2", &seq)}
	targets := []snapshot.Target{servers[0].target(0), servers[1].target(0), servers[2].target(1)}
	targets[0].Weight = 3
	for _, s := range servers {
		s.setModes(draw)
	}
	store := boltBilling(t)
	f := failoverFixture(t, store, []snapshot.Endpoint{endpoint("chaos", targets, nil, &snapshot.Cooldown{Failures: 2, DurationMillis: 5000})},
		[]gatewayv1.ModelConfig{limited("chaos", "REQUEST", "DAY", threshold)})

	type answer struct {
		id      string
		status  int
		content string
		retry   string
	}
	answers := make([]answer, calls)
	var next atomic.Int64
	var wg sync.WaitGroup
	var clockMu sync.Mutex
	for range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= calls {
					return
				}
				clockMu.Lock()
				f.clock.SetTime(f.clock.Now().Add(time.Second))
				clockMu.Unlock()
				r := f.post("/v1/chat/completions", "Api-Key "+f.keys["root"], map[string]any{"model": "chaos", "messages": []any{}})
				a := answer{id: r.header.Get("X-Request-Id"), status: r.status, retry: r.header.Get("Retry-After")}
				if r.status == http.StatusOK {
					a.content = content(t, r)
				}
				answers[i] = a
			}
		})
	}
	wg.Wait()

	tries := map[string][]faultRequest{}
	server := map[int64]string{}
	for _, s := range servers {
		for _, r := range s.requests() {
			tries[r.id] = append(tries[r.id], r)
			server[r.seq] = s.name
		}
	}
	failing := func(mode string) bool { return mode != modeOK && mode != "status:400" }
	admitted, refused := 0, 0
	evs := events(t, store, f.ns, calls)
	for _, a := range answers {
		ts := tries[a.id]
		slices.SortFunc(ts, func(x, y faultRequest) int { return int(x.seq - y.seq) })
		ev, ok := evs[a.id]
		if !ok {
			t.Errorf("call %s: no billing event", a.id)
			continue
		}
		if len(ts) == 0 {
			// Refused by the day's limit before any try.
			if a.status != http.StatusTooManyRequests || ev.Attempts != 0 {
				t.Errorf("call %s: no try, answered %d, event %+v", a.id, a.status, ev)
			}
			refused++
			continue
		}
		admitted++
		if len(ts) > 3 {
			t.Errorf("call %s: %d tries, at most 3", a.id, len(ts))
		}
		for _, tr := range ts[:len(ts)-1] {
			if !failing(tr.mode) {
				t.Errorf("call %s: a try answered %s and another try followed", a.id, tr.mode)
			}
		}
		last := ts[len(ts)-1]
		if failing(last.mode) && len(ts) < 3 {
			t.Errorf("call %s: its last try failed (%s) after %d tries of 3", a.id, last.mode, len(ts))
		}
		// An upstream's JSON error is relayed as it is; a reset is 502 model_unavailable, a hang 504 timeout.
		want := map[string]int{modeOK: 200, "status:400": 400, "status:503": 503, "status:500": 500, "status:502": 502,
			"429:2": 429, modeReset: 502, modeHang: 504}[last.mode]
		if a.status != want {
			t.Errorf("call %s: answered %d, its last try was %s (want %d)", a.id, a.status, last.mode, want)
		}
		if last.mode == modeOK && a.content != server[last.seq] {
			t.Errorf("call %s: answer of %q, last try on %s", a.id, a.content, server[last.seq])
		}
		if last.mode == "429:2" && a.retry != "2" {
			t.Errorf("call %s: a last 429 without its Retry-After", a.id)
		}
		if ev.Attempts != len(ts) || ev.Target != server[last.seq] || ev.Provider != "OPENAI" {
			t.Errorf("call %s: event %+v, want %d tries answered by %s", a.id, ev, len(ts), server[last.seq])
		}
	}
	if admitted != threshold || refused != calls-threshold {
		t.Errorf("%d calls admitted and %d refused; the day's limit admits exactly %d", admitted, refused, threshold)
	}
	t.Logf("%d calls: %d admitted, %d refused by the limit; tries per target %d, %d, %d", calls, admitted, refused,
		len(servers[0].requests()), len(servers[1].requests()), len(servers[2].requests()))
}

// lockedRand is a seeded random source shared by the servers' handlers.
type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newLockedRand(seed uint64) *lockedRand { return &lockedRand{r: rand.New(rand.NewPCG(seed, seed))} }

func (l *lockedRand) intN(n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.IntN(n)
}
