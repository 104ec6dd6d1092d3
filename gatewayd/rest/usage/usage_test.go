package usage_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/modelgate/modelgate/api/ids"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/billing"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/gatewayd/rest/usage"
	"github.com/modelgate/modelgate/gatewayd/state/redistest"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// TestPerBucket: how a limit of each unit is drawn on a bucket of one minute and of half an hour.
func TestPerBucket(t *testing.T) {
	for _, c := range []struct {
		unit  limits.Unit
		width time.Duration
		want  int64
	}{
		{limits.Second, time.Minute, 120}, {limits.Second, 30 * time.Minute, 3600},
		{limits.Minute, time.Minute, 2}, {limits.Minute, 30 * time.Minute, 60},
		{limits.Day, time.Minute, 2}, {limits.Day, 30 * time.Minute, 2},
	} {
		if got := usage.PerBucket(2, c.unit, c.width); got != c.want {
			t.Errorf("PerBucket(2, %s, %s) = %d, want %d", c.unit, c.width, got, c.want)
		}
	}
}

// TestSpanAndBucketize: an hour is the 60 minutes ending with the one that holds now, a day the 48 half-hours
// ending with the one that holds now; minutes outside are left out and each slug gets every bucket.
func TestSpanAndBucketize(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 44, 30, 0, time.UTC)
	hour, _ := usage.ParseWindow("")
	day, _ := usage.ParseWindow("24h")
	if start, n := usage.Span(hour, now); !start.Equal(time.Date(2026, 11, 25, 11, 45, 0, 0, time.UTC)) || n != 60 {
		t.Errorf("Span(1h) = %s, %d", start, n)
	}
	start, n := usage.Span(day, now)
	if !start.Equal(time.Date(2026, 11, 24, 13, 0, 0, 0, time.UTC)) || n != 48 {
		t.Errorf("Span(24h) = %s, %d", start, n)
	}
	c := func(r int64) billing.Counters {
		return billing.Counters{Requests: r, Throttled: 1, InputTokens: 2 * r, OutputTokens: r}
	}
	got := usage.Bucketize([]billing.UsageMinute{
		{Minute: start.Add(-time.Minute), Slug: "a", Counters: c(100)}, // before the window
		{Minute: start, Slug: "a", Counters: c(1)},
		{Minute: start.Add(29 * time.Minute), Slug: "a", Counters: c(2)},
		{Minute: start.Add(30 * time.Minute), Slug: "a", Counters: c(4)},
		{Minute: now.Truncate(time.Minute), Slug: "b", Counters: c(8)},
	}, start, day.Bucket, n)
	if len(got) != 3 || len(got["a"]) != 48 || len(got["b"]) != 48 || len(got[""]) != 48 {
		t.Fatalf("series %v", got)
	}
	if a := got["a"]; a[0].Counters != (billing.Counters{Requests: 3, Throttled: 2, InputTokens: 6, OutputTokens: 3}) ||
		a[1].Counters != c(4) || a[0].Start != "2026-11-24T13:00:00Z" || a[1].Start != "2026-11-24T13:30:00Z" {
		t.Errorf("a = %+v %+v", a[0], a[1])
	}
	if b := got["b"]; b[47].Counters != c(8) || b[47].Start != "2026-11-25T12:30:00Z" || b[46].Requests != 0 {
		t.Errorf("b's last bucket = %+v", b[47])
	}
}

