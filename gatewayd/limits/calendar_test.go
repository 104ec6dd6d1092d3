package limits

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

func utc(y int, m time.Month, d, h, mi, s, ns int) time.Time {
	return time.Date(y, m, d, h, mi, s, ns, time.UTC)
}

// TestCalendarPeriods is the table of Unit.Period and Unit.PeriodEnd: a DAY ends at the next midnight UTC, a
// MONTH at the first instant of the next month, across a year's end and a leap day.
func TestCalendarPeriods(t *testing.T) {
	for _, c := range []struct {
		at               time.Time
		day, month       int64
		dayEnd, monthEnd time.Time
	}{
		{utc(1970, 1, 1, 0, 0, 0, 0), 0, 0, utc(1970, 1, 2, 0, 0, 0, 0), utc(1970, 2, 1, 0, 0, 0, 0)},
		{utc(2027, 1, 31, 23, 59, 59, 999999999), 20849, 684, utc(2027, 2, 1, 0, 0, 0, 0), utc(2027, 2, 1, 0, 0, 0, 0)},
		{utc(2027, 2, 1, 0, 0, 0, 0), 20850, 685, utc(2027, 2, 2, 0, 0, 0, 0), utc(2027, 3, 1, 0, 0, 0, 0)},
		{utc(2026, 12, 31, 23, 59, 59, 0), 20818, 683, utc(2027, 1, 1, 0, 0, 0, 0), utc(2027, 1, 1, 0, 0, 0, 0)},
		{utc(2028, 2, 28, 12, 0, 0, 0), 21242, 697, utc(2028, 2, 29, 0, 0, 0, 0), utc(2028, 3, 1, 0, 0, 0, 0)},
		{utc(2028, 2, 29, 0, 0, 0, 0), 21243, 697, utc(2028, 3, 1, 0, 0, 0, 0), utc(2028, 3, 1, 0, 0, 0, 0)},
		{utc(2028, 3, 1, 0, 0, 0, 0), 21244, 698, utc(2028, 3, 2, 0, 0, 0, 0), utc(2028, 4, 1, 0, 0, 0, 0)},
		// Another zone's wall clock is the same instant: periods are UTC.
		{time.Date(2027, 2, 1, 0, 30, 0, 0, time.FixedZone("CET", 3600)), 20849, 684, utc(2027, 2, 1, 0, 0, 0, 0), utc(2027, 2, 1, 0, 0, 0, 0)},
	} {
		if got := Day.Period(c.at); got != c.day {
			t.Errorf("Day.Period(%s) = %d, want %d", c.at, got, c.day)
		}
		if got := Month.Period(c.at); got != c.month {
			t.Errorf("Month.Period(%s) = %d, want %d", c.at, got, c.month)
		}
		if got := Day.PeriodEnd(c.at); !got.Equal(c.dayEnd) {
			t.Errorf("Day.PeriodEnd(%s) = %s, want %s", c.at, got, c.dayEnd)
		}
		if got := Month.PeriodEnd(c.at); !got.Equal(c.monthEnd) {
			t.Errorf("Month.PeriodEnd(%s) = %s, want %s", c.at, got, c.monthEnd)
		}
	}
}

// calendarPlan is a COST MONTH limit of 100 micro-USD, a COST DAY limit of 60, a TOKEN MONTH limit of 1,000 and a
// REQUEST MONTH limit of 3, in that order.
func calendarPlan(t *testing.T, s Store) *Plan {
	return bindTo(t, s, lim("g", "s", Cost, Month, 100), lim("g", "s", Cost, Day, 60), lim("g", "s", Token, Month, 1000),
		lim("g", "s", Request, Month, 3))
}

// calendarStores are the stores the calendar tests run on: memory, embedded (over a bbolt file) and Redis.
func calendarStores(t *testing.T, fn func(t *testing.T, s Store)) {
	t.Run("memory", func(t *testing.T) { fn(t, NewMemory()) })
	t.Run("embedded", func(t *testing.T) {
		e := openEmbedded(t, filepath.Join(t.TempDir(), "state.db"), &fakeNow{t0}, -1)
		defer func() { _ = closeEmbedded(e) }()
		fn(t, e)
	})
	t.Run("redis", func(t *testing.T) {
		r := NewRedis(redistest.Start(t).Client(), RedisOptions{})
		fn(t, r)
	})
}

