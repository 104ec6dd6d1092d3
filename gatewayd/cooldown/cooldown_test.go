package cooldown

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func newTarget(t *testing.T) (*Registry, *Target) {
	t.Helper()
	r, err := New(prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return r, r.Target(Name{Key: "ws/ep/a", Workspace: "ws", Slug: "chat", TargetName: "a"})
}

// TestCooldown: the rules of docs/routing.md "Cooldown", one step each.
func TestCooldown(t *testing.T) {
	_, tg := newTarget(t)
	p := Policy{Failures: 3, Duration: 30 * time.Second}
	now := time.Unix(1_000_000, 0)
	tg.Record(Unreachable, now, p, 0)
	tg.Record(Timeout, now, p, 0)
	if tg.Cooling(now) || tg.Failures() != 2 {
		t.Fatalf("two failures of three: cooling %v, failures %d", tg.Cooling(now), tg.Failures())
	}
	tg.Record(OK, now, p, 0)
	if tg.Failures() != 0 {
		t.Fatalf("a success does not reset the count: %d", tg.Failures())
	}
	// Three in a row take it out for the duration.
	for range 3 {
		tg.Record(Status, now, p, 0)
	}
	if !tg.Cooling(now) || !tg.Cooling(now.Add(29*time.Second)) || tg.Cooling(now.Add(30*time.Second)) {
		t.Fatalf("after 3 failures: cooling until %v, want %v", tg.Until(), now.Add(30*time.Second))
	}
	// A canceled try blames nobody.
	later := now.Add(time.Minute)
	for range 5 {
		tg.Record(Canceled, later, p, 0)
	}
	if tg.Cooling(later) || tg.Failures() != 0 {
		t.Fatalf("canceled tries counted: cooling %v failures %d", tg.Cooling(later), tg.Failures())
	}
	// An upstream 429's Retry-After takes it out at once for at least that long, even on its first failure...
	tg.Record(Status, later, p, 90*time.Second)
	if !tg.Cooling(later.Add(89*time.Second)) || tg.Cooling(later.Add(90*time.Second)) {
		t.Fatalf("Retry-After 90s: until %v", tg.Until())
	}
	// ... and a shorter cooldown never brings it back earlier.
	tg.Record(Status, later, p, 0)
	tg.Record(Status, later, p, 0)
	if !tg.Cooling(later.Add(89 * time.Second)) {
		t.Fatalf("a later, shorter cooldown shortened the Retry-After: until %v", tg.Until())
	}
	// A success while cooling (every target was out, so it was tried) brings it back at once.
	tg.Record(OK, later, p, 0)
	if tg.Cooling(later) {
		t.Fatal("a success left the target cooling")
	}
}

// TestRecentAndSeries: the last hour's tries by outcome, and the two series.
func TestRecentAndSeries(t *testing.T) {
	r, tg := newTarget(t)
	p := Policy{Failures: 1, Duration: time.Minute}
	now := time.Now()
	old := now.Add(-2 * time.Hour)
	tg.Record(OK, old, p, 0)
	tg.Record(OK, now.Add(-30*time.Minute), p, 0)
	tg.Record(OK, now, p, 0)
	tg.Record(Status, now, p, 0)
	got := Counts(tg.Recent(now))
	if got["ok"] != 2 || got["status"] != 1 || got["timeout"] != 0 {
		t.Fatalf("recent %v, want ok 2 status 1 (the try of two hours ago left out)", got)
	}
	if n := testutil.ToFloat64(r.tries.WithLabelValues("ws", "chat", "a", "ok")); n != 3 {
		t.Errorf("tries ok = %v, want 3", n)
	}
	want := `
# HELP modelgate_upstream_target_up 1 while an Endpoint target is in rotation on this replica, 0 while it is cooling down, by workspace, slug and target name.
# TYPE modelgate_upstream_target_up gauge
modelgate_upstream_target_up{slug="chat",target="a",workspace="ws"} 0
`
	if err := testutil.CollectAndCompare(upCollector{r}, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if r.Lookup("ws/ep/a") != tg || r.Lookup("ws/ep/b") != nil {
		t.Error("Lookup does not find the target by its key alone")
	}
}
