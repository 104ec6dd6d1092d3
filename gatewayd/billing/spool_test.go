package billing

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

// errorLog gathers what a Recorder reports.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) add(err error) { l.mu.Lock(); l.errs = append(l.errs, err); l.mu.Unlock() }

func (l *errorLog) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.errs, func(e error) bool { return strings.Contains(e.Error(), s) })
}

func eventKeys(t *testing.T, s Store, ns string) []string {
	t.Helper()
	evs, _, err := s.List(context.Background(), ns, Query{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, e := range evs {
		keys = append(keys, e.IdempotencyKey)
	}
	slices.Sort(keys)
	return keys
}

// TestRecorderSpoolsWhatRedisRefusesAtShutdown stops Redis, records events, and closes the Recorder: the
// events go to the spool file instead of being lost. A Recorder started with the same spool after Redis is
// back writes every one of them once, and removes the spool.
func TestRecorderSpoolsWhatRedisRefusesAtShutdown(t *testing.T) {
	srv := redistest.Start(t)
	store := NewRedis(srv.Client(), "spooltest")
	spool := filepath.Join(t.TempDir(), "billing-spool.jsonl")
	var log errorLog

	srv.Kill()
	rec := NewRecorder(store, RecorderOptions{Interval: 5 * time.Millisecond, Spool: spool, OnError: log.add})
	want := records("ns", 25, true)
	for _, r := range want {
		rec.Record(r)
	}
	rec.Close()
	if !log.contains("spooled 25 billing events") {
		t.Fatalf("the Recorder did not report spooling 25 events; it reported %v", log.errs)
	}
	if back, err := readSpool(spool); err != nil || len(back) != 25 {
		t.Fatalf("spool holds %d events (err %v), want 25", len(back), err)
	}

	// A second shutdown while Redis is still down keeps the same events, without duplicating them.
	rec = NewRecorder(store, RecorderOptions{Interval: 5 * time.Millisecond, Spool: spool, OnError: log.add})
	rec.Record(records("ns2", 1, false)[0])
	rec.Close()
	if back, err := readSpool(spool); err != nil || len(back) != 26 {
		t.Fatalf("spool holds %d events after a second failed shutdown (err %v), want 26", len(back), err)
	}

	srv.Restart()
	// The store's own client must reach Redis again before the next Recorder starts: after the failed dials of
	// the outage, go-redis's pool redials only about once a second, which can outlast the five closing attempts
	// 5 ms apart below (in gatewayd they span a second, and a shutdown in that window spools again).
	for i := 0; store.client.Ping(context.Background()).Err() != nil; i++ {
		if i == 250 {
			t.Fatal("the store's client never reached the restarted Redis")
		}
		time.Sleep(20 * time.Millisecond)
	}
	rec = NewRecorder(store, RecorderOptions{Interval: 5 * time.Millisecond, Spool: spool, OnError: log.add})
	rec.Close()
	var wantKeys []string
	for _, r := range want {
		wantKeys = append(wantKeys, r.Event.IdempotencyKey)
	}
	if got := eventKeys(t, store, "ns"); !slices.Equal(got, wantKeys) {
		t.Fatalf("events in Redis after the restart = %v, want %v", got, wantKeys)
	}
	if got := eventKeys(t, store, "ns2"); len(got) != 1 {
		t.Fatalf("events of ns2 = %v, want the one recorded during the second outage", got)
	}
	pending, err := store.Pending(context.Background(), "ns", 100)
	if err != nil || len(pending) != 25 {
		t.Fatalf("outbox of ns holds %d entries (err %v), want the 25 spooled events that asked for delivery", len(pending), err)
	}
	if _, err := os.Stat(spool); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the spool is still there after its events were written: %v", err)
	}
}

// TestRecorderMovesAnUnreadableSpoolAside: a spool that does not parse is neither replayed nor deleted; it is
// kept next to the path for an operator, and reported.
func TestRecorderMovesAnUnreadableSpoolAside(t *testing.T) {
	spool := filepath.Join(t.TempDir(), "billing-spool.jsonl")
	garbage := []byte("{\"Namespace\":\"ns\"}\nnot json at all\n")
	if err := os.WriteFile(spool, garbage, 0o600); err != nil {
		t.Fatal(err)
	}
	var log errorLog
	rec := NewRecorder(openBolt(t), RecorderOptions{Spool: spool, OnError: log.add})
	rec.Close()
	if !log.contains("failed to read the billing spool") {
		t.Fatalf("the unreadable spool was not reported; reports: %v", log.errs)
	}
	kept, err := os.ReadFile(spool + ".unreadable")
	if err != nil || !bytes.Equal(kept, garbage) {
		t.Fatalf("the unreadable spool was not kept aside unchanged (err %v)", err)
	}
}
