package rest

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestFixedWindowLimiter(t *testing.T) {
	const logs = "POST /v1/models/{model_id}/deployments/{deployment_id}/logs"
	const retry = "POST /v1/models/{model_id}/deployments/production/retry"
	l := newFixedWindowLimiter()
	start := time.Date(2026, 1, 1, 10, 0, 10, 500_000_000, time.UTC) // 10.5 s into a minute

	for i := range 10 {
		if _, limited := l.allow("k", retry, start); limited {
			t.Fatalf("retry call %d limited, want 10 per minute admitted", i+1)
		}
	}
	after, limited := l.allow("k", retry, start)
	if !limited || after != 50 {
		t.Fatalf("11th retry call: limited=%v retry_after=%d, want limited with 50 (49.5 s rounded up)", limited, after)
	}
	if _, limited := l.allow("other", retry, start); limited {
		t.Fatal("another key shares the bucket")
	}
	if _, limited := l.allow("k", retry, start.Add(49500*time.Millisecond)); limited {
		t.Fatal("the next minute's window is still limited")
	}

	for i := range 30 {
		if _, limited := l.allow("k", logs, start); limited {
			t.Fatalf("logs call %d limited, want 30 per second", i+1)
		}
	}
	if after, limited := l.allow("k", logs, start.Add(499*time.Millisecond)); !limited || after != 1 {
		t.Fatalf("31st logs call 1 ms before the window ends: limited=%v retry_after=%d, want limited with at least 1", limited, after)
	}
}

func TestShannonEntropy(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
	}{
		{"", 0},
		{strings.Repeat("a", 40), 0},
		{strings.Repeat("ab", 20), 1},
		{"abcdefgh", 3},
		{"0123456789abcdef", 4},
	} {
		if got := shannonEntropy(tc.in); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("shannonEntropy(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestMintedKeyFormat(t *testing.T) {
	k := mintKeyString("mgk_")
	if len(k) != 16+1+32 || k[16] != '.' || !strings.HasPrefix(k, "mgk_") || !validPrefix(k[:16]) {
		t.Fatalf("minted key %q does not have the shape mgk_<12>.<32>", k[:16])
	}
	if a, b := newID("grp-"), newID("grp-"); a == b || !validName(a) || len(a) != 20 {
		t.Fatalf("ids %q and %q: want distinct valid names of 20 characters", a, b)
	}
}
