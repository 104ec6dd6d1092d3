package state

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

// managementCall is one management call's answer.
type managementCall struct {
	status     int
	retryAfter string
	body       []byte
}

func callManagement(t *testing.T, method, url, key string) managementCall {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return managementCall{resp.StatusCode, resp.Header.Get("Retry-After"), body}
}

// TestRedisManagementLimitsAcrossReplicas: two gatewayd processes share one redis-server, and management calls
// alternate between them: each row of the management rate-limit table admits its limit once in total, not once
// per replica, and the calls past it are refused on both replicas with the exact 429.
func TestRedisManagementLimitsAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	w := newWorkspace(t, gatewayv1.LimitEnforcement("INDEPENDENT"), []gatewaytest.Group{{ID: "acme", Models: usageLimited(10)}}, nil)
	urls := []string{
		startGatewayd(t, w.ns, "--store=redis", "--redis-url="+srv.URL()).url,
		startGatewayd(t, w.ns, "--store=redis", "--redis-url="+srv.URL()).url,
	}
	const deployments = "/v1/models/rl-model/deployments/"
	for _, row := range []struct {
		method, path string
		n            int
		window       time.Duration
	}{
		{http.MethodPost, deployments + "production/retry", 10, time.Minute},
		{http.MethodPost, deployments + "development/retry", 10, time.Minute},
		{http.MethodPost, deployments + "dep-1/activate", 20, time.Minute},
		{http.MethodPost, deployments + "dep-1/logs", 30, time.Second},
		{http.MethodGet, "/v1/gateway/groups", 100, time.Second},
	} {
		t.Run(row.method+" "+row.path, func(t *testing.T) {
			// The replicas count in windows of their clock; an attempt is judged only when all its calls fell in one
			// window (the machine's clock, which both replicas read), so a window that ends mid-attempt is waited
			// out and the row tried again on a fresh one.
			for attempt := 0; ; attempt++ {
				startFreshWindow(row.window)
				begin := time.Now()
				var answers []managementCall
				for i := range row.n + 2 {
					answers = append(answers, callManagement(t, row.method, urls[i%2]+row.path, w.admin))
				}
				end := time.Now()
				if begin.Truncate(row.window) != end.Truncate(row.window) {
					if attempt == 4 {
						t.Fatalf("five attempts each crossed a window boundary")
					}
					time.Sleep(time.Until(end.Truncate(row.window).Add(row.window)))
					continue
				}
				windowEnd := begin.Truncate(row.window).Add(row.window)
				for i, a := range answers[:row.n] {
					if a.status == http.StatusTooManyRequests {
						t.Fatalf("call %d of %d (replica %d) refused: %s", i+1, row.n, i%2, a.body)
					}
				}
				for i, a := range answers[row.n:] {
					expectManagement429(t, a, row.n+i+1, (row.n+i)%2, windowEnd.Sub(end), windowEnd.Sub(begin))
				}
				return
			}
		})
	}
}

// startFreshWindow waits for the next window of size to begin unless most of the current one is left.
func startFreshWindow(size time.Duration) {
	now := time.Now()
	if left := now.Truncate(size).Add(size).Sub(now); left < min(size*4/5, 10*time.Second) {
		time.Sleep(left)
	}
}

// expectManagement429 asserts the exact 429 of the management rate limit, its Retry-After the whole seconds left
// in the window (between least and most, rounded up).
func expectManagement429(t *testing.T, a managementCall, call, replica int, least, most time.Duration) {
	t.Helper()
	var body map[string]any
	_ = json.Unmarshal(a.body, &body)
	secs, err := strconv.Atoi(a.retryAfter)
	lo, hi := max(int((least+time.Second-1)/time.Second), 1), max(int((most+time.Second-1)/time.Second), 1)
	if a.status != http.StatusTooManyRequests || err != nil || secs < lo || secs > hi || len(body) != 2 ||
		body["error"] != "Rate limit exceeded. Please try again later." || body["retry_after"] != float64(secs) {
		t.Fatalf("call %d (replica %d): %d Retry-After %q %s, want 429 with the exact body and Retry-After from %d to %d",
			call, replica, a.status, a.retryAfter, a.body, lo, hi)
	}
}
