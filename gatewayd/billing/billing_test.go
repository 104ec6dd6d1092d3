package billing

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func openBolt(t *testing.T) *Bolt {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "b.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return NewBolt(db)
}

var t0 = time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)

func records(ns string, n int, deliver bool) []Record {
	var out []Record
	for i := range n {
		out = append(out, Record{Namespace: ns, Deliver: deliver, Event: Event{
			IdempotencyKey: fmt.Sprintf("evt_%s_%03d", ns, i), Timestamp: t0.Add(time.Duration(i) * time.Second),
			ExternalEntityID: []string{"a", "b"}[i%2], APIKeyPrefix: "mgk_0000000000" + []string{"aa", "bb"}[i%2],
		}})
	}
	return out
}

// TestBoltListPagesFiltersAndWindows: pages are in time order, filters apply before the page is cut, the
// window is [start, end), and namespaces never mix.
func TestBoltListPagesFiltersAndWindows(t *testing.T) {
	s := openBolt(t)
	ctx := context.Background()
	// Out of order across appends: the listing still comes back in time order.
	recs := records("ns", 20, false)
	if err := s.Append(ctx, recs[10:]); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, append(recs[:10], records("other", 5, false)...)); err != nil {
		t.Fatal(err)
	}
	var got []Event
	q := Query{Limit: 3, ExternalEntityIDs: []string{"a"}}
	for range 10 {
		page, next, err := s.List(ctx, "ns", q)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, page...)
		if next == "" {
			break
		}
		q.Cursor = next
	}
	if len(got) != 10 {
		t.Fatalf("listed %d events of entity a, want 10", len(got))
	}
	for i, e := range got {
		if want := fmt.Sprintf("evt_ns_%03d", 2*i); e.IdempotencyKey != want {
			t.Fatalf("event %d is %s, want %s", i, e.IdempotencyKey, want)
		}
	}
	page, _, _ := s.List(ctx, "ns", Query{Start: t0.Add(5 * time.Second), End: t0.Add(8 * time.Second), APIKeyPrefixes: []string{"mgk_0000000000bb"}})
	if len(page) != 2 || page[0].IdempotencyKey != "evt_ns_005" || page[1].IdempotencyKey != "evt_ns_007" {
		t.Fatalf("window [5s, 8s) of key bb = %+v, want events 5 and 7 (6 is another key, 8 is past the end)", page)
	}
	if err := s.Prune(ctx, t0.Add(15*time.Second)); err != nil {
		t.Fatal(err)
	}
	if page, _, _ := s.List(ctx, "ns", Query{}); len(page) != 5 {
		t.Fatalf("after pruning before 15s, %d events left, want 5", len(page))
	}
}

// TestDelivererRetriesWithBackoffAndAcks: a failing receiver keeps the outbox; once it answers 2xx, every
// event arrives and the outbox is empty.
func TestDelivererRetriesWithBackoffAndAcks(t *testing.T) {
	withStores(t, testDelivererRetriesWithBackoffAndAcks)
}

func testDelivererRetriesWithBackoffAndAcks(t *testing.T, s Store) {
	ctx := context.Background()
	if err := s.Append(ctx, append(records("ns", 7, true), records("ns2", 3, false)...)); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	fail, got := true, 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		got++
	}))
	defer srv.Close()
	now := t0
	d := NewDeliverer(s, func() map[string]Target {
		return map[string]Target{"ns": {URL: srv.URL, Secret: func(context.Context) (string, error) { return "s", nil }}}
	}, DelivererOptions{BatchSize: 3, MinBackoff: time.Second, Now: func() time.Time { return now }})
	if n := d.Once(ctx); n != 0 {
		t.Fatalf("delivered %d to a failing receiver", n)
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	if n := d.Once(ctx); n != 0 {
		t.Fatalf("delivered %d during the backoff", n)
	}
	now = now.Add(time.Second)
	total := 0
	for range 5 {
		total += d.Once(ctx)
	}
	if total != 7 || got != 3 {
		t.Fatalf("delivered %d events in %d POSTs, want 7 in 3 batches of at most 3", total, got)
	}
	if p, _ := s.Pending(ctx, "ns", 10); len(p) != 0 {
		t.Fatalf("%d entries left in the outbox after delivery", len(p))
	}
	if p, _ := s.Pending(ctx, "ns2", 10); len(p) != 0 {
		t.Fatalf("events recorded without a webhook entered the outbox: %d", len(p))
	}
}
