package limits

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

// tierStores runs fn against each Store gatewayd can run with: memory, the embedded store (bbolt) and a real
// redis-server.
func tierStores(t *testing.T, fn func(t *testing.T, s Store)) {
	t.Run("memory", func(t *testing.T) { fn(t, NewMemory()) })
	t.Run("embedded", func(t *testing.T) {
		e := openEmbedded(t, filepath.Join(t.TempDir(), "state.db"), &fakeNow{t0}, -1)
		t.Cleanup(func() { _ = closeEmbedded(e) })
		fn(t, e)
	})
	onEachRedis(t, RedisOptions{}, func(t *testing.T, r *Redis, _ *redistest.Deployment) { fn(t, r) })
}

func admitIn(t *testing.T, s Store, p *Plan, now time.Time) Result {
	t.Helper()
	r, err := s.Admit(context.Background(), p, now)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func countIn(t *testing.T, s Store, k BucketKey, now time.Time) int64 {
	t.Helper()
	n, err := s.Count(context.Background(), k, now)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// refusedBy names what decided r: "allowed", "tier <TYPE>" or "group <source group>".
func refusedBy(p *Plan, r Result) string {
	if r.Allowed {
		return "allowed"
	}
	if l := p.Limits[r.Hit]; l.IsTier() {
		return "tier " + l.Key.Type.String()
	}
	return "group " + p.Limits[r.Hit].SourceGroup
}

func TestTierLimits(t *testing.T) {
	cases := []struct {
		name     string
		rpm, tpm int64
		want     []string
	}{
		{"unset", 0, 0, nil},
		{"requests only", 60, 0, []string{"REQUEST/MINUTE 60"}},
		{"tokens only", 0, 1000, []string{"TOKEN/MINUTE 1000"}},
		{"both", 60, 1000, []string{"REQUEST/MINUTE 60", "TOKEN/MINUTE 1000"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, l := range Tier("ns", "mgw_abcdefghijkl", tc.rpm, tc.tpm) {
				if !l.IsTier() || l.Key.Slug != "mgw_abcdefghijkl" || l.Key.Namespace != "ns" {
					t.Errorf("limit %+v is not the key's tier bucket", l)
				}
				got = append(got, l.Key.Type.String()+"/"+l.Key.Unit.String()+" "+strconv.FormatInt(l.Threshold, 10))
			}
			if len(got) != len(tc.want) {
				t.Fatalf("Tier = %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("Tier = %v, want %v", got, tc.want)
				}
			}
		})
	}
	if lim("g", "s", Request, Minute, 1).IsTier() {
		t.Error("a group's limit reads as a tier limit")
	}
}

// TestTierIsPerKeyWhateverTheSlug: the tier counts a key's calls on every slug in one bucket, and another key's
// calls not at all.
func TestTierIsPerKeyWhateverTheSlug(t *testing.T) {
	tierStores(t, func(t *testing.T, s Store) {
		const key, other = "mgk_aaaaaaaaaaaa", "mgk_bbbbbbbbbbbb"
		onA := bindTo(t, s, append([]Limit{lim("g", "a", Request, Minute, 100)}, Tier("ns", key, 3, 0)...)...)
		onB := bindTo(t, s, append([]Limit{lim("g", "b", Request, Minute, 100)}, Tier("ns", key, 3, 0)...)...)
		otherOnA := bindTo(t, s, append([]Limit{lim("g", "a", Request, Minute, 100)}, Tier("ns", other, 3, 0)...)...)
		for i, p := range []*Plan{onA, onB, onA} {
			if r := admitIn(t, s, p, t0); !r.Allowed {
				t.Fatalf("call %d refused by %s under the tier", i+1, refusedBy(p, r))
			}
		}
		for _, p := range []*Plan{onA, onB} {
			if got := refusedBy(p, admitIn(t, s, p, t0)); got != "tier REQUEST" {
				t.Fatalf("fourth call of the key: %s, want refused by tier REQUEST", got)
			}
		}
		if r := admitIn(t, s, otherOnA, t0); !r.Allowed {
			t.Fatalf("another key was refused by %s: the tier is per key", refusedBy(otherOnA, r))
		}
		if r := admitIn(t, s, onB, t0.Add(67*time.Second)); !r.Allowed {
			t.Fatalf("refused by %s once the minute passed", refusedBy(onB, r))
		}
	})
}

// TestTierAndGroupChargeAllOrNothing: a call the tier refuses charges the group nothing, and a call the group
// refuses charges the tier nothing; tokens settle into both.
func TestTierAndGroupChargeAllOrNothing(t *testing.T) {
	tierStores(t, func(t *testing.T, s Store) {
		const key = "mgk_cccccccccccc"
		groupReq := BucketKey{Namespace: "ns", Group: "g", Slug: "a", Type: Request, Unit: Minute}
		tierBucket := Tier("ns", key, 1, 0)[0].Key

		// The tier is tighter: three refusals leave the group's bucket at the two admitted calls.
		p := bindTo(t, s, append([]Limit{lim("g", "a", Request, Minute, 5)}, Tier("ns", key, 2, 0)...)...)
		for range 2 {
			if r := admitIn(t, s, p, t0); !r.Allowed {
				t.Fatalf("refused by %s under both limits", refusedBy(p, r))
			}
		}
		for range 3 {
			if got := refusedBy(p, admitIn(t, s, p, t0)); got != "tier REQUEST" {
				t.Fatalf("got %s, want refused by tier REQUEST", got)
			}
		}
		if n := countIn(t, s, groupReq, t0); n != 2 {
			t.Errorf("group bucket holds %d after tier refusals, want 2", n)
		}

		// The group is tighter (on another slug, same key): refusals leave the tier bucket where it was.
		q := bindTo(t, s, append([]Limit{lim("h", "b", Request, Minute, 1)}, Tier("ns", key, 10, 0)...)...)
		later := t0.Add(67 * time.Second)
		if r := admitIn(t, s, q, later); !r.Allowed {
			t.Fatalf("refused by %s under both limits", refusedBy(q, r))
		}
		for range 3 {
			if got := refusedBy(q, admitIn(t, s, q, later)); got != "group h" {
				t.Fatalf("got %s, want refused by group h", got)
			}
		}
		if n := countIn(t, s, tierBucket, later); n != 1 {
			t.Errorf("tier bucket holds %d after group refusals, want 1", n)
		}
	})
}

// TestTierTokensPerMinute: the tier's TOKEN limit refuses once the key's settled tokens reach it, on whichever
// slug they were spent, and settles charge the group's TOKEN buckets and the tier's together.
func TestTierTokensPerMinute(t *testing.T) {
	tierStores(t, func(t *testing.T, s Store) {
		const key = "mgw_dddddddddddd"
		alone := bindTo(t, s, Tier("ns", key, 0, 10)...)
		shared := bindTo(t, s, append([]Limit{lim("g", "a", Token, Minute, 1000)}, Tier("ns", key, 0, 10)...)...)
		ctx := context.Background()
		if r := admitIn(t, s, alone, t0); !r.Allowed {
			t.Fatalf("first call refused by %s", refusedBy(alone, r))
		}
		if err := s.Settle(ctx, alone, Charge{Tokens: 7}, t0); err != nil {
			t.Fatal(err)
		}
		// 7 of 10: a TOKEN limit refuses only once exhausted, since a call's cost is not known in advance.
		if r := admitIn(t, s, shared, t0); !r.Allowed {
			t.Fatalf("second call refused by %s with 7 of 10 tokens spent", refusedBy(shared, r))
		}
		if err := s.Settle(ctx, shared, Charge{Tokens: 7}, t0); err != nil {
			t.Fatal(err)
		}
		for _, p := range []*Plan{alone, shared} {
			if got := refusedBy(p, admitIn(t, s, p, t0)); got != "tier TOKEN" {
				t.Fatalf("with 14 of 10 tokens spent: %s, want refused by tier TOKEN", got)
			}
		}
		if n := countIn(t, s, BucketKey{Namespace: "ns", Group: "g", Slug: "a", Type: Token, Unit: Minute}, t0); n != 7 {
			t.Errorf("group TOKEN bucket holds %d, want the 7 settled on the shared plan", n)
		}
		if n := countIn(t, s, Tier("ns", key, 0, 1)[0].Key, t0); n != 14 {
			t.Errorf("tier TOKEN bucket holds %d, want 14", n)
		}
		if r := admitIn(t, s, alone, t0.Add(67*time.Second)); !r.Allowed {
			t.Fatalf("refused by %s once the minute passed", refusedBy(alone, r))
		}
	})
}

// BenchmarkCheckWithTier measures what the model-API tier adds to a check in the in-memory store: a 5-level chain
// of 30 limits alone, the same chain followed by a key's two tier limits (a federated key on a shared model API:
// one more cell to lock), and the tier alone (a workspace key).
func BenchmarkCheckWithTier(b *testing.B) {
	for _, tc := range []struct {
		name string
		ls   []Limit
	}{
		{"chain5", chain5("")},
		{"chain5+tier", append(chain5(""), Tier("ns", "mgk_benchkey0001", 1<<60, 1<<60)...)},
		{"tier-only", Tier("ns", "mgw_benchkey0001", 1<<60, 1<<60)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			m := NewMemory()
			p := bound(b, m, tc.ls...)
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if r, _ := m.Admit(ctx, p, t0.Add(time.Duration(i)*time.Millisecond)); !r.Allowed {
					b.Fatal("refused")
				}
			}
		})
	}
}

// BenchmarkRedisAdmitWithTier is BenchmarkCheckWithTier against a real redis-server: the tier adds one header
// key to the script's MGET and one write.
func BenchmarkRedisAdmitWithTier(b *testing.B) {
	b.Run("chain5", func(b *testing.B) { benchRedisAdmit(b, chain5("")) })
	b.Run("chain5+tier", func(b *testing.B) {
		benchRedisAdmit(b, append(chain5(""), Tier("ns", "mgk_benchkey0001", 1<<60, 1<<60)...))
	})
	b.Run("tier-only", func(b *testing.B) { benchRedisAdmit(b, Tier("ns", "mgw_benchkey0001", 1<<60, 1<<60)) })
}
