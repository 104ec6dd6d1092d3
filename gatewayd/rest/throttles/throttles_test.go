package throttles

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/modelgate/modelgate/api/ids"
	"github.com/modelgate/modelgate/gatewayd/billing"
	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

// withStores runs fn on each billing store a deployment runs: bbolt (embedded), and Redis standalone, Sentinel and
// Cluster on real redis-server processes.
func withStores(t *testing.T, fn func(t *testing.T, store billing.Store)) {
	t.Run("bolt", func(t *testing.T) {
		db, err := bolt.Open(filepath.Join(t.TempDir(), "b.db"), 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		fn(t, billing.NewBolt(db))
	})
	t.Run("redis", func(t *testing.T) {
		redistest.Each(t, func(t *testing.T, d *redistest.Deployment) { fn(t, billing.NewRedis(d.Client(), "")) })
	})
}

var (
	rootMinute = &billing.Refusal{By: billing.RefusedByGroup, Type: "REQUEST", Unit: "MINUTE", SourceGroup: "root"}
	ownDay     = &billing.Refusal{By: billing.RefusedByGroup, Type: "REQUEST", Unit: "DAY", SourceGroup: "g1"}
	tier       = &billing.Refusal{By: billing.RefusedByTier, Type: "TOKEN", Unit: "MINUTE"}
)

// TestCountsThe429sOfTheLastHourPerGroupSlugAndLimit: the rollup written with the events counts each 429 under
// the limit that refused it, over the minutes of the last hour, per workspace.
func TestCountsThe429sOfTheLastHourPerGroupSlugAndLimit(t *testing.T) {
	withStores(t, testCounts)
}

func testCounts(t *testing.T, store billing.Store) {
	now := time.Date(2026, 11, 25, 12, 0, 30, 0, time.UTC)
	var recs []billing.Record
	add := func(ns, group, slug string, status int, at time.Time, why *billing.Refusal) {
		recs = append(recs, billing.Record{Namespace: ns, Refusal: why, Event: billing.Event{
			IdempotencyKey: ids.New(ids.BillingEvent), RequestID: ids.New(ids.Request), Timestamp: at,
			GroupID: group, ExternalEntityID: "ext-" + group, ModelSlug: slug, StatusCode: status,
		}})
	}
	add("ws", "g1", "a", 429, now.Add(-time.Minute), rootMinute)
	add("ws", "g1", "a", 429, now.Add(-59*time.Minute), rootMinute)
	add("ws", "g1", "a", 429, now.Add(-2*time.Minute), ownDay)
	add("ws", "g1", "a", 200, now.Add(-time.Minute), nil)
	add("ws", "g1", "b", 429, now.Add(-2*time.Minute), tier)
	add("ws", "g1", "b", 429, now.Add(-2*time.Minute), nil) // the model's own 429, say
	add("ws", "g2", "a", 429, now.Add(-3*time.Minute), rootMinute)
	add("ws", "g1", "a", 429, now.Add(-62*time.Minute), rootMinute) // before the window
	add("other", "g1", "a", 429, now.Add(-time.Minute), rootMinute) // another workspace
	if err := store.Append(context.Background(), recs); err != nil {
		t.Fatal(err)
	}

	h := Handler(store, func() time.Time { return now })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h(w, r, "ws") }))
	defer srv.Close()
	get := func(path string) (int, Answer) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a Answer
		_ = json.NewDecoder(resp.Body).Decode(&a)
		return resp.StatusCode, a
	}

	code, a := get("/")
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	want := []Count{
		{"g1", "ext-g1", "a", 1, "GROUP_LIMIT", "REQUEST", "DAY", "g1"},
		{"g1", "ext-g1", "a", 2, "GROUP_LIMIT", "REQUEST", "MINUTE", "root"},
		{"g1", "ext-g1", "b", 1, "MODEL_API_TIER", "TOKEN", "MINUTE", ""},
		{"g1", "ext-g1", "b", 1, "OTHER", "", "", ""},
		{"g2", "ext-g2", "a", 1, "GROUP_LIMIT", "REQUEST", "MINUTE", "root"},
	}
	if len(a.Items) != len(want) {
		t.Fatalf("items %+v, want %+v", a.Items, want)
	}
	for i := range want {
		if a.Items[i] != want[i] {
			t.Errorf("item %d = %+v, want %+v", i, a.Items[i], want[i])
		}
	}
	if a.Start != "2026-11-25T11:00:00Z" || a.End != "2026-11-25T12:00:30Z" || a.Truncated {
		t.Errorf("window %s..%s truncated=%v", a.Start, a.End, a.Truncated)
	}
	_, a = get("/?group_id=g2")
	if len(a.Items) != 1 || a.Items[0] != want[4] {
		t.Errorf("group_id=g2: %+v", a.Items)
	}
}

