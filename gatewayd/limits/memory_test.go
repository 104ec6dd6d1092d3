package limits

import (
	"context"
	"fmt"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)

func lim(group, slug string, t Type, u Unit, threshold int64) Limit {
	return Limit{Key: BucketKey{Namespace: "ns", Group: group, Slug: slug, Type: t, Unit: u}, Threshold: threshold, SourceGroup: group}
}

func bound(t testing.TB, m *Memory, ls ...Limit) *Plan {
	t.Helper()
	p := &Plan{Limits: ls}
	if err := m.Bind(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func admit(t testing.TB, m *Memory, p *Plan, now time.Time) Result {
	t.Helper()
	r, err := m.Admit(context.Background(), p, now)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestWindowsRefuseAtThreshold checks, per type and unit, that exactly threshold calls pass inside one window
// and that the window frees capacity once it has rolled past.
func TestWindowsRefuseAtThreshold(t *testing.T) {
	cases := []struct {
		unit Unit
		// inside stays in the window of the first call; after is surely past it.
		inside, after time.Duration
	}{
		{Second, 900 * time.Millisecond, time.Second + 100*time.Millisecond},
		{Minute, 59 * time.Second, time.Minute + 6*time.Second},
		{Day, 13 * time.Hour, 14 * time.Hour}, // t0 is 10:00 UTC: +14h crosses midnight
	}
	for _, tc := range cases {
		for _, typ := range []Type{Request, Token} {
			t.Run(typ.String()+"/"+tc.unit.String(), func(t *testing.T) {
				m := NewMemory()
				p := bound(t, m, lim("g", "s", typ, tc.unit, 3))
				for i := range 3 {
					r := admit(t, m, p, t0)
					if !r.Allowed {
						t.Fatalf("call %d refused below the threshold", i+1)
					}
					if typ == Token {
						_ = m.Settle(context.Background(), p, Charge{Tokens: 1}, t0)
					}
				}
				r := admit(t, m, p, t0.Add(tc.inside))
				if r.Allowed || r.Hit != 0 {
					t.Fatalf("call at the threshold admitted: %+v", r)
				}
				if r.RetryAfter <= 0 {
					t.Errorf("RetryAfter = %v, want > 0", r.RetryAfter)
				}
				if got := m.Usage(p.Limits[0].Key, t0.Add(tc.inside)); got != 3 {
					t.Errorf("refused call changed the count: %d, want 3", got)
				}
				if r := admit(t, m, p, t0.Add(tc.after)); !r.Allowed {
					t.Fatalf("call after the window refused: %+v", r)
				}
			})
		}
	}
}

// TestRollingWindowIsStrict: no interval of one window length ever holds more than the threshold, wherever
// the calls fall relative to sub-slot boundaries.
func TestRollingWindowIsStrict(t *testing.T) {
	const threshold = 5
	m := NewMemory()
	p := bound(t, m, lim("g", "s", Request, Second, threshold))
	var admitted []time.Time
	for step := time.Duration(0); step < 5*time.Second; step += 37 * time.Millisecond {
		now := t0.Add(step)
		if admit(t, m, p, now).Allowed {
			admitted = append(admitted, now)
		}
	}
	for i := range admitted {
		n := 0
		for j := i; j < len(admitted) && admitted[j].Sub(admitted[i]) < time.Second; j++ {
			n++
		}
		if n > threshold {
			t.Fatalf("%d calls admitted within one second starting at %v", n, admitted[i].Sub(t0))
		}
	}
	if len(admitted) < 4*threshold {
		t.Fatalf("only %d calls admitted over 5s at %d/s: the window holds capacity back too long", len(admitted), threshold)
	}
}

func TestDayResetsAtMidnightUTC(t *testing.T) {
	m := NewMemory()
	p := bound(t, m, lim("g", "s", Request, Day, 1))
	late := time.Date(2026, 3, 14, 23, 59, 59, 0, time.UTC)
	if !admit(t, m, p, late).Allowed {
		t.Fatal("first call refused")
	}
	r := admit(t, m, p, late)
	if r.Allowed {
		t.Fatal("second call of the day admitted")
	}
	if r.RetryAfter != time.Second {
		t.Errorf("RetryAfter = %v, want 1s until midnight", r.RetryAfter)
	}
	if !admit(t, m, p, late.Add(time.Second)).Allowed {
		t.Fatal("call after midnight refused")
	}
}

// TestAllOrNothing: when the ancestor refuses, neither the caller's nor any other bucket is charged.
func TestAllOrNothing(t *testing.T) {
	m := NewMemory()
	self := lim("child", "s", Request, Minute, 10)
	parent := lim("parent", "s", Request, Minute, 2)
	root := lim("root", "s", Request, Minute, 10)
	p := bound(t, m, self, parent, root)
	for range 2 {
		if !admit(t, m, p, t0).Allowed {
			t.Fatal("refused below the threshold")
		}
	}
	r := admit(t, m, p, t0)
	if r.Allowed || r.Hit != 1 {
		t.Fatalf("want refusal by the parent (index 1), got %+v", r)
	}
	for _, l := range []Limit{self, parent, root} {
		if got := m.Usage(l.Key, t0); got != 2 {
			t.Errorf("%s: count %d after a refusal, want 2", l.Key.Group, got)
		}
	}
}

func TestTokensRefuseOnlyWhenExhausted(t *testing.T) {
	m := NewMemory()
	p := bound(t, m, lim("g", "s", Token, Minute, 100), lim("g", "s", Request, Minute, 1000))
	if !admit(t, m, p, t0).Allowed {
		t.Fatal("refused with an empty bucket")
	}
	_ = m.Settle(context.Background(), p, Charge{Tokens: 99}, t0)
	if !admit(t, m, p, t0).Allowed {
		t.Fatal("refused with 1 token left")
	}
	_ = m.Settle(context.Background(), p, Charge{Tokens: 50}, t0) // overshoot: the cost was unknown at admission
	if got := m.Usage(p.Limits[0].Key, t0); got != 149 {
		t.Fatalf("token count %d, want 149", got)
	}
	r := admit(t, m, p, t0)
	if r.Allowed || r.Hit != 0 {
		t.Fatalf("want refusal by the exhausted TOKEN limit, got %+v", r)
	}
	if got := m.Usage(p.Limits[1].Key, t0); got != 2 {
		t.Errorf("REQUEST count %d, want 2: the refused call must not be charged", got)
	}
}

// TestCountsSurviveRebind: a new snapshot rebinds plans with new thresholds; the counts stay.
func TestCountsSurviveRebind(t *testing.T) {
	m := NewMemory()
	p := bound(t, m, lim("g", "s", Request, Minute, 5))
	for range 3 {
		admit(t, m, p, t0)
	}
	lower := bound(t, m, lim("g", "s", Request, Minute, 3))
	if admit(t, m, lower, t0).Allowed {
		t.Fatal("lowered threshold not applied to existing counts")
	}
	higher := bound(t, m, lim("g", "s", Request, Minute, 4))
	if !admit(t, m, higher, t0).Allowed {
		t.Fatal("raised threshold not applied")
	}
}

func TestSlugsAndGroupsAreIndependent(t *testing.T) {
	m := NewMemory()
	a := bound(t, m, lim("g", "a", Request, Minute, 1))
	b := bound(t, m, lim("g", "b", Request, Minute, 1))
	other := bound(t, m, lim("h", "a", Request, Minute, 1))
	for name, p := range map[string]*Plan{"a": a, "b": b, "other group": other} {
		if !admit(t, m, p, t0).Allowed {
			t.Fatalf("%s refused: it shares a bucket", name)
		}
	}
}

func TestDuplicateKeyChargedOnce(t *testing.T) {
	m := NewMemory()
	p := bound(t, m, lim("g", "s", Request, Minute, 5), lim("g", "s", Request, Minute, 4))
	admit(t, m, p, t0)
	if got := m.Usage(p.Limits[0].Key, t0); got != 1 {
		t.Fatalf("count %d, want 1", got)
	}
}

// chain5 is a five-level CASCADING chain with REQUEST and TOKEN limits on SECOND, MINUTE and DAY per level.
func chain5(prefix string) []Limit {
	var ls []Limit
	for level := range 5 {
		g := fmt.Sprintf("%sg%d", prefix, level)
		for _, typ := range []Type{Request, Token} {
			for _, u := range []Unit{Second, Minute, Day} {
				ls = append(ls, lim(g, "demo/echo", typ, u, 1<<60))
			}
		}
	}
	return ls
}

func BenchmarkCheck5LevelChain(b *testing.B) {
	m := NewMemory()
	p := bound(b, m, chain5("")...)
	ctx := context.Background()
	now := t0
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		// Move the clock so that windows really advance, as in production.
		if r, _ := m.Admit(ctx, p, now.Add(time.Duration(i)*time.Millisecond)); !r.Allowed {
			b.Fatal("refused")
		}
	}
}

// BenchmarkCheck5LevelChainParallel: every goroutine calls through the same chain, the worst contention.
func BenchmarkCheck5LevelChainParallel(b *testing.B) {
	m := NewMemory()
	p := bound(b, m, chain5("")...)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			if r, _ := m.Admit(ctx, p, t0.Add(time.Duration(i)*time.Millisecond)); !r.Allowed {
				b.Fatal("refused")
			}
		}
	})
}

