package state

import (
	"net/http"
	"syscall"
	"testing"
	"time"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

// TestRedisExactUnderConcurrency: 1,000 concurrent calls against a REQUEST DAY limit of 100 admit exactly
// 100, served by one gatewayd and by two gatewayd processes sharing Redis, on each Redis deployment.
func TestRedisExactUnderConcurrency(t *testing.T) {
	for _, replicas := range []int{1, 2} {
		t.Run(map[int]string{1: "one-gatewayd", 2: "two-gatewayds"}[replicas], func(t *testing.T) {
			onEachRedis(t, func(t *testing.T, flags ...string) { testExactUnderConcurrency(t, replicas, flags) })
		})
	}
}

func testExactUnderConcurrency(t *testing.T, replicas int, flags []string) {
	w := newWorkspace(t, gatewayv1.LimitEnforcement("INDEPENDENT"), []gatewaytest.Group{{ID: "acme", Models: usageLimited(100)}}, nil)
	var urls []string
	for range replicas {
		urls = append(urls, startGatewayd(t, w.ns, flags...).url)
	}
	c := hammer(1000, urls, []string{w.keys["acme"]})
	if got := c.get(http.StatusOK); got != 100 {
		t.Fatalf("admitted %d of 1000 concurrent calls across %d gatewayd, want exactly 100 (answers %v)", got, replicas, c.by)
	}
	if got := c.get(http.StatusTooManyRequests); got != 900 {
		t.Fatalf("refused %d, want 900 (answers %v)", got, c.by)
	}
}

// TestRedisCascadingSiblingsShareParentPool: in a CASCADING tree, sibling keys hammering through two
// gatewayd processes get, together, exactly the parent's threshold.
func TestRedisCascadingSiblingsShareParentPool(t *testing.T) {
	onEachRedis(t, testCascadingSiblingsShareParentPool)
}

func testCascadingSiblingsShareParentPool(t *testing.T, flags ...string) {
	groups := []gatewaytest.Group{
		{ID: "parent", Models: usageLimited(60)},
		{ID: "leaf-a", Parent: "parent", Models: usageLimited(60)},
		{ID: "leaf-b", Parent: "parent", Models: usageLimited(60)},
		{ID: "leaf-c", Parent: "parent", Models: usageLimited(60)},
	}
	w := newWorkspace(t, gatewayv1.LimitEnforcement("CASCADING"), groups, nil)
	a := startGatewayd(t, w.ns, flags...)
	b := startGatewayd(t, w.ns, flags...)
	c := hammer(600, []string{a.url, b.url}, []string{w.keys["leaf-a"], w.keys["leaf-b"], w.keys["leaf-c"]})
	if got := c.get(http.StatusOK); got != 60 {
		t.Fatalf("siblings admitted %d in total, want exactly the parent's 60 (answers %v)", got, c.by)
	}
}

// TestRedisOutageFailsClosedAndRecovers: with Redis killed mid-load, limited calls get 503
// limits_unavailable and gatewayd keeps running; once Redis is back on the same port, calls pass again
// without a restart.
func TestRedisOutageFailsClosedAndRecovers(t *testing.T) {
	srv := redistest.Start(t)
	w := newWorkspace(t, gatewayv1.LimitEnforcement("INDEPENDENT"), []gatewaytest.Group{{ID: "acme", Models: usageLimited(100000)}}, nil)
	g := startGatewayd(t, w.ns, "--store=redis", "--redis-url="+srv.URL())
	key := []string{w.keys["acme"]}
	if c := hammer(50, []string{g.url}, key); c.get(http.StatusOK) != 50 {
		t.Fatalf("before the outage: answers %v, want 50 x 200", c.by)
	}
	// Kill Redis while calls are in flight.
	done := make(chan *tally)
	go func() { done <- hammer(200, []string{g.url}, key) }()
	srv.Kill()
	during := <-done
	after := hammer(50, []string{g.url}, key)
	if after.get(http.StatusServiceUnavailable) != 50 || after.codes["limits_unavailable"] != 50 {
		t.Fatalf("with Redis down: answers %v codes %v, want 50 x 503 limits_unavailable", after.by, after.codes)
	}
	if n := during.get(http.StatusOK) + during.get(http.StatusServiceUnavailable); n != 200 {
		t.Fatalf("calls in flight when Redis died: answers %v, want only 200 or 503", during.by)
	}
	if !g.alive() {
		t.Fatal("gatewayd exited when Redis died")
	}
	srv.Restart()
	var last *tally
	for range 400 { // go-redis redials on its own; give it up to 20s on a loaded machine
		if last = hammer(1, []string{g.url}, key); last.get(http.StatusOK) == 1 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if last.get(http.StatusOK) != 1 {
		t.Fatalf("after Redis came back: answers %v, want 200", last.by)
	}
	if c := hammer(50, []string{g.url}, key); c.get(http.StatusOK) != 50 {
		t.Fatalf("after recovery: answers %v, want 50 x 200", c.by)
	}
}

// TestRedisSIGTERMKeepsCounters: a gatewayd stopped with SIGTERM during load and restarted sees the day's
// count equal to the calls it admitted.
func TestRedisSIGTERMKeepsCounters(t *testing.T) {
	srv := redistest.Start(t)
	w := newWorkspace(t, gatewayv1.LimitEnforcement("INDEPENDENT"), []gatewaytest.Group{{ID: "acme", Models: usageLimited(restartLimit)}}, nil)
	testRestartKeepsCounters(t, w, syscall.SIGTERM, 0, "--store=redis", "--redis-url="+srv.URL())
}
