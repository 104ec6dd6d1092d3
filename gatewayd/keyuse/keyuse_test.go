package keyuse

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	bolt "go.etcd.io/bbolt"

	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

// TestRecorder checks every store: a use is recorded, a second use within the minute is not written, one a
// minute later is, and an older time from another replica never moves the stored time back.
func TestRecorder(t *testing.T) {
	stores := map[string]func(t *testing.T) Store{
		"memory": func(*testing.T) Store { return NewMemory() },
		"bolt": func(t *testing.T) Store {
			db, err := bolt.Open(filepath.Join(t.TempDir(), "state.db"), 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			return NewBolt(db)
		},
	}
	// Redis on each deployment gatewayd runs on: standalone, Sentinel and Cluster.
	for _, mode := range redistest.Modes {
		stores["redis-"+mode] = func(t *testing.T) Store {
			return NewRedis(redistest.StartDeployment(t, mode).Client(), "test:")
		}
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store := open(t)
			start := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
			now := start
			rec := NewRecorder(store, func() time.Time { return now }, logr.Discard())
			get := func() map[string]time.Time {
				t.Helper()
				got, err := rec.LastUsed(ctx, "ws")
				if err != nil {
					t.Fatal(err)
				}
				return got
			}
			if got := get(); len(got) != 0 {
				t.Fatalf("nothing used yet, got %v", got)
			}
			rec.Used("ws", "mgw_aaaaaaaaaaaa")
			if got := get()["mgw_aaaaaaaaaaaa"]; !got.Equal(start) {
				t.Fatalf("after a use: got %v, want %v", got, start)
			}
			now = start.Add(59 * time.Second)
			rec.Used("ws", "mgw_aaaaaaaaaaaa")
			rec.Used("ws", "mgw_bbbbbbbbbbbb")
			got := get()
			if !got["mgw_aaaaaaaaaaaa"].Equal(start) {
				t.Errorf("a use within the minute rewrote the time: %v", got["mgw_aaaaaaaaaaaa"])
			}
			if !got["mgw_bbbbbbbbbbbb"].Equal(now) {
				t.Errorf("another key is throttled apart: got %v, want %v", got["mgw_bbbbbbbbbbbb"], now)
			}
			if other, _ := rec.LastUsed(ctx, "other"); len(other) != 0 {
				t.Errorf("namespaces are apart: %v", other)
			}
			now = start.Add(time.Minute)
			rec.Used("ws", "mgw_aaaaaaaaaaaa")
			if got := get()["mgw_aaaaaaaaaaaa"]; !got.Equal(now) {
				t.Errorf("a use a minute later: got %v, want %v", got, now)
			}
			if err := store.Touch(ctx, "ws", "mgw_aaaaaaaaaaaa", start); err != nil {
				t.Fatal(err)
			}
			if got := get()["mgw_aaaaaaaaaaaa"]; !got.Equal(now) {
				t.Errorf("an older write moved the time back to %v", got)
			}
		})
	}
}