// TestRollupStaysOutOfTheEvents: the refusal feeds the rollup only; the stored event, which the webhook and GET
// /v1/gateway/events serve, keeps the pinned fields and no others.
func TestRollupStaysOutOfTheEvents(t *testing.T) {
	withStores(t, func(t *testing.T, store billing.Store) {
		at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
		rec := billing.Record{Namespace: "ws", Deliver: true, Refusal: rootMinute, Event: billing.Event{
			IdempotencyKey: "evt_1", Timestamp: at, GroupID: "g1", ModelSlug: "a", StatusCode: 429}}
		if err := store.Append(context.Background(), []billing.Record{rec}); err != nil {
			t.Fatal(err)
		}
		evs, _, err := store.List(context.Background(), "ws", billing.Query{})
		if err != nil || len(evs) != 1 {
			t.Fatalf("List = %v, %v", evs, err)
		}
		pend, err := store.Pending(context.Background(), "ws", 10)
		if err != nil || len(pend) != 1 {
			t.Fatalf("Pending = %v, %v", pend, err)
		}
		for _, e := range []billing.Event{evs[0], pend[0].Event} {
			b, _ := json.Marshal(e)
			var m map[string]any
			_ = json.Unmarshal(b, &m)
			// The 9 pinned fields of a billing event and costMicroUsd (docs/rest-api.md), and nothing of the rollup.
			if _, ok := m["costMicroUsd"]; len(m) != 10 || !ok {
				t.Errorf("event has %d fields, want the 9 pinned ones and costMicroUsd: %s", len(m), b)
			}
		}
		counts, err := store.Throttles(context.Background(), "ws", at, at)
		if err != nil || len(counts) != 1 || counts[0].Count != 1 || counts[0].SourceGroup != "root" {
			t.Errorf("Throttles = %+v, %v", counts, err)
		}
	})
}

// TestBoltRollupDropsOldMinutes: adding a counter drops the minutes older than ThrottleKeep.
func TestBoltRollupDropsOldMinutes(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "b.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	store := billing.NewBolt(db)
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	rec := func(ts time.Time) billing.Record {
		return billing.Record{Namespace: "ws", Refusal: rootMinute, Event: billing.Event{
			IdempotencyKey: ids.New(ids.BillingEvent), Timestamp: ts, GroupID: "g1", ModelSlug: "a", StatusCode: 429}}
	}
	ctx := context.Background()
	if err := store.Append(ctx, []billing.Record{rec(at)}); err != nil {
		t.Fatal(err)
	}
	if err := store.Append(ctx, []billing.Record{rec(at.Add(billing.ThrottleKeep + time.Minute))}); err != nil {
		t.Fatal(err)
	}
	counts, err := store.Throttles(ctx, "ws", at.Add(-time.Hour), at.Add(time.Hour))
	if err != nil || len(counts) != 0 {
		t.Errorf("the minute older than ThrottleKeep is still counted: %+v, %v", counts, err)
	}
}
