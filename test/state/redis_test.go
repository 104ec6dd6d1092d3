package state

import (
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/gatewayd/state/redistest"
	"github.com/modelgate/modelgate/test/testutil"
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

// TestRedisAuthAndTLSProcesses: gatewayd processes on a Sentinel setup and a cluster that ask for an ACL user's
// password on their data nodes (the sentinels for one of their own) and serve TLS only, with a CA of their own,
// started as an operator starts them (--redis-username, --redis-tls, --redis-tls-ca-file, the passwords in
// MODELGATE_REDIS_PASSWORD and MODELGATE_REDIS_SENTINEL_PASSWORD, and --redis-wait-replicas=1): two replicas
// admit a limit exactly once; with a wrong password gatewayd exits at start, its log naming the variable and not
// quoting the password.
func TestRedisAuthAndTLSProcesses(t *testing.T) {
	for _, mode := range []string{redistest.Sentinel, redistest.Cluster} {
		t.Run(mode, func(t *testing.T) {
			sec := redistest.Security{Username: "gatewayd", Password: "data-s3cret", SentinelPassword: "sentinel-s3cret", TLS: true}
			d := redistest.StartSecured(t, mode, sec)
			// Billing writes wait for the replica too (the WAIT on an authenticated TLS connection).
			flags := append(redisFlags(d), "--redis-wait-replicas=1")
			t.Setenv("MODELGATE_REDIS_PASSWORD", sec.Password)
			t.Setenv("MODELGATE_REDIS_SENTINEL_PASSWORD", sec.SentinelPassword)
			testExactUnderConcurrency(t, 2, flags)

			t.Setenv("MODELGATE_REDIS_PASSWORD", "wr0ng")
			addr := "127.0.0.1:" + strconv.Itoa(testutil.MustFreePort(t))
			p := testutil.StartProcess(t, "gatewayd "+addr, kubeconfig, binary,
				append([]string{"--addr=" + addr, "--metrics-addr=127.0.0.1:0", "--namespaces=ns"}, flags...)...)
			select {
			case <-p.Done:
			case <-time.After(30 * time.Second):
				t.Fatal("gatewayd with a wrong Redis password is still running after 30s; want it to exit at start")
			}
			logs := p.Logs()
			if p.Cmd.ProcessState.ExitCode() == 0 || !strings.Contains(logs, "MODELGATE_REDIS_PASSWORD (of --redis-username gatewayd)") ||
				strings.Contains(logs, "wr0ng") {
				t.Errorf("gatewayd with a wrong Redis password exited %d; want non-zero, its log naming MODELGATE_REDIS_PASSWORD and not the password:\n%s",
					p.Cmd.ProcessState.ExitCode(), logs)
			}
		})
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
