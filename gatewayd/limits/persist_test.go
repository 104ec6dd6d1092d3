package limits

import (
	"context"
	"encoding/binary"
	"errors"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

type fakeNow struct{ t time.Time }

func (f *fakeNow) now() time.Time { return f.t }

// openEmbedded opens the bbolt file at path as gatewayd/state does and the store over it; closeEmbedded closes
// both, store first.
func openEmbedded(t *testing.T, path string, clock *fakeNow, interval time.Duration) *Embedded {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEmbedded(db, EmbeddedOptions{FlushInterval: interval, Now: clock.now})
	if err != nil {
		_ = db.Close()
		t.Fatal(err)
	}
	return e
}

func closeEmbedded(e *Embedded) error { return errors.Join(e.Close(), e.db.Close()) }

// crash stops e as a SIGKILL would: no final flush.
func (e *Embedded) crash() {
	e.halt()
	_ = e.db.Close()
}

func usagePlan(t *testing.T, e *Embedded, threshold int64) *Plan {
	return bound(t, e.Memory, lim("g", "s", Request, Day, threshold), lim("g", "s", Token, Day, 1<<40), lim("g", "s", Request, Minute, 1<<40))
}

func admitN(t *testing.T, e *Embedded, p *Plan, n int, now time.Time) int {
	t.Helper()
	admitted := 0
	for range n {
		if admit(t, e.Memory, p, now).Allowed {
			admitted++
			_ = e.Settle(context.Background(), p, Charge{Tokens: 7}, now)
		}
	}
	return admitted
}

// TestEmbeddedGracefulRestartKeepsDayCounters: after Close and reopen, DAY counters equal what was admitted
// and settled, and the threshold keeps counting from there. Rolling windows start over.
func TestEmbeddedGracefulRestartKeepsDayCounters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	clock := &fakeNow{t0}
	e := openEmbedded(t, path, clock, -1)
	p := usagePlan(t, e, 100)
	if got := admitN(t, e, p, 60, t0); got != 60 {
		t.Fatalf("admitted %d of 60 below the threshold", got)
	}
	if err := closeEmbedded(e); err != nil {
		t.Fatal(err)
	}
	e = openEmbedded(t, path, clock, -1)
	defer func() { _ = closeEmbedded(e) }()
	p = usagePlan(t, e, 100)
	if got := e.Usage(p.Limits[0].Key, t0); got != 60 {
		t.Fatalf("REQUEST DAY after restart = %d, want 60", got)
	}
	if got := e.Usage(p.Limits[1].Key, t0); got != 60*7 {
		t.Fatalf("TOKEN DAY after restart = %d, want %d", got, 60*7)
	}
	if got := e.Usage(p.Limits[2].Key, t0); got != 0 {
		t.Fatalf("REQUEST MINUTE after restart = %d, want 0: rolling windows are not persisted", got)
	}
	if got := admitN(t, e, p, 100, t0); got != 40 {
		t.Fatalf("admitted %d after restart, want the 40 left of 100", got)
	}
}

// TestEmbeddedCrashLosesAtMostOneInterval: without the final flush, what was admitted after the last flush is
// lost and nothing before it.
func TestEmbeddedCrashLosesAtMostOneInterval(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	clock := &fakeNow{t0}
	e := openEmbedded(t, path, clock, -1)
	p := usagePlan(t, e, 1000)
	admitN(t, e, p, 30, t0)
	if err := e.Flush(); err != nil { // the periodic flush
		t.Fatal(err)
	}
	admitN(t, e, p, 20, t0) // admitted within the interval that the crash cuts short
	e.crash()
	e = openEmbedded(t, path, clock, -1)
	defer func() { _ = closeEmbedded(e) }()
	if got := e.Usage(p.Limits[0].Key, t0); got != 30 {
		t.Fatalf("REQUEST DAY after a crash = %d, want 30 (the last flush)", got)
	}
}

// TestEmbeddedFlushesInBackground: with a flush interval, counters reach the file without any Flush call.
func TestEmbeddedFlushesInBackground(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	clock := &fakeNow{t0}
	e := openEmbedded(t, path, clock, 10*time.Millisecond)
	defer e.crash()
	p := usagePlan(t, e, 1000)
	admitN(t, e, p, 5, t0)
	id := bucketID("ns", "g", "s", Request)
	for range 500 {
		var n uint64
		_ = e.db.View(func(tx *bolt.Tx) error {
			if b := tx.Bucket(calendars[0].bucket); b != nil {
				if v := b.Get(id); len(v) == 8 {
					n = binary.BigEndian.Uint64(v)
				}
			}
			return nil
		})
		if n == 5 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the background flush never wrote the counter")
}

// TestEmbeddedDayRollover: a file from an earlier UTC day restores nothing, and a flush on a new day drops
// the old day's counters.
func TestEmbeddedDayRollover(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	clock := &fakeNow{time.Date(2026, 3, 14, 23, 59, 0, 0, time.UTC)}
	e := openEmbedded(t, path, clock, -1)
	p := usagePlan(t, e, 100)
	admitN(t, e, p, 10, clock.t)
	if err := closeEmbedded(e); err != nil {
		t.Fatal(err)
	}
	clock.t = clock.t.Add(2 * time.Minute) // 00:01 the next day
	e = openEmbedded(t, path, clock, -1)
	p = usagePlan(t, e, 100)
	if got := e.Usage(p.Limits[0].Key, clock.t); got != 0 {
		t.Fatalf("REQUEST DAY on a new day = %d, want 0", got)
	}
	admitN(t, e, p, 3, clock.t)
	if err := closeEmbedded(e); err != nil {
		t.Fatal(err)
	}
	e = openEmbedded(t, path, clock, -1)
	defer func() { _ = closeEmbedded(e) }()
	p = usagePlan(t, e, 100)
	if got := e.Usage(p.Limits[0].Key, clock.t); got != 3 {
		t.Fatalf("REQUEST DAY after a restart on the new day = %d, want 3", got)
	}
}

// TestEmbeddedReleaseForgetsTheGroup: a released group's cells leave memory, and its DAY counters leave the file
// at the next flush, so a restart does not bring them back; another group's counters stay.
func TestEmbeddedReleaseForgetsTheGroup(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	clock := &fakeNow{t0}
	e := openEmbedded(t, path, clock, -1)
	gone := usagePlan(t, e, 100)
	kept := bound(t, e.Memory, lim("h", "s", Request, Day, 100))
	admitN(t, e, gone, 5, t0)
	admit(t, e.Memory, kept, t0)
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	e.Release("ns", []string{"g"})
	if got := e.Cells(); got != 1 {
		t.Fatalf("%d cells after releasing g, want 1 (h's)", got)
	}
	if err := closeEmbedded(e); err != nil {
		t.Fatal(err)
	}
	e = openEmbedded(t, path, clock, -1)
	defer func() { _ = closeEmbedded(e) }()
	if got := e.Cells(); got != 1 {
		t.Fatalf("%d cells restored, want 1 (h's): the released group came back from the file", got)
	}
	if got := e.Usage(kept.Limits[0].Key, t0); got != 1 {
		t.Fatalf("h's REQUEST DAY after restart = %d, want 1", got)
	}
}
