package sessions

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

// TestStores: the three stores keep the same contract: a started session is live until it ends or expires.
func TestStores(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "s.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	stores := map[string]Store{"memory": NewMemory(), "bolt": NewBolt(db)}
	// Redis on each deployment gatewayd runs on: standalone, Sentinel and Cluster.
	for _, mode := range redistest.Modes {
		stores["redis-"+mode] = NewRedis(redistest.StartDeployment(t, mode).Client())
	}
	for name, st := range stores {
		ctx := context.Background()
		live := func(id string, at time.Time) bool {
			ok, err := st.Live(ctx, id, at)
			if err != nil {
				t.Fatalf("%s: Live: %v", name, err)
			}
			return ok
		}
		if live("a", now) {
			t.Errorf("%s: a session never started is live", name)
		}
		if err := st.Start(ctx, "a", now, time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := st.Start(ctx, "b", now, time.Hour); err != nil {
			t.Fatal(err)
		}
		if !live("a", now) || !live("b", now) {
			t.Errorf("%s: started sessions are not live", name)
		}
		if err := st.End(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if live("a", now) || !live("b", now) {
			t.Errorf("%s: End ended the wrong sessions", name)
		}
		if err := st.End(ctx, "never"); err != nil {
			t.Errorf("%s: ending an unknown session: %v", name, err)
		}
		if !strings.HasPrefix(name, "redis") && live("b", now.Add(time.Hour)) { // Redis expires keys on its own clock
			t.Errorf("%s: a session is live past its ttl", name)
		}
	}
}