func count(t *testing.T, s Store, k BucketKey, now time.Time) int64 {
	t.Helper()
	if r, ok := s.(*Redis); ok {
		if err := r.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.Count(context.Background(), k, now)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMonthTurnsOver drives COST, TOKEN and REQUEST MONTH limits and a COST DAY limit with a fake clock across the
// end of January, the end of a year and the leap day of 2028: a MONTH count returns to zero at the first instant
// of the month and not before, a DAY count at midnight UTC, and a refusal's retry is the time until then.
func TestMonthTurnsOver(t *testing.T) {
	calendarStores(t, func(t *testing.T, s Store) {
		ctx := context.Background()
		p := calendarPlan(t, s)
		costMonth, costDay, reqMonth := p.Limits[0].Key, p.Limits[1].Key, p.Limits[3].Key
		for _, c := range []struct {
			name       string
			last, next time.Time
			// spent is true when last's month is already past its COST limit (the leap day's February).
			spent bool
			// sameMonth is true when next is in last's month: a day ends, the month goes on.
			sameMonth bool
		}{
			{"end of January", utc(2027, 1, 31, 23, 59, 59, 999000000), utc(2027, 2, 1, 0, 0, 0, 0), false, false},
			{"end of the year", utc(2027, 12, 31, 23, 59, 59, 0), utc(2028, 1, 1, 0, 0, 0, 0), false, false},
			{"leap day", utc(2028, 2, 28, 23, 59, 0, 0), utc(2028, 2, 29, 0, 0, 0, 0), false, true},
			{"after the leap day", utc(2028, 2, 29, 23, 59, 59, 0), utc(2028, 3, 1, 0, 0, 0, 0), true, false},
		} {
			if !c.spent {
				// Two calls of 55 micro-USD: the second is admitted, since 55 is below both thresholds, and puts
				// the day at 110 of 60 and the month at 110 of 100.
				for _, at := range []time.Time{c.last.Add(-time.Hour), c.last} {
					if res, err := s.Admit(ctx, p, at); err != nil || !res.Allowed {
						t.Fatalf("%s: call at %s: %+v %v", c.name, at, res, err)
					}
					if err := s.Settle(ctx, p, Charge{Tokens: 10, Cost: 55}, at); err != nil {
						t.Fatal(err)
					}
				}
			}
			if got := count(t, s, costMonth, c.last); got != 110 {
				t.Fatalf("%s: COST MONTH = %d, want 110", c.name, got)
			}
			monthEnd := Month.PeriodEnd(c.last)
			res, err := s.Admit(ctx, p, c.last)
			if err != nil || res.Allowed || res.Hit != 0 {
				t.Fatalf("%s: at %s: %+v %v, want the COST MONTH limit to refuse", c.name, c.last, res, err)
			}
			if want := monthEnd.Sub(c.last); res.RetryAfter != want {
				t.Errorf("%s: retry after %s, want %s (until %s)", c.name, res.RetryAfter, want, monthEnd)
			}
			if got := count(t, s, costDay, c.next); got != 0 {
				t.Errorf("%s: COST DAY at %s = %d, want 0 (a new day)", c.name, c.next, got)
			}
			if c.sameMonth {
				res, err := s.Admit(ctx, p, c.next)
				if err != nil || res.Allowed || res.Hit != 0 {
					t.Fatalf("%s: at %s: %+v %v, want the month still spent", c.name, c.next, res, err)
				}
				if want := monthEnd.Sub(c.next); res.RetryAfter != want {
					t.Errorf("%s: retry after %s, want %s (until %s)", c.name, res.RetryAfter, want, monthEnd)
				}
				continue
			}
			// The first instant of the month: every MONTH count is back to zero.
			if res, err := s.Admit(ctx, p, c.next); err != nil || !res.Allowed {
				t.Fatalf("%s: at %s: %+v %v, want a new month", c.name, c.next, res, err)
			}
			if got := count(t, s, costMonth, c.next); got != 0 {
				t.Errorf("%s: COST MONTH at %s = %d, want 0", c.name, c.next, got)
			}
			if got := count(t, s, reqMonth, c.next); got != 1 {
				t.Errorf("%s: REQUEST MONTH at %s = %d, want 1 (this month's call)", c.name, c.next, got)
			}
		}
	})
}

// TestZeroCostNeverTrips: calls that cost nothing (an unpriced target) leave a COST limit at zero, however many.
func TestZeroCostNeverTrips(t *testing.T) {
	calendarStores(t, func(t *testing.T, s Store) {
		ctx := context.Background()
		p := bindTo(t, s, lim("g", "s", Cost, Month, 1), lim("g", "s", Token, Day, 1<<40))
		for range 50 {
			if res, err := s.Admit(ctx, p, t0); err != nil || !res.Allowed {
				t.Fatalf("unpriced call refused: %+v %v", res, err)
			}
			if err := s.Settle(ctx, p, Charge{Tokens: 100}, t0); err != nil {
				t.Fatal(err)
			}
		}
		if got := count(t, s, p.Limits[0].Key, t0); got != 0 {
			t.Errorf("COST MONTH after 50 unpriced calls = %d, want 0", got)
		}
		if got := count(t, s, p.Limits[1].Key, t0); got != 5000 {
			t.Errorf("TOKEN DAY = %d, want 5000", got)
		}
	})
}

// TestRollingCostRefused: a store refuses to bind a COST limit on a rolling window, which the API never sends.
func TestRollingCostRefused(t *testing.T) {
	calendarStores(t, func(t *testing.T, s Store) {
		if err := s.Bind(&Plan{Limits: []Limit{lim("g", "s", Cost, Minute, 5)}}); err == nil {
			t.Error("a COST MINUTE limit was bound")
		}
	})
}

// TestRedisMonthKeysLiveAMonth: the header of a pair with a MONTH counter lives past the end of the longest month
// from its first charge of the month, and a later DAY or rolling charge never shortens it. A header written
// before the MONTH and COST counters existed (120 bytes) reads them as zero and keeps its other counts.
func TestRedisMonthKeysLiveAMonth(t *testing.T) {
	srv := redistest.Start(t)
	r := NewRedis(srv.Client(), RedisOptions{})
	ctx := context.Background()
	p := bindTo(t, r, lim("g", "s", Cost, Month, 1000), lim("g", "s", Request, Day, 1000), lim("g", "s", Request, Second, 1000))
	start := utc(2027, 1, 1, 0, 0, 0, 0)
	for i := range 3 {
		if res, err := r.Admit(ctx, p, start.Add(time.Duration(i)*time.Second)); err != nil || !res.Allowed {
			t.Fatalf("call %d: %+v %v", i, res, err)
		}
	}
	if err := r.Settle(ctx, p, Charge{Cost: 7}, start); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	key := r.pairKey(p.Limits[0].Key)
	ttl, err := srv.Client().PTTL(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl < 32*24*time.Hour {
		t.Errorf("header %s has TTL %s, want at least 32 days, past a 31-day month", key, ttl)
	}

	// The layout before COST and MONTH: 15 values, the UTC day and its REQUEST count 4 among them.
	old := make([]byte, 120)
	day := Day.Period(start)
	for i, v := range map[int]int64{0: day, 1: 4} {
		for b := range 8 {
			old[8*i+b] = byte(v >> (8 * b))
		}
	}
	if err := srv.Client().Set(ctx, key, old, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if got := count(t, r, p.Limits[1].Key, start); got != 4 {
		t.Errorf("REQUEST DAY of an old header = %d, want 4", got)
	}
	if got := count(t, r, p.Limits[0].Key, start); got != 0 {
		t.Errorf("COST MONTH of an old header = %d, want 0", got)
	}
	if err := r.Settle(ctx, p, Charge{Cost: 9}, start); err != nil {
		t.Fatal(err)
	}
	if got := count(t, r, p.Limits[0].Key, start); got != 9 {
		t.Errorf("COST MONTH after a charge of an old header = %d, want 9", got)
	}
}

// TestEmbeddedKeepsMonthCounters: a restart keeps the month's COST and TOKEN counts, after a graceful stop as after
// a flush and a crash; a restart in the next month restores none of them.
func TestEmbeddedKeepsMonthCounters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	clock := &fakeNow{utc(2028, 2, 28, 12, 0, 0, 0)}
	e := openEmbedded(t, path, clock, -1)
	p := calendarPlan(t, e)
	ctx := context.Background()
	for range 2 {
		if res := admit(t, e.Memory, p, clock.t); !res.Allowed {
			t.Fatalf("call refused: %+v", res)
		}
		_ = e.Settle(ctx, p, Charge{Tokens: 10, Cost: 30}, clock.t)
	}
	if err := closeEmbedded(e); err != nil {
		t.Fatal(err)
	}
	// The next day, in the same month (the leap day): the month's counts are back, the day's are not.
	clock.t = utc(2028, 2, 29, 8, 0, 0, 0)
	e = openEmbedded(t, path, clock, -1)
	p = calendarPlan(t, e)
	for i, want := range []int64{60, 0, 20, 2} {
		if got := e.Usage(p.Limits[i].Key, clock.t); got != want {
			t.Errorf("%s %s after a restart on the next day = %d, want %d", p.Limits[i].Key.Type, p.Limits[i].Key.Unit, got, want)
		}
	}
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	e.crash()
	clock.t = utc(2028, 3, 1, 0, 0, 0, 0)
	e = openEmbedded(t, path, clock, -1)
	defer func() { _ = closeEmbedded(e) }()
	p = calendarPlan(t, e)
	for _, l := range p.Limits {
		if got := e.Usage(l.Key, clock.t); got != 0 {
			t.Errorf("%s %s after a restart in the next month = %d, want 0", l.Key.Type, l.Key.Unit, got)
		}
	}
}
