package concurrency

import (
	"encoding/json"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/modelgate/modelgate/api/stats"
)

func find(s stats.Stats, ns, id string) (stats.Deployment, bool) {
	for _, d := range s.Deployments {
		if d.Namespace == ns && d.DeploymentID == id {
			return d, true
		}
	}
	return stats.Deployment{}, false
}

// TestPeakSpansAWindow: a burst that starts and ends between two reads is reported by the next read, and by
// no read after the window that follows it.
func TestPeakSpansAWindow(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	tr := New(clk, 2*time.Second)
	steady := tr.Begin("ws", "steady")
	var burst []func()
	for range 5 {
		burst = append(burst, tr.Begin("ws", "bursty"))
	}
	for _, done := range burst {
		done()
	}
	clk.Step(2 * time.Second)
	for i, want := range []struct{ inFlight, peak int64 }{
		{0, 5}, // the read after the burst's window sees it, as the previous window's peak
		{0, 0}, // and the read a window later has forgotten it
		{0, 0},
	} {
		d, ok := find(tr.Stats(), "ws", "bursty")
		if want.peak == 0 {
			if ok {
				t.Errorf("read %d: bursty still reported: %+v", i, d)
			}
		} else if !ok || d.InFlight != want.inFlight || d.Peak != want.peak {
			t.Errorf("read %d: bursty = %+v (found %v), want in_flight %d peak %d", i, d, ok, want.inFlight, want.peak)
		}
		if d, ok := find(tr.Stats(), "ws", "steady"); !ok || d.InFlight != 1 || d.Peak != 1 {
			t.Errorf("read %d: steady = %+v (found %v), want in_flight 1 peak 1", i, d, ok)
		}
		clk.Step(2 * time.Second)
	}
	steady()
	clk.Step(time.Minute)
	// Nobody read for many windows: the old peak is not reported as recent.
	if s := tr.Stats(); len(s.Deployments) != 0 {
		t.Errorf("idle tracker reports %+v", s.Deployments)
	}
}

// TestReadsWithinAWindowDoNotRoll: a second reader within the same window does not shorten the first one's.
func TestReadsWithinAWindowDoNotRoll(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	tr := New(clk, 2*time.Second)
	tr.Begin("ws", "d")()
	clk.Step(2 * time.Second)
	for i := range 3 {
		if d, ok := find(tr.Stats(), "ws", "d"); !ok || d.Peak != 1 {
			t.Fatalf("read %d in one window: %+v (found %v), want peak 1", i, d, ok)
		}
		clk.Step(500 * time.Millisecond)
	}
}

// TestConcurrentCalls: many goroutines beginning and ending calls leave the count exact, and the peak at least
// what was in flight at once.
func TestConcurrentCalls(t *testing.T) {
	tr := New(nil, time.Hour)
	var wg sync.WaitGroup
	start := make(chan struct{})
	release := make(chan struct{})
	for range 64 {
		wg.Go(func() {
			<-start
			done := tr.Begin("ws", "d")
			<-release
			done()
		})
	}
	close(start)
	for {
		if d, _ := find(tr.Stats(), "ws", "d"); d.InFlight == 64 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	d, _ := find(tr.Stats(), "ws", "d")
	if d.InFlight != 0 || d.Peak != 64 {
		t.Fatalf("after 64 calls: %+v, want in_flight 0 peak 64", d)
	}
}

// TestNilTracker: handlers built without a tracker count nothing and do not fail.
func TestNilTracker(t *testing.T) {
	var tr *Tracker
	tr.Begin("ws", "d")()
	if s := tr.Stats(); len(s.Deployments) != 0 {
		t.Fatalf("nil tracker reports %+v", s)
	}
}

// TestServeHTTP: the endpoint answers the documented JSON over a real socket.
func TestServeHTTP(t *testing.T) {
	tr := New(nil, 0)
	done := tr.Begin("team-a", "llama-v2")
	defer done()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+stats.Path, tr)
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	resp, err := http.Get("http://" + ln.Addr().String() + stats.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"window_seconds": 2.0, "deployments": []any{map[string]any{
		"namespace": "team-a", "deployment_id": "llama-v2", "in_flight": 1.0, "peak": 1.0}}}
	got, _ := json.Marshal(raw)
	exp, _ := json.Marshal(want)
	if string(got) != string(exp) || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s = %s (%s), want %s", stats.Path, got, resp.Header.Get("Content-Type"), exp)
	}
}

