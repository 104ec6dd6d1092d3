package billing

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/modelgate/modelgate/gatewayd/state/redisclient"
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

// TestRedisWaitOnAppend: with WAIT for one replica, on Sentinel and on Cluster, a batch's events and outbox entries
// are on the replica of their namespace's primary when Append answers; while that replica is stuck (SIGSTOP), a
// batch is still written after the timeout, stays on the primary, and is counted short. On a cluster this shows
// the WAIT went to the primary that took the transaction.
func TestRedisWaitOnAppend(t *testing.T) {
	for _, mode := range []string{redistest.Sentinel, redistest.Cluster} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			d := redistest.StartDeployment(t, mode)
			w := redisclient.NewWait(1, 200*time.Millisecond, logr.Discard())
			s := NewRedis(d.Client(), "").WithWait(w)
			primary := d.PrimaryOf(ctx, s.events("ns"))
			replica := d.ReplicaOf(ctx, primary)
			reader := replica.Reader()
			for i, r := range records("ns", 10, true) {
				if err := s.Append(ctx, []Record{r}); err != nil {
					t.Fatal(err)
				}
				if n := reader.XLen(ctx, s.events("ns")).Val(); n != int64(i+1) {
					t.Fatalf("batch %d was answered with %d events on the replica, want %d", i, n, i+1)
				}
				if n := reader.XLen(ctx, s.outbox("ns")).Val(); n != int64(i+1) {
					t.Fatalf("batch %d was answered with %d outbox entries on the replica, want %d", i, n, i+1)
				}
			}
			if n := w.Shorts("billing_events"); n != 0 {
				t.Fatalf("%.0f short WAITs with the replica up, want 0", n)
			}
			replica.Pause()
			late := records("late", 1, true)[0]
			late.Namespace = "ns"
			if err := s.Append(ctx, []Record{late}); err != nil {
				t.Fatalf("a batch whose replica did not acknowledge failed: %v; want it written", err)
			}
			if n := w.Shorts("billing_events"); n < 1 {
				t.Errorf("%.0f short WAITs with the replica stuck, want at least 1", n)
			}
			replica.Resume()
			if got := eventKeys(t, s, "ns"); len(got) != 11 {
				t.Errorf("%d events kept, want the 11 written", len(got))
			}
		})
	}
}

// TestRedisFailoverUnderAppends kills (SIGKILL) the primary of a workspace's events while eight writers append
// batches of one event, on Sentinel and on Cluster, and keeps appending until the replica has taken over. It
// reports the appends that failed meanwhile and the events (and outbox entries) that were written, answered,
// and lost. Without WAIT, what the replica had not received at the kill is gone; with WAIT for one replica
// (--redis-wait-replicas=1) every answered event was on the replica, and the test fails if one is lost (run it
// with -v; docs/operations.md, "Redis failover").
func TestRedisFailoverUnderAppends(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a primary and waits for the failover")
	}
	redistest.EachFailover(t, func(t *testing.T, d *redistest.Deployment, w *redisclient.Wait) {
		s := NewRedis(d.Client(), "").WithWait(w)
		victim := d.PrimaryOf(context.Background(), s.events("ns"))
		writes := redistest.KillUnderWrites(t, victim, func(ctx context.Context, id string) error {
			return s.Append(ctx, []Record{{Namespace: "ns", Deliver: true, Event: Event{IdempotencyKey: id, Timestamp: t0}}})
		})
		// Right after a failover a pooled connection may still point at the dead primary: read until answered.
		var evs []Event
		var pending []Pending
		var err error
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if evs, _, err = s.List(context.Background(), "ns", Query{Limit: 100_000}); err == nil {
				if pending, err = s.Pending(context.Background(), "ns", 100_000); err == nil {
					break
				}
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		kept := map[string]bool{}
		for _, e := range evs {
			kept[e.IdempotencyKey] = true
		}
		owed := map[string]bool{}
		for _, p := range pending {
			owed[p.Event.IdempotencyKey] = true
		}
		var lost, lostOutbox int
		for _, id := range writes.Accepted {
			if !kept[id] {
				lost++
			}
			if !owed[id] {
				lostOutbox++
			}
		}
		t.Logf("%s, wait=%t: %d appends failed during the failover; %d written, %d events and %d outbox entries of them lost; %.0f short WAITs",
			d.Mode, w != nil, len(writes.Refused), len(writes.Accepted), lost, lostOutbox, w.Shorts("billing_events"))
		if w != nil && lost+lostOutbox > 0 {
			t.Errorf("%d events and %d outbox entries lost with WAIT for one replica", lost, lostOutbox)
		}
	})
}

// BenchmarkRedisAppendWait is the cost of WAIT for one replica on a batch of one event, one writer at a time, on
// Sentinel and on Cluster (docs/benchmarks.md, "Redis deployments").
func BenchmarkRedisAppendWait(b *testing.B) {
	for _, mode := range []string{redistest.Sentinel, redistest.Cluster} {
		for _, replicas := range []int{0, 1} {
			b.Run(fmt.Sprintf("%s/wait=%d", mode, replicas), func(b *testing.B) {
				s := NewRedis(redistest.StartDeployment(b, mode).Client(), "").
					WithWait(redisclient.NewWait(replicas, time.Second, logr.Discard()))
				ctx := context.Background()
				recs := records("ns", 1, true)
				for b.Loop() {
					if err := s.Append(ctx, recs); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
