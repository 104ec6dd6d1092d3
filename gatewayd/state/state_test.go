package state_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelgate/modelgate/gatewayd/billing"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/gatewayd/state"
	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

// charge admits one call against a DAY REQUEST limit and records one billing event, through the users the state
// hands out.
func charge(t *testing.T, st *state.State, now time.Time) {
	t.Helper()
	ctx := context.Background()
	p := &limits.Plan{Limits: []limits.Limit{{Key: limits.BucketKey{Namespace: "ns", Group: "g", Slug: "s", Type: limits.Request, Unit: limits.Day}, Threshold: 100}}}
	if err := st.Limits().Bind(p); err != nil {
		t.Fatal(err)
	}
	if res, err := st.Limits().Admit(ctx, p, now); err != nil || !res.Allowed {
		t.Fatalf("admit: %+v, %v", res, err)
	}
	if err := st.Billing().Append(ctx, []billing.Record{{Namespace: "ns", Event: billing.Event{IdempotencyKey: "evt_" + now.Format(time.RFC3339Nano), Timestamp: now}}}); err != nil {
		t.Fatal(err)
	}
}

func count(t *testing.T, st *state.State, now time.Time) (usage int64, events int) {
	t.Helper()
	ctx := context.Background()
	n, err := st.Limits().Count(ctx, limits.BucketKey{Namespace: "ns", Group: "g", Slug: "s", Type: limits.Request, Unit: limits.Day}, now)
	if err != nil {
		t.Fatal(err)
	}
	evs, _, err := st.Billing().List(ctx, "ns", billing.Query{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return n, len(evs)
}

// TestStateSurvivesAReopen: what the limit store and the billing store wrote is there after Close and Open,
// for the embedded store (one bbolt file) and the Redis store (a real redis-server).
func TestStateSurvivesAReopen(t *testing.T) {
	now := time.Now().UTC()
	redis := redistest.Start(t)
	for name, cfg := range map[string]state.Config{
		"embedded": {Store: state.Embedded, Dir: t.TempDir(), FlushInterval: -1},
		"redis":    {Store: state.Redis, RedisURL: redis.URL()},
	} {
		t.Run(name, func(t *testing.T) {
			st, err := state.Open(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			charge(t, st, now)
			charge(t, st, now.Add(time.Millisecond))
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			st, err = state.Open(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if n, evs := count(t, st, now); n != 2 || evs != 2 {
				t.Fatalf("after a reopen: DAY count %d, %d billing events; want 2 and 2", n, evs)
			}
		})
	}
}

// TestOpenNamesTheFlagAtFault: a refused configuration names the flag to fix.
func TestOpenNamesTheFlagAtFault(t *testing.T) {
	for _, tc := range []struct {
		cfg  state.Config
		flag string
	}{
		{state.Config{Store: "sqlite"}, "--store"},
		{state.Config{Store: state.Redis}, "--redis-url"},
		{state.Config{Store: state.Redis, RedisURL: "http://not-redis"}, "--redis-url"},
		{state.Config{Store: state.Embedded, Dir: "/proc/forbidden/dir"}, "--state-dir"},
	} {
		if _, err := state.Open(context.Background(), tc.cfg); err == nil || !strings.HasPrefix(err.Error(), tc.flag+":") {
			t.Errorf("%+v: error %v, want one that begins with %s", tc.cfg, err, tc.flag)
		}
	}
}