// BenchmarkBegin is the hot-path cost of counting one call, from many goroutines on one deployment.
func BenchmarkBegin(b *testing.B) {
	tr := New(nil, 0)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tr.Begin("ws", "d")()
		}
	})
}

// BenchmarkBeginSerial is the same cost from one goroutine: no contention on the counter's cache line.
func BenchmarkBeginSerial(b *testing.B) {
	tr := New(nil, 0)
	b.ReportAllocs()
	for b.Loop() {
		tr.Begin("ws", "d")()
	}
}

// TestQueuedCallsAreDemandButNotSync: an async call counts toward the deployment's in-flight and peak (the
// autoscaler scales for it) but not among the sync calls that take async slots.
func TestQueuedCallsAreDemandButNotSync(t *testing.T) {
	tr := New(clocktesting.NewFakeClock(time.Unix(1_000_000, 0)), 2*time.Second)
	doneSync := tr.Begin("ws", "d")
	doneQueued := []func(){tr.BeginQueued("ws", "d"), tr.BeginQueued("ws", "d")}
	if got := tr.SyncInFlight("ws", "d"); got != 1 {
		t.Fatalf("SyncInFlight = %d, want 1 (async calls are not sync)", got)
	}
	d, ok := find(tr.Stats(), "ws", "d")
	if !ok || d.InFlight != 3 || d.Peak != 3 {
		t.Fatalf("stats = %+v (found %v), want in_flight 3 and peak 3: async calls are demand", d, ok)
	}
	for _, done := range doneQueued {
		done()
	}
	doneSync()
	if got := tr.SyncInFlight("ws", "d"); got != 0 {
		t.Fatalf("SyncInFlight after done = %d, want 0", got)
	}
	if got := tr.SyncInFlight("ws", "never-called"); got != 0 {
		t.Fatalf("SyncInFlight of an unknown deployment = %d, want 0", got)
	}
	if d, _ := find(tr.Stats(), "ws", "d"); d.InFlight != 0 {
		t.Fatalf("in_flight after done = %d, want 0", d.InFlight)
	}
}

// TestCallTakesASlotOnceInHand: a sync call is demand from BeginCall, and takes an async slot (SyncInFlight) only
// from InHand until Done; an InHand after Done (a body read that ends after the call) counts nothing.
func TestCallTakesASlotOnceInHand(t *testing.T) {
	tr := New(clocktesting.NewFakeClock(time.Unix(1_000_000, 0)), 2*time.Second)
	c := tr.BeginCall("ws", "d")
	if d, _ := find(tr.Stats(), "ws", "d"); d.InFlight != 1 || tr.SyncInFlight("ws", "d") != 0 {
		t.Fatalf("before its body: in_flight %d, sync %d; want 1, 0", d.InFlight, tr.SyncInFlight("ws", "d"))
	}
	c.InHand()
	c.InHand()
	if got := tr.SyncInFlight("ws", "d"); got != 1 {
		t.Fatalf("body in hand: sync %d, want 1", got)
	}
	c.Done()
	c.InHand()
	c.Done()
	if d, _ := find(tr.Stats(), "ws", "d"); d.InFlight != 0 || tr.SyncInFlight("ws", "d") != 0 {
		t.Fatalf("after done: in_flight %d, sync %d; want 0, 0", d.InFlight, tr.SyncInFlight("ws", "d"))
	}
	var none *Tracker
	none.BeginCall("ws", "d").InHand()
}
