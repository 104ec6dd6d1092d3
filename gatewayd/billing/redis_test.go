package billing

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

// TestRedisClusterRecorderWritesEachEventOnceThroughAFailover: a cluster primary dies (SIGKILL) while the
// Recorder writes events of two workspaces, one on the dead primary and one on a live one. The live one's
// events are written at once and never again; the dead one's are retried until its replica takes over, then
// written once. Nothing is lost and nothing is duplicated.
func TestRedisClusterRecorderWritesEachEventOnceThroughAFailover(t *testing.T) {
	d := redistest.StartDeployment(t, redistest.Cluster)
	store := NewRedis(d.Client(), "")
	ctx := context.Background()
	// Two namespaces on two primaries.
	dead := "ns"
	victim := d.PrimaryOf(ctx, store.events(dead))
	live := ""
	for _, ns := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		if d.PrimaryOf(ctx, store.events(ns)) != victim {
			live = ns
			break
		}
	}
	if live == "" {
		t.Fatal("no namespace lives on another primary")
	}
	victim.Kill()
	var log errorLog
	rec := NewRecorder(store, RecorderOptions{Interval: 20 * time.Millisecond, OnError: log.add})
	want := append(records(dead, 10, true), records(live, 10, true)...)
	for _, r := range want {
		rec.Record(r)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(eventKeysOrNone(store, dead)) < 10 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	rec.Close()
	if !log.contains("were not written") {
		t.Errorf("the Recorder never met a partial write; it reported %v", log.errs)
	}
	for _, ns := range []string{dead, live} {
		var keys []string
		for _, r := range want {
			if r.Namespace == ns {
				keys = append(keys, r.Event.IdempotencyKey)
			}
		}
		if got := eventKeys(t, store, ns); !slices.Equal(got, keys) {
			t.Errorf("events of %s after the failover: %d %v, want each of its %d once", ns, len(got), got, len(keys))
		}
		if p, err := store.Pending(ctx, ns, 100); err != nil || len(p) != 10 {
			t.Errorf("outbox of %s holds %d entries (%v), want 10", ns, len(p), err)
		}
	}
}

// eventKeysOrNone lists the idempotency keys of ns's events, none while the store fails.
func eventKeysOrNone(s Store, ns string) []string {
	evs, _, err := s.List(context.Background(), ns, Query{Limit: 1000})
	if err != nil {
		return nil
	}
	var keys []string
	for _, e := range evs {
		keys = append(keys, e.IdempotencyKey)
	}
	return keys
}

// TestPartlyWrittenUnwraps: a partial write's error is the store's failure, as errors.Is sees it.
func TestPartlyWrittenUnwraps(t *testing.T) {
	err := error(&PartlyWritten{Unwritten: records("ns", 2, false), Err: context.DeadlineExceeded})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v does not unwrap to its cause", err)
	}
}
