package kit

import (
	"testing"
	"time"

	"github.com/modelgate/modelgate/api/apikey"
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

func TestMintedKeysAndIDs(t *testing.T) {
	k, err := apikey.Mint(apikey.Federated)
	if err != nil || !ValidPrefix(apikey.Prefix(k)) {
		t.Fatalf("minted key prefix %q is not a valid path prefix (err %v)", apikey.Prefix(k), err)
	}
	if a, b := NewID("grp-"), NewID("grp-"); a == b || !ValidName(a) || len(a) != 20 {
		t.Fatalf("ids %q and %q: want distinct valid names of 20 characters", a, b)
	}
}

func TestFieldPathKeepsIndexes(t *testing.T) {
	type limit struct {
		Threshold int64 `json:"threshold"`
	}
	type model struct {
		RateLimits []limit `json:"rate_limits"`
	}
	type body struct {
		Models []model `json:"models"`
	}
	raw := []byte(`{"models":[{"rate_limits":[]},{"rate_limits":[{"threshold":1},{"threshold":"x"}]}]}`)
	if got := fieldPath(raw, &body{}, "models.rate_limits.threshold"); got != "models[1].rate_limits[1].threshold" {
		t.Errorf("got %q, want models[1].rate_limits[1].threshold", got)
	}
	if got := fieldPath([]byte(`"x"`), &body{}, ""); got != "(body)" {
		t.Errorf("the body itself: got %q, want (body)", got)
	}
}
