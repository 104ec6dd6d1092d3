package billing

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/modelgate/modelgate/api/ids"
	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

// withStores runs fn on each store a deployment runs: bbolt (embedded), and Redis standalone, Sentinel and
// Cluster on real redis-server processes.
func withStores(t *testing.T, fn func(t *testing.T, s Store)) {
	t.Run("bolt", func(t *testing.T) { fn(t, openBolt(t)) })
	t.Run("redis", func(t *testing.T) {
		redistest.Each(t, func(t *testing.T, d *redistest.Deployment) { fn(t, NewRedis(d.Client(), "")) })
	})
}

// usageRecord is an event of in and out tokens, which cost 1000 × in + out micro-USD.
func usageRecord(ns, group, slug string, status int, at time.Time, in, out int64) Record {
	return Record{Namespace: ns, Event: Event{IdempotencyKey: ids.New(ids.BillingEvent), Timestamp: at, GroupID: group,
		ModelSlug: slug, StatusCode: status, Tokens: Tokens{InputTokens: in, OutputTokens: out}, CostMicroUsd: 1000*in + out}}
}

// TestUsageRollupCountsPerMinuteGroupAndSlug: every event adds to its minute's counters of its (group, slug) and
// of the workspace's total of its slug, in the same write, its cost included; 429s are counted apart and
// namespaces never mix.
func TestUsageRollupCountsPerMinuteGroupAndSlug(t *testing.T) {
	withStores(t, func(t *testing.T, s Store) {
		m0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
		ctx := context.Background()
		// Two writes, so counters of one minute add up across appends too.
		if err := s.Append(ctx, []Record{
			usageRecord("ws", "g1", "a", 200, m0.Add(5*time.Second), 10, 4),
			usageRecord("ws", "g1", "a", 200, m0.Add(50*time.Second), 7, 3),
			usageRecord("ws", "g1", "b", 429, m0.Add(70*time.Second), 0, 0),
		}); err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, []Record{
			usageRecord("ws", "g1", "a", 429, m0.Add(59*time.Second), 0, 0),
			usageRecord("ws", "g2", "a", 200, m0.Add(61*time.Second), 1, 1),
			usageRecord("other", "g1", "a", 200, m0, 100, 100),
		}); err != nil {
			t.Fatal(err)
		}
		m1 := m0.Add(time.Minute)
		check := func(group string, start, end time.Time, want []UsageMinute) {
			t.Helper()
			got, err := s.Usage(ctx, "ws", group, start, end)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Errorf("Usage(%s, %s..%s):\n got %+v\nwant %+v", group, start.Format(time.TimeOnly), end.Format(time.TimeOnly), got, want)
			}
		}
		check("g1", m0, m1, []UsageMinute{
			{Minute: m0, Slug: "a", Counters: Counters{Requests: 3, Throttled: 1, InputTokens: 17, OutputTokens: 7, CostMicroUsd: 17_007}},
			{Minute: m1, Slug: "b", Counters: Counters{Requests: 1, Throttled: 1}},
		})
		check(AllGroups, m0.Add(30*time.Second), m1.Add(30*time.Second), []UsageMinute{
			{Minute: m0, Slug: "a", Counters: Counters{Requests: 3, Throttled: 1, InputTokens: 17, OutputTokens: 7, CostMicroUsd: 17_007}},
			{Minute: m1, Slug: "a", Counters: Counters{Requests: 1, InputTokens: 1, OutputTokens: 1, CostMicroUsd: 1001}},
			{Minute: m1, Slug: "b", Counters: Counters{Requests: 1, Throttled: 1}},
		})
		check("g2", m1, m1, []UsageMinute{{Minute: m1, Slug: "a", Counters: Counters{Requests: 1, InputTokens: 1, OutputTokens: 1, CostMicroUsd: 1001}}})
		check("g1", m1.Add(time.Minute), m1.Add(time.Hour), []UsageMinute{})
		check("g3", m0, m1, []UsageMinute{})
	})
}

// TestUsageRollupKeepsADay: a minute a day old is still read; minutes older than UsageKeep are dropped (bbolt at
// the group's next write, Redis by the hash's expiry, which the test cannot wait for, so it reads the TTL).
func TestUsageRollupKeepsADay(t *testing.T) {
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	ctx := context.Background()
	t.Run("bolt", func(t *testing.T) {
		s := openBolt(t)
		for _, ts := range []time.Time{at, at.Add(24 * time.Hour), at.Add(UsageKeep + time.Minute)} {
			if err := s.Append(ctx, []Record{usageRecord("ws", "g1", "a", 200, ts, 1, 1)}); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.Usage(ctx, "ws", "g1", at.Add(-time.Hour), at.Add(48*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		var minutes []time.Time
		for _, m := range got {
			minutes = append(minutes, m.Minute)
		}
		if want := []time.Time{at.Add(24 * time.Hour), at.Add(UsageKeep + time.Minute)}; !slices.Equal(minutes, want) {
			t.Errorf("minutes kept %v, want %v: the minute older than UsageKeep is dropped, the one a day old kept", minutes, want)
		}
	})
	t.Run("redis", func(t *testing.T) {
		redistest.Each(t, func(t *testing.T, d *redistest.Deployment) { testRedisUsageKeepsADay(t, d, at) })
	})
}

func testRedisUsageKeepsADay(t *testing.T, d *redistest.Deployment, at time.Time) {
	ctx := context.Background()
	s := NewRedis(d.Client(), "")
	if err := s.Append(ctx, []Record{usageRecord("ws", "g1", "a", 200, at, 1, 1)}); err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"g1", AllGroups} {
		ttl, err := d.Client().TTL(ctx, s.usage("ws", g, throttleMinute(at))).Result()
		if err != nil || ttl <= 24*time.Hour || ttl > UsageKeep {
			t.Errorf("TTL of the %s minute = %v, %v: want more than a day, at most %v", g, ttl, err, UsageKeep)
		}
	}
	// A day of minutes is read back in one call.
	got, err := s.Usage(ctx, "ws", "g1", at.Add(-24*time.Hour), at)
	if err != nil || len(got) != 1 || got[0].Requests != 1 {
		t.Errorf("Usage over a day = %+v, %v", got, err)
	}
}

// TestCountersOfFourFieldsReadWithoutCost: a bbolt usage counter written before the rollup counted cost (four
// fields) still reads, with a cost of 0; the five-field value reads back as written.
func TestCountersOfFourFieldsReadWithoutCost(t *testing.T) {
	c := Counters{Requests: 1, Throttled: 2, InputTokens: 3, OutputTokens: 4, CostMicroUsd: 5}
	if got, ok := decodeCounters(encodeCounters(c)); !ok || got != c {
		t.Errorf("decodeCounters(encodeCounters(%+v)) = %+v, %v", c, got, ok)
	}
	old := encodeCounters(c)[:32]
	if got, ok := decodeCounters(old); !ok || got != (Counters{Requests: 1, Throttled: 2, InputTokens: 3, OutputTokens: 4}) {
		t.Errorf("decodeCounters(four fields) = %+v, %v", got, ok)
	}
	if _, ok := decodeCounters(old[:31]); ok {
		t.Error("decodeCounters took 31 bytes")
	}
}
