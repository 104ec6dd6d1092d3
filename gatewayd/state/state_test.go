package state_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/modelgate/modelgate/gatewayd/async/queue"
	"github.com/modelgate/modelgate/gatewayd/billing"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/gatewayd/state"
	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

// charge admits one call against a DAY REQUEST limit and records one billing event, through the users the state
// hands out.
func charge(t *testing.T, st *state.State, now time.Time) {
	t.Helper()
	ctx := context.Background()
	p := &limits.Plan{Limits: []limits.Limit{{Key: limits.BucketKey{Namespace: "ns", Group: "g", Slug: "s", Type: limits.Request, Unit: limits.Day}, Threshold: 100}}}
	if err := st.Limits().Bind(p); err != nil {
		t.Fatal(err)
	}
	if res, err := st.Limits().Admit(ctx, p, now); err != nil || !res.Allowed {
		t.Fatalf("admit: %+v, %v", res, err)
	}
	if err := st.Billing().Append(ctx, []billing.Record{{Namespace: "ns", Event: billing.Event{IdempotencyKey: "evt_" + now.Format(time.RFC3339Nano), Timestamp: now}}}); err != nil {
		t.Fatal(err)
	}
}

// openAndWrite opens the store cfg chooses, closed when the test ends, and charges a call, records its event and
// accepts an async request through it.
func openAndWrite(t *testing.T, cfg state.Config) (*state.State, time.Time) {
	t.Helper()
	st, err := state.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	now := time.Now().UTC()
	charge(t, st, now)
	enqueue(t, st, now)
	return st, now
}

// enqueue accepts one async request through the queue the state hands out.
func enqueue(t *testing.T, st *state.State, now time.Time) {
	t.Helper()
	r := &queue.Request{ID: "req", Namespace: "ns", ModelID: "m", DeploymentID: "d", Status: queue.Queued,
		CreatedAt: now, StatusAt: now, MaxTimeInQueueSeconds: 60}
	if err := st.Async().Enqueue(context.Background(), r); err != nil {
		t.Fatal(err)
	}
}