// TestUsageRoute: GET /v1/gateway/usage answers, from the rollup of each store a deployment runs (bbolt; Redis
// standalone, Sentinel and Cluster), the calls, 429s
// and tokens per slug and bucket of a group or of the workspace, with the group's effective limits scaled onto
// the bucket; a bad window is refused naming the field, an unknown group is 404.
func TestUsageRoute(t *testing.T) {
	t.Run("bolt", func(t *testing.T) {
		db, err := bolt.Open(filepath.Join(t.TempDir(), "b.db"), 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		testRoute(t, billing.NewBolt(db))
	})
	t.Run("redis", func(t *testing.T) {
		redistest.Each(t, func(t *testing.T, d *redistest.Deployment) { testRoute(t, billing.NewRedis(d.Client(), "")) })
	})
}

func testRoute(t *testing.T, store billing.Store) {
	snap := gatewaytest.Snapshot("ws", gatewayv1.LimitEnforcement("CASCADING"), []gatewaytest.Group{
		{ID: "root", Models: []gatewayv1.ModelConfig{{Slug: "a", RateLimits: []gatewayv1.Limit{{Type: "REQUEST", Unit: "MINUTE", Threshold: 5}}}}},
		{ID: "leaf", Parent: "root", Models: []gatewayv1.ModelConfig{{Slug: "a",
			RateLimits:  []gatewayv1.Limit{{Type: "REQUEST", Unit: "SECOND", Threshold: 1}},
			UsageLimits: []gatewayv1.Limit{{Type: "TOKEN", Unit: "DAY", Threshold: 1000}}}}},
	})
	ns, err := view.Build(snap, 1, "x", limits.NewMemory(), nil)
	if err != nil {
		t.Fatal(err)
	}
	v := view.Empty().With(ns)
	now := time.Date(2026, 11, 25, 12, 0, 30, 0, time.UTC)
	ev := func(group, slug string, status int, at time.Time, in, out int64) billing.Record {
		return billing.Record{Namespace: "ws", Event: billing.Event{IdempotencyKey: ids.New(ids.BillingEvent), Timestamp: at,
			GroupID: group, ModelSlug: slug, StatusCode: status, Tokens: billing.Tokens{InputTokens: in, OutputTokens: out}}}
	}
	if err := store.Append(context.Background(), []billing.Record{
		ev("leaf", "a", 200, now, 10, 5),
		ev("leaf", "a", 200, now.Add(-40*time.Second), 20, 5),
		ev("leaf", "a", 429, now.Add(-35*time.Second), 0, 0),
		ev("leaf", "a", 200, now.Add(-2*time.Minute), 1, 1),
		ev("leaf", "a", 200, now.Add(-3*time.Hour), 7, 7), // in the day, not the hour
		ev("root", "a", 200, now, 3, 3),
		ev("root", "gone", 200, now, 1, 1), // a slug no longer in the group's models
	}); err != nil {
		t.Fatal(err)
	}
	h := usage.Handler(store, func() *view.View { return v }, func() time.Time { return now })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h(w, r, "ws") }))
	defer srv.Close()
	get := func(query string) (int, usage.Answer, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/?"+query, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var raw json.RawMessage
		_ = json.NewDecoder(resp.Body).Decode(&raw)
		var a usage.Answer
		var m map[string]any
		_ = json.Unmarshal(raw, &a)
		_ = json.Unmarshal(raw, &m)
		return resp.StatusCode, a, m
	}

	code, a, _ := get("group_id=leaf")
	if code != 200 || a.Window != "1h" || a.BucketSeconds != 60 || a.Start != "2026-11-25T11:01:00Z" || a.End != "2026-11-25T12:01:00Z" ||
		a.GroupID == nil || *a.GroupID != "leaf" || len(a.Series) != 1 {
		t.Fatalf("group leaf, hour: %d %+v", code, a)
	}
	s := a.Series[0]
	if s.Slug != "a" || len(s.Buckets) != 60 {
		t.Fatalf("series %+v", s)
	}
	if last := s.Buckets[59]; last.Start != "2026-11-25T12:00:00Z" || last.Counters != (billing.Counters{Requests: 1, InputTokens: 10, OutputTokens: 5}) {
		t.Errorf("the minute holding now: %+v", last)
	}
	if b := s.Buckets[58]; b.Counters != (billing.Counters{Requests: 2, Throttled: 1, InputTokens: 20, OutputTokens: 5}) {
		t.Errorf("the minute before: %+v", b)
	}
	if s.Totals != (billing.Counters{Requests: 4, Throttled: 1, InputTokens: 31, OutputTokens: 11}) {
		t.Errorf("hour totals %+v", s.Totals)
	}
	wantLimits := []usage.Limit{
		{Type: "REQUEST", Unit: "SECOND", Threshold: 1, SourceGroupID: "leaf", PerBucket: 60},
		{Type: "TOKEN", Unit: "DAY", Threshold: 1000, SourceGroupID: "leaf", PerBucket: 1000},
		{Type: "REQUEST", Unit: "MINUTE", Threshold: 5, SourceGroupID: "root", PerBucket: 5},
	}
	if !slices.Equal(s.Limits, wantLimits) {
		t.Errorf("limits\n got %+v\nwant %+v", s.Limits, wantLimits)
	}

	_, a, _ = get("group_id=leaf&window=24h")
	if a.BucketSeconds != 1800 || len(a.Series) != 1 || len(a.Series[0].Buckets) != 48 || a.Series[0].Totals.Requests != 5 ||
		a.Series[0].Buckets[41].Requests != 1 || a.Series[0].Limits[2].PerBucket != 150 {
		t.Errorf("group leaf, day: %+v", a)
	}

	// The workspace: every group's calls together, per slug, with no limit (limits belong to groups).
	_, a, m := get("")
	if a.GroupID != nil || m["group_id"] != nil || len(a.Series) != 2 {
		t.Fatalf("workspace: %+v", a)
	}
	if a.Series[0].Slug != "a" || a.Series[0].Totals.Requests != 5 || len(a.Series[0].Limits) != 0 ||
		a.Series[1].Slug != "gone" || a.Series[1].Totals.Requests != 1 {
		t.Errorf("workspace series %+v", a.Series)
	}
	if _, a, _ = get("slug=gone"); len(a.Series) != 1 || a.Series[0].Slug != "gone" {
		t.Errorf("slug=gone: %+v", a.Series)
	}
	// A group's slug with no calls still has its series, all zero, with its limits.
	if _, a, _ = get("group_id=root&slug=a&window=24h"); len(a.Series) != 1 || a.Series[0].Totals.Requests != 1 || len(a.Series[0].Limits) != 1 {
		t.Errorf("root, a: %+v", a.Series)
	}

	code, _, m = get("window=2h")
	detail, _ := m["detail"].([]any)
	if code != 400 || len(detail) != 1 || detail[0].(map[string]any)["field"] != "window" {
		t.Errorf("window=2h: %d %v", code, m)
	}
	if code, _, m = get("group_id=nope"); code != 404 || m["error_code"] != "not_found" {
		t.Errorf("group_id=nope: %d %v", code, m)
	}
	// A parameter the route reads once is refused when given twice, naming it (docs/rest-api.md "Errors").
	for q, field := range map[string]string{"window=1h&window=24h": "window", "group_id=leaf&group_id=root": "group_id", "slug=a&slug=gone": "slug"} {
		code, _, m = get(q)
		detail, _ := m["detail"].([]any)
		if code != 400 || len(detail) != 1 || detail[0].(map[string]any)["field"] != field {
			t.Errorf("%s: %d %v %v, want 400 naming %s", q, code, m["error_code"], m["detail"], field)
		}
	}
}