// BenchmarkCheck5LevelChainParallelSiblings: goroutines call through sibling leaves sharing four ancestors.
func BenchmarkCheck5LevelChainParallelSiblings(b *testing.B) {
	m := NewMemory()
	ctx := context.Background()
	b.ReportAllocs()
	var n int64
	var mu = make(chan struct{}, 1)
	mu <- struct{}{}
	b.RunParallel(func(pb *testing.PB) {
		<-mu
		n++
		ls := chain5("")
		leaf := fmt.Sprintf("leaf%d", n)
		for i := range 6 {
			ls[i].Key.Group = leaf
		}
		p := bound(b, m, ls...)
		mu <- struct{}{}
		i := 0
		for pb.Next() {
			i++
			if r, _ := m.Admit(ctx, p, t0.Add(time.Duration(i)*time.Millisecond)); !r.Allowed {
				b.Fatal("refused")
			}
		}
	})
}

// BenchmarkCheck5LevelChainParallelTenants: goroutines call through unrelated chains (different customers).
func BenchmarkCheck5LevelChainParallelTenants(b *testing.B) {
	m := NewMemory()
	ctx := context.Background()
	b.ReportAllocs()
	var n int64
	var mu = make(chan struct{}, 1)
	mu <- struct{}{}
	b.RunParallel(func(pb *testing.PB) {
		<-mu
		n++
		p := bound(b, m, chain5(fmt.Sprintf("t%d-", n))...)
		mu <- struct{}{}
		i := 0
		for pb.Next() {
			i++
			if r, _ := m.Admit(ctx, p, t0.Add(time.Duration(i)*time.Millisecond)); !r.Allowed {
				b.Fatal("refused")
			}
		}
	})
}
