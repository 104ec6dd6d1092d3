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

	"github.com/modelgate/modelgate/gatewayd/billing"
	"github.com/modelgate/modelgate/gatewayd/httperr"
)

func TestCountsThe429sOfTheLastHourPerGroupAndSlug(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "b.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	store := billing.NewBolt(db)
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	var recs []billing.Record
	add := func(ns, group, slug string, status int, at time.Time) {
		recs = append(recs, billing.Record{Namespace: ns, Event: billing.Event{
			IdempotencyKey: billing.NewID("evt_"), RequestID: billing.NewID("req_"), Timestamp: at,
			GroupID: group, ExternalEntityID: "ext-" + group, ModelSlug: slug, StatusCode: status,
		}})
	}
	add("ws", "g1", "a", 429, now.Add(-time.Minute))
	add("ws", "g1", "a", 429, now.Add(-59*time.Minute))
	add("ws", "g1", "a", 200, now.Add(-time.Minute))
	add("ws", "g1", "b", 429, now.Add(-2*time.Minute))
	add("ws", "g2", "a", 429, now.Add(-3*time.Minute))
	add("ws", "g1", "a", 429, now.Add(-61*time.Minute)) // before the window
	add("other", "g1", "a", 429, now.Add(-time.Minute)) // another workspace
	if err := store.Append(context.Background(), recs); err != nil {
		t.Fatal(err)
	}

	caller := func(r *http.Request) (string, *httperr.Error) {
		if r.Header.Get("Authorization") == "" {
			return "", httperr.New(http.StatusUnauthorized, httperr.CodeUnauthorized, "Missing API key.", nil)
		}
		return "ws", nil
	}
	srv := httptest.NewServer(Handler(store, caller, func() time.Time { return now }))
	defer srv.Close()
	get := func(path string, auth bool) (int, Answer) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if auth {
			req.Header.Set("Authorization", "Bearer k")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a Answer
		_ = json.NewDecoder(resp.Body).Decode(&a)
		return resp.StatusCode, a
	}

	code, a := get("/", true)
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	want := []Count{{"g1", "ext-g1", "a", 2}, {"g1", "ext-g1", "b", 1}, {"g2", "ext-g2", "a", 1}}
	if len(a.Items) != len(want) {
		t.Fatalf("items %+v, want %+v", a.Items, want)
	}
	for i := range want {
		if a.Items[i] != want[i] {
			t.Errorf("item %d = %+v, want %+v", i, a.Items[i], want[i])
		}
	}
	if a.Start != "2026-11-25T11:00:00Z" || a.End != "2026-11-25T12:00:00Z" || a.Truncated {
		t.Errorf("window %s..%s truncated=%v", a.Start, a.End, a.Truncated)
	}
	_, a = get("/?group_id=g2", true)
	if len(a.Items) != 1 || a.Items[0] != (Count{"g2", "ext-g2", "a", 1}) {
		t.Errorf("group_id=g2: %+v", a.Items)
	}
	if code, _ := get("/", false); code != http.StatusUnauthorized {
		t.Errorf("without a key: %d", code)
	}
}