func count(t *testing.T, st *state.State, now time.Time) (usage int64, events int) {
	t.Helper()
	ctx := context.Background()
	n, err := st.Limits().Count(ctx, limits.BucketKey{Namespace: "ns", Group: "g", Slug: "s", Type: limits.Request, Unit: limits.Day}, now)
	if err != nil {
		t.Fatal(err)
	}
	evs, _, err := st.Billing().List(ctx, "ns", billing.Query{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return n, len(evs)
}

// redisConfig is the configuration gatewayd's flags give to reach d; its passwords come from the environment
// (secrets).
func redisConfig(d *redistest.Deployment) state.Config {
	o := d.Options()
	return state.Config{Store: state.Redis, RedisMode: o.Mode, RedisURL: o.URL, RedisAddrs: strings.Join(o.Addrs, ","),
		RedisMasterName: o.MasterName, RedisUsername: o.Username, RedisTLS: o.TLS, RedisTLSCAFile: o.TLSCAFile}
}

// secrets is an environment that holds the passwords given.
func secrets(password, sentinelPassword string) func(string) string {
	return func(name string) string {
		return map[string]string{state.RedisPasswordEnv: password, state.RedisSentinelPasswordEnv: sentinelPassword}[name]
	}
}

// TestStateSurvivesAReopen: what the limit store and the billing store wrote is there after Close and Open,
// for the embedded store (one bbolt file) and the Redis store on each deployment (standalone, Sentinel and
// Cluster, real redis-server processes).
func TestStateSurvivesAReopen(t *testing.T) {
	now := time.Now().UTC()
	configs := map[string]func(t *testing.T) state.Config{
		"embedded": func(t *testing.T) state.Config {
			return state.Config{Store: state.Embedded, Dir: t.TempDir(), FlushInterval: -1}
		},
	}
	for _, mode := range redistest.Modes {
		configs["redis-"+mode] = func(t *testing.T) state.Config { return redisConfig(redistest.StartDeployment(t, mode)) }
	}
	for name, config := range configs {
		t.Run(name, func(t *testing.T) {
			cfg := config(t)
			st, err := state.Open(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			charge(t, st, now)
			charge(t, st, now.Add(time.Millisecond))
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			st, err = state.Open(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if n, evs := count(t, st, now); n != 2 || evs != 2 {
				t.Fatalf("after a reopen: DAY count %d, %d billing events; want 2 and 2", n, evs)
			}
		})
	}
}

// TestOpenNamesTheFlagAtFault: a refused configuration names the flag to fix.
func TestOpenNamesTheFlagAtFault(t *testing.T) {
	for _, tc := range []struct {
		cfg  state.Config
		flag string
	}{
		{state.Config{Store: "sqlite"}, "--store"},
		{state.Config{Store: state.Redis}, "--redis-url"},
		{state.Config{Store: state.Redis, RedisURL: "http://not-redis"}, "--redis-url"},
		{state.Config{Store: state.Embedded, Dir: "/proc/forbidden/dir"}, "--state-dir"},
		{state.Config{Store: state.Redis, RedisMode: "replicated", RedisURL: "redis://a:1"}, "--redis-mode"},
		{state.Config{Store: state.Redis, RedisURL: "redis://a:1", RedisAddrs: "b:2"}, "--redis-addrs"},
		{state.Config{Store: state.Redis, RedisURL: "redis://a:1", RedisTLS: true}, "--redis-tls"},
		{state.Config{Store: state.Redis, RedisMode: "sentinel", RedisAddrs: "a:26379"}, "--redis-master-name"},
		{state.Config{Store: state.Redis, RedisMode: "sentinel", RedisMasterName: "m"}, "--redis-addrs"},
		{state.Config{Store: state.Redis, RedisMode: "cluster", RedisAddrs: "a:1,b"}, "--redis-addrs"},
		{state.Config{Store: state.Redis, RedisMode: "cluster", RedisAddrs: "a:0"}, "--redis-addrs"},
		{state.Config{Store: state.Redis, RedisMode: "cluster", RedisAddrs: "a:1", RedisMasterName: "m"}, "--redis-master-name"},
		{state.Config{Store: state.Redis, RedisMode: "cluster", RedisAddrs: "a:1", RedisURL: "redis://a:1"}, "--redis-url"},
		{state.Config{Store: state.Redis, RedisURL: "redis://a:1", RedisWaitReplicas: -1}, "--redis-wait-replicas"},
		{state.Config{Store: state.Redis, RedisURL: "redis://a:1", RedisWaitReplicas: 1}, "--redis-wait-timeout"},
	} {
		if _, err := state.Open(context.Background(), tc.cfg); err == nil || !strings.HasPrefix(err.Error(), tc.flag+":") {
			t.Errorf("%+v: error %v, want one that begins with %s", tc.cfg, err, tc.flag)
		}
	}
}

// TestRedisPasswordStaysOutOfErrors: a URL that does not parse is refused without quoting it, so its password
// reaches no log.
func TestRedisPasswordStaysOutOfErrors(t *testing.T) {
	_, err := state.Open(context.Background(), state.Config{Store: state.Redis, RedisURL: "redis://user:s3cret@host:port"})
	if err == nil || !strings.HasPrefix(err.Error(), "--redis-url:") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error %v: want one that names --redis-url and not the password", err)
	}
}

// TestRedisPasswordFromTheEnvironment: a Redis that asks for a password is reached with the one LoadSecrets reads
// from the environment; without it, or with a wrong one, gatewayd does not start, and the error names the
// setting (and not the password).
func TestRedisPasswordFromTheEnvironment(t *testing.T) {
	srv := redistest.StartArgs(t, "--requirepass", "s3cret")
	cfg := state.Config{Store: state.Redis, RedisURL: srv.URL()}
	cfg.LoadSecrets(secrets("s3cret", ""))
	st, err := state.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	charge(t, st, time.Now().UTC())

	for _, password := range []string{"", "wr0ng"} {
		cfg.LoadSecrets(secrets(password, ""))
		refusedAtStart(t, cfg, "$"+state.RedisPasswordEnv+":", password)
	}
	// A URL's password is the URL's setting.
	cfg.LoadSecrets(secrets("", ""))
	cfg.RedisURL = "redis://:wr0ng@" + srv.Addr()
	refusedAtStart(t, cfg, "--redis-url:", "wr0ng")
}

// refusedAtStart checks that Open refuses cfg with an error that begins with setting and does not hold password.
func refusedAtStart(t *testing.T, cfg state.Config, setting, password string) {
	t.Helper()
	st, err := state.Open(context.Background(), cfg)
	if err == nil {
		_ = st.Close()
		t.Fatalf("gatewayd started with credentials Redis refuses; want an error naming %s", setting)
	}
	if !strings.HasPrefix(err.Error(), setting) || (password != "" && strings.Contains(err.Error(), password)) {
		t.Errorf("error %q: want one that begins with %s and does not quote the password", err, setting)

	}
}

// TestRedisAuthAndTLSOnSentinelAndCluster: a Sentinel setup and a cluster that ask for a password of an ACL user on
// their data nodes (and another on the sentinels) and serve TLS only, with certificates of a CA of their own, are
// reached with the flags and environment an operator gives (--redis-username, --redis-tls, --redis-tls-ca-file,
// MODELGATE_REDIS_PASSWORD, MODELGATE_REDIS_SENTINEL_PASSWORD); a wrong password stops the start with an error
// that names its setting.
func TestRedisAuthAndTLSOnSentinelAndCluster(t *testing.T) {
	for _, mode := range []string{redistest.Sentinel, redistest.Cluster} {
		t.Run(mode, func(t *testing.T) {
			sec := redistest.Security{Username: "gatewayd", Password: "data-s3cret", TLS: true}
			if mode == redistest.Sentinel {
				sec.SentinelPassword = "sentinel-s3cret"
			}
			d := redistest.StartSecured(t, mode, sec)
			cfg := redisConfig(d)
			if cfg.RedisUsername != "gatewayd" || !cfg.RedisTLS || cfg.RedisTLSCAFile == "" {
				t.Fatalf("the flags do not ask for the user and TLS: %+v", cfg)
			}
			cfg.LoadSecrets(secrets(sec.Password, sec.SentinelPassword))
			st, now := openAndWrite(t, cfg)
			if usage, events := count(t, st, now); usage != 1 || events != 1 {
				t.Errorf("read back %d calls and %d events, want 1 and 1", usage, events)
			}

			cfg.LoadSecrets(secrets("wr0ng", sec.SentinelPassword))
			refusedAtStart(t, cfg, "$"+state.RedisPasswordEnv+" (of --redis-username gatewayd):", "wr0ng")
			if mode == redistest.Sentinel {
				cfg.LoadSecrets(secrets(sec.Password, "wr0ng"))
				refusedAtStart(t, cfg, "$"+state.RedisSentinelPasswordEnv+":", "wr0ng")
			}
		})
	}
}

// TestRedisKeyLayout: on standalone Redis and Sentinel the stores write the keys of earlier releases, so an
// upgrade keeps their data (docs/operations.md, "Upgrading, and moving to Sentinel or Redis Cluster"); on a
// cluster the namespace is a hash tag and the async queue one slot.
func TestRedisKeyLayout(t *testing.T) {
	want := map[string][]string{
		redistest.Standalone: {"mg:ns:g:s", "mg:billing:events:ns", "mg:billing:namespaces", "mg:async:queues"},
		redistest.Sentinel:   {"mg:ns:g:s", "mg:billing:events:ns", "mg:billing:namespaces", "mg:async:queues"},
		redistest.Cluster:    {"mg:{ns}:g:s", "mg:billing:events:{ns}", "mg:billing:namespaces", "{mg:async}:queues"},
	}
	redistest.Each(t, func(t *testing.T, d *redistest.Deployment) {
		openAndWrite(t, redisConfig(d))
		keys, err := redistest.Keys(context.Background(), d.Client(), "*")
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range want[d.Mode] {
			if !slices.Contains(keys, k) {
				t.Errorf("no key %s among %v", k, keys)
			}
		}
	})
}

// TestRedisTLSWithItsOwnCA: a standalone Redis that serves TLS only, with a certificate its own CA signs, is
// reached by rediss:// with --redis-tls-ca-file, and refused without it (the system's roots do not know that CA).
func TestRedisTLSWithItsOwnCA(t *testing.T) {
	srv, ca := redistest.StartTLS(t)
	cfg := state.Config{Store: state.Redis, RedisURL: "rediss://" + srv.Addr(), RedisTLSCAFile: ca}
	st, err := state.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	charge(t, st, time.Now().UTC())

	cfg.RedisTLSCAFile = ""
	untrusting, err := state.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer untrusting.Close()
	if _, err := untrusting.Limits().Count(context.Background(), limits.BucketKey{Namespace: "ns"}, time.Now()); err == nil ||
		!strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client that does not know the CA: %v, want a certificate error", err)
	}
	for _, bad := range []state.Config{
		{Store: state.Redis, RedisURL: "redis://" + srv.Addr(), RedisTLSCAFile: ca},
		{Store: state.Redis, RedisURL: "rediss://" + srv.Addr(), RedisTLSCAFile: "/nonexistent/ca.crt"},
		{Store: state.Redis, RedisMode: "cluster", RedisAddrs: srv.Addr(), RedisTLSCAFile: ca},
	} {
		if _, err := state.Open(context.Background(), bad); err == nil || !strings.HasPrefix(err.Error(), "--redis-tls-ca-file:") {
			t.Errorf("%+v: error %v, want one that names --redis-tls-ca-file", bad, err)
		}
	}
}

// TestRedisWaitFromTheFlags: --redis-wait-replicas and --redis-wait-timeout reach the async queue and the billing
// store, and their short WAITs are counted in the collector gatewayd registers.
func TestRedisWaitFromTheFlags(t *testing.T) {
	ctx := context.Background()
	d := redistest.StartDeployment(t, redistest.Sentinel)
	cfg := redisConfig(d)
	cfg.RedisWaitReplicas, cfg.RedisWaitTimeout = 1, 200*time.Millisecond
	st, err := state.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	reg := prometheus.NewRegistry()
	for _, c := range st.Collectors() {
		reg.MustRegister(c)
	}
	d.Nodes[1].Pause()
	now := time.Now().UTC()
	charge(t, st, now)
	enqueue(t, st, now)
	want := `
# HELP modelgate_redis_wait_short_total Writes (by what they stored) whose WAIT saw fewer replicas acknowledge than --redis-wait-replicas within --redis-wait-timeout; the write stayed and the call succeeded.
# TYPE modelgate_redis_wait_short_total counter
modelgate_redis_wait_short_total{write="async_request"} 1
modelgate_redis_wait_short_total{write="billing_events"} 1
`
	if err := promtestutil.GatherAndCompare(reg, strings.NewReader(want), "modelgate_redis_wait_short_total"); err != nil {
		t.Fatal(err)
	}
}
