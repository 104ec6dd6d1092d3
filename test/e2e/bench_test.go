package e2e

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgate/modelgate/test/apibody"
	"github.com/modelgate/modelgate/test/stack"
	"github.com/modelgate/modelgate/test/testutil"
)

// BenchmarkApplyToEnforced measures, as a client sees it, the time from sending a management write to the
// inference route enforcing it: the REST call (API server write, admission webhook, the manager publishing the
// snapshot, gatewayd loading it) plus the first inference call that shows the change. Read-your-writes means
// that first call already shows it; stale_reads/op counts the iterations where it did not, and the loop then
// polls until the change is visible so that p50/p99 still measure real apply-to-enforced time.
//
//	KUBEBUILDER_ASSETS=$HOME/.cache/modelgate/envtest/v1.37.1 go test ./test/e2e/ -run '^$' -bench ApplyToEnforced -benchtime 50x -count=1
func BenchmarkApplyToEnforced(b *testing.B) {
	s := theStack(b)
	run := strconv.FormatInt(time.Now().UnixNano()%(1<<40), 36)

	// PATCH a group's models back and forth: without demo/echo the key's call must be refused with 404,
	// with it the call must pass.
	b.Run("PatchModels", func(b *testing.B) {
		group, key := benchGroup(b, s, "bench-patch-"+run)
		b.ResetTimer()
		measure(b, s, func(i int) (string, int) {
			models, want := []any{apibody.Model(otherSlug, nil, nil)}, http.StatusNotFound
			if i%2 == 1 {
				models, want = []any{apibody.Model(echo, nil, nil)}, http.StatusOK
			}
			expect(b, admin(b, s, http.MethodPatch, "/v1/gateway/groups/"+group, map[string]any{"models": models}), http.StatusOK, "")
			return key, want
		})
	})

	// Mint a key and call with it: the first call must not get 401.
	b.Run("MintKey", func(b *testing.B) {
		group, _ := benchGroup(b, s, "bench-mint-"+run)
		b.ResetTimer()
		measure(b, s, func(int) (string, int) {
			r := admin(b, s, http.MethodPost, "/v1/gateway/groups/"+group+"/api_keys", nil)
			expect(b, r, http.StatusCreated, "")
			return str(b, r.body, "api_key"), http.StatusOK
		})
	})
}

// benchGroups numbers the groups benchGroup creates: the framework runs a benchmark function more than once (b.N
// of 1 first), and the previous run's group may still be being deleted, its external id still held.
var benchGroups atomic.Int64

// benchGroup creates an unlimited root group on demo/echo with one key, deleted when the benchmark ends. Its
// external id is ext and a number of its own.
func benchGroup(b *testing.B, s *stack.Stack, ext string) (group, key string) {
	b.Helper()
	ext += "-" + strconv.FormatInt(benchGroups.Add(1), 10)
	r := admin(b, s, http.MethodPost, "/v1/gateway/groups", apibody.Group(ext, "", nil, apibody.Model(echo, nil, nil)))
	expect(b, r, http.StatusCreated, "")
	group = str(b, r.body, "id")
	b.Cleanup(func() { admin(b, s, http.MethodDelete, "/v1/gateway/groups/"+group, nil) })
	r = admin(b, s, http.MethodPost, "/v1/gateway/groups/"+group+"/api_keys", nil)
	expect(b, r, http.StatusCreated, "")
	return group, str(b, r.body, "api_key")
}

// measure runs write b.N times; write applies one change and returns the key to call with and the status that
// shows the change is enforced.
func measure(b *testing.B, s *stack.Stack, write func(i int) (key string, want int)) {
	lat := make([]time.Duration, 0, b.N)
	writes := make([]time.Duration, 0, b.N)
	stale := 0
	for i := range b.N {
		start := time.Now()
		key, want := write(i)
		writes = append(writes, time.Since(start))
		first := true
		for {
			r := infer(b, s, key, echo)
			if r.code == want {
				break
			}
			if first {
				stale++
				first = false
			}
			if time.Since(start) > 30*time.Second {
				b.Fatalf("iteration %d: the change was not enforced within 30 s; last answer %s", i, r)
			}
			time.Sleep(5 * time.Millisecond)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	b.ReportMetric(testutil.Millis(testutil.Percentile(lat, 0.50)), "p50_ms")
	b.ReportMetric(testutil.Millis(testutil.Percentile(lat, 0.99)), "p99_ms")
	b.ReportMetric(float64(stale)/float64(b.N), "stale_reads/op")
	// The REST call alone: the rest of each latency is the inference call that proves the change.
	b.ReportMetric(testutil.Millis(testutil.Percentile(writes, 0.50)), "write_p50_ms")
}
