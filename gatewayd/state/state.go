// Package state opens and owns gatewayd's durable state, and hands it to its users: the limit counters
// (gatewayd/limits), the billing events and webhook outbox (gatewayd/billing), workspace keys' last uses
// (gatewayd/keyuse), the async inference queue (gatewayd/async/queue), which dashboard sessions are live
// (gatewayd/sessions), and the management API's rate-limit windows (limits.Windows). The embedded store is one
// bbolt file on a volume (one replica); the Redis store is one client shared by every user (several replicas), of
// a standalone server, a Sentinel-watched primary or a Redis Cluster (redisclient). Nothing else in gatewayd opens
// a file or a connection for state, and Close flushes and closes in the one right order.
package state

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	bolt "go.etcd.io/bbolt"

	"github.com/modelgate/modelgate/gatewayd/async/queue"
	"github.com/modelgate/modelgate/gatewayd/billing"
	"github.com/modelgate/modelgate/gatewayd/keyuse"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/gatewayd/sessions"
	"github.com/modelgate/modelgate/gatewayd/state/redisclient"
)

// Store kinds.
const (
	Embedded = "embedded"
	Redis    = "redis"
)

// The environment variables that carry Redis's passwords (LoadSecrets), so they are in no flag and no command
// line; the chart sets them from a Secret.
const (
	RedisPasswordEnv         = "MODELGATE_REDIS_PASSWORD"
	RedisSentinelPasswordEnv = "MODELGATE_REDIS_SENTINEL_PASSWORD"
)

// File names in Config.Dir.
const (
	dbFile    = "gatewayd.db"
	spoolFile = "billing-spool.jsonl"
)

// Config chooses and tunes the store. Its fields are cmd/gatewayd's flags (BindFlags).
type Config struct {
	// Store is Embedded or Redis.
	Store string
	// Dir holds the embedded store's bbolt file and the billing spool.
	Dir string
	// FlushInterval is how often the embedded store writes DAY and MONTH counters: the most usage a crash can lose.
	FlushInterval time.Duration
	// RedisMode is the Redis deployment: redisclient.Standalone, Sentinel or Cluster.
	RedisMode string
	// RedisURL reaches a standalone Redis (redis:// or rediss://, may carry a password).
	RedisURL string
	// RedisAddrs are the sentinels or the cluster's seed nodes, host:port, comma-separated.
	RedisAddrs string
	// RedisMasterName is the name the sentinels know the primary by.
	RedisMasterName string
	// RedisUsername is the ACL user of the data nodes (Redis 6+); empty for the default user.
	RedisUsername string
	// RedisPassword and RedisSentinelPassword come from the environment (LoadSecrets), never from a flag.
	RedisPassword, RedisSentinelPassword string
	// RedisTLS dials the sentinels and the nodes over TLS.
	RedisTLS bool
	// RedisTLSCAFile is a PEM file of the CAs that sign Redis's certificates; empty trusts the system's.
	RedisTLSCAFile string
	// RedisFailOpen admits limited calls while Redis is unreachable.
	RedisFailOpen bool
	// RedisWaitReplicas is how many replicas must acknowledge an accepted async request and a billing write before
	// it is answered (Redis's WAIT); 0 waits for none.
	RedisWaitReplicas int
	// RedisWaitTimeout bounds each WAIT; past it the write stays and the call succeeds, counted short.
	RedisWaitTimeout time.Duration
}

// BindFlags registers the flags of c on fs, with their defaults.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Store, "store", Embedded, "Where limit counters and billing events live: embedded (memory plus a bbolt file in --state-dir; one replica only) or redis (shared by every replica).")
	fs.StringVar(&c.Dir, "state-dir", "/var/lib/modelgate", "Directory of the embedded store's bbolt file and of the billing spool, which keeps billing events the store refused at shutdown (a volume in the chart).")
	fs.DurationVar(&c.FlushInterval, "flush-interval", limits.DefaultFlushInterval, "How often the embedded store writes DAY and MONTH counters to disk: the most usage a crash can lose. A graceful stop (SIGTERM) flushes everything.")
	fs.StringVar(&c.RedisMode, "redis-mode", redisclient.Standalone, "The Redis deployment of the redis store: standalone (--redis-url), sentinel (--redis-addrs of the sentinels and --redis-master-name) or cluster (--redis-addrs of some of its nodes).")
	fs.StringVar(&c.RedisURL, "redis-url", "", "Redis URL of a standalone redis store (redis:// or rediss://, may carry a username and password).")
	fs.StringVar(&c.RedisAddrs, "redis-addrs", "", "With --redis-mode=sentinel, the sentinels; with cluster, some of its nodes: host:port, comma-separated.")
	fs.StringVar(&c.RedisMasterName, "redis-master-name", "", "With --redis-mode=sentinel, the name the sentinels know the primary by.")
	fs.StringVar(&c.RedisUsername, "redis-username", "", "ACL user of the Redis nodes (empty: the default user). The password is read from $"+RedisPasswordEnv+", the sentinels' from $"+RedisSentinelPasswordEnv+".")
	fs.StringVar(&c.RedisTLSCAFile, "redis-tls-ca-file", "", "PEM file of the CAs that sign Redis's certificates, for a CA that is not one of the system's (with rediss:// or --redis-tls).")
	fs.BoolVar(&c.RedisTLS, "redis-tls", false, "With --redis-mode=sentinel or cluster, dial the sentinels and the nodes over TLS (standalone: a rediss:// URL).")
	fs.IntVar(&c.RedisWaitReplicas, "redis-wait-replicas", 0, "How many Redis replicas must acknowledge the write that accepts an async request, and each billing write, before gatewayd answers (WAIT on the primary that took it), so that a failover does not lose them; 0 waits for none. Limit counters never wait.")
	fs.DurationVar(&c.RedisWaitTimeout, "redis-wait-timeout", redisclient.DefaultWaitTimeout, "How long a write of --redis-wait-replicas waits for its replicas; past it the write stays, the call succeeds, and modelgate_redis_wait_short_total counts it.")
	fs.BoolVar(&c.RedisFailOpen, "redis-fail-open", false, "Admit limited calls when Redis is unreachable, instead of answering 503 limits_unavailable.")
}

// LoadSecrets reads Redis's passwords from the environment through getenv (os.Getenv).
func (c *Config) LoadSecrets(getenv func(string) string) {
	c.RedisPassword, c.RedisSentinelPassword = getenv(RedisPasswordEnv), getenv(RedisSentinelPasswordEnv)
}

// redisOptions checks the Redis flags against the mode and returns the client's options. Errors name the flag.
func (c *Config) redisOptions() (redisclient.Options, error) {
	o := redisclient.Options{Mode: c.RedisMode, URL: c.RedisURL, MasterName: c.RedisMasterName, Username: c.RedisUsername,
		Password: c.RedisPassword, SentinelPassword: c.RedisSentinelPassword, TLS: c.RedisTLS, TLSCAFile: c.RedisTLSCAFile}
	for _, a := range strings.Split(c.RedisAddrs, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return o, fmt.Errorf("--redis-addrs: %q is not host:port", a)
		} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return o, fmt.Errorf("--redis-addrs: %q has no port between 1 and 65535", a)
		}
		o.Addrs = append(o.Addrs, a)
	}
	switch {
	case c.RedisWaitReplicas < 0:
		return o, fmt.Errorf("--redis-wait-replicas: must be 0 or more, not %d", c.RedisWaitReplicas)
	case c.RedisWaitReplicas > 0 && c.RedisWaitTimeout <= 0:
		// Redis's WAIT with no timeout blocks until enough replicas answer, which may be never.
		return o, fmt.Errorf("--redis-wait-timeout: must be more than 0 with --redis-wait-replicas, not %s", c.RedisWaitTimeout)
	}
	switch c.RedisMode {
	case redisclient.Standalone:
		switch {
		case c.RedisURL == "":
			return o, errors.New("--redis-url: required with --store=redis and --redis-mode=standalone")
		case len(o.Addrs) > 0:
			return o, errors.New("--redis-addrs: only with --redis-mode=sentinel or cluster; a standalone Redis takes --redis-url")
		case c.RedisTLS:
			return o, errors.New("--redis-tls: only with --redis-mode=sentinel or cluster; a standalone Redis says TLS with a rediss:// URL")
		case c.RedisTLSCAFile != "" && !strings.HasPrefix(c.RedisURL, "rediss://"):
			return o, errors.New("--redis-tls-ca-file: only with TLS; a standalone Redis says TLS with a rediss:// URL")
		}
	case redisclient.Sentinel, redisclient.Cluster:
		switch {
		case c.RedisURL != "":
			return o, fmt.Errorf("--redis-url: only with --redis-mode=standalone; %s takes --redis-addrs", c.RedisMode)
		case len(o.Addrs) == 0:
			return o, fmt.Errorf("--redis-addrs: required with --redis-mode=%s", c.RedisMode)
		case c.RedisMode == redisclient.Sentinel && c.RedisMasterName == "":
			return o, errors.New("--redis-master-name: required with --redis-mode=sentinel")
		case c.RedisMode == redisclient.Cluster && c.RedisMasterName != "":
			return o, errors.New("--redis-master-name: only with --redis-mode=sentinel")
		case c.RedisTLSCAFile != "" && !c.RedisTLS:
			return o, errors.New("--redis-tls-ca-file: only with --redis-tls")
		}
	default:
		return o, fmt.Errorf("--redis-mode: must be %s, %s or %s, not %q", redisclient.Standalone, redisclient.Sentinel, redisclient.Cluster, c.RedisMode)
	}
	return o, nil
}

// State is the opened store.
type State struct {
	limits  limits.Store
	billing billing.Store
	keyUse  keyuse.Store
	async   queue.Store
	session sessions.Store
	windows limits.Windows
	spool   string
	// collectors are the store's metrics, for gatewayd's registry.
	collectors []prometheus.Collector
	// closers run in order on Close: the users first (they flush), then what they share.
	closers []func() error
}

// Limits is the limit counter store.
func (s *State) Limits() limits.Store { return s.limits }

// Billing is the billing event store and webhook outbox.
func (s *State) Billing() billing.Store { return s.billing }

// KeyUse is the store of workspace keys' last uses.
func (s *State) KeyUse() keyuse.Store { return s.keyUse }

// Async is the async inference queue.
func (s *State) Async() queue.Store { return s.async }

// Sessions is the store of live dashboard sessions.
func (s *State) Sessions() sessions.Store { return s.session }

// ManagementLimits counts the management API's rate limits: this process's memory on the embedded store, shared
// by every replica on Redis.
func (s *State) ManagementLimits() limits.Windows { return s.windows }

// Collectors are the store's metrics (Redis's short WAITs), for gatewayd's registry.
func (s *State) Collectors() []prometheus.Collector { return s.collectors }

// Spool is the file that keeps billing events the store refused at shutdown; empty when there is none.
func (s *State) Spool() string { return s.spool }

// Close flushes the users of the store, then closes it. Call it once nothing charges the store any more.
func (s *State) Close() error {
	var errs []error
	for _, c := range s.closers {
		errs = append(errs, c())
	}
	return errors.Join(errs...)
}

// Open opens the store cfg chooses. Errors name the flag at fault.
func Open(ctx context.Context, cfg Config) (*State, error) {
	switch cfg.Store {
	case Embedded:
		return openEmbedded(ctx, cfg)
	case Redis:
		return openRedis(ctx, cfg)
	}
	return nil, fmt.Errorf("--store: must be %s or %s, not %q", Embedded, Redis, cfg.Store)
}

func openEmbedded(ctx context.Context, cfg Config) (*State, error) {
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("--state-dir: failed to create %s: %w", cfg.Dir, err)
	}
	path := filepath.Join(cfg.Dir, dbFile)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("--state-dir: failed to open the state file %s: %w", path, err)
	}
	e, err := limits.NewEmbedded(db, limits.EmbeddedOptions{FlushInterval: cfg.FlushInterval})
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	aq, err := queue.NewBolt(db)
	if err != nil {
		_ = e.Close()
		_ = db.Close()
		return nil, err
	}
	logr.FromContextOrDiscard(ctx).Info("Using the embedded store", "stateDir", cfg.Dir, "flushInterval", cfg.FlushInterval.String())
	return &State{limits: e, billing: billing.NewBolt(db), keyUse: keyuse.NewBolt(db), async: aq,
		session: sessions.NewBolt(db), windows: limits.NewMemoryWindows(), spool: filepath.Join(cfg.Dir, spoolFile),
		closers: []func() error{e.Close, db.Close}}, nil
}

func openRedis(ctx context.Context, cfg Config) (*State, error) {
	log := logr.FromContextOrDiscard(ctx)
	if cfg.RedisMode == "" {
		cfg.RedisMode = redisclient.Standalone
	}
	o, err := cfg.redisOptions()
	if err != nil {
		return nil, err
	}
	client, err := redisclient.New(o)
	if errors.Is(err, redisclient.ErrCAFile) {
		return nil, fmt.Errorf("--redis-tls-ca-file: %w", err)
	}
	if err != nil {
		// url.Parse's error quotes the URL, password and all: keep only what it says is wrong.
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("--redis-url: %w", err)
	}
	checkCtx, cancel := context.WithTimeout(ctx, redisCheckTimeout)
	err = redisclient.Check(checkCtx, o, client)
	cancel()
	if ae := (*redisclient.AuthError)(nil); errors.As(err, &ae) {
		// Credentials a server refuses stay refused: stop here, naming the setting, rather than fail every call.
		_ = client.Close()
		return nil, fmt.Errorf("%s: %w", cfg.credentialSetting(ae.Sentinel), err)
	}
	if err != nil {
		// Not fatal: gatewayd fails closed (or open) until Redis answers, and go-redis reconnects by itself.
		log.Error(err, "Redis does not answer yet", "failOpen", cfg.RedisFailOpen)
	}
	r := limits.NewRedis(client, limits.RedisOptions{FailOpen: cfg.RedisFailOpen, Log: log})
	// Limit counters do not wait: a check is on every call's path (docs/decisions.md, "Redis Cluster and Sentinel").
	wait := redisclient.NewWait(cfg.RedisWaitReplicas, cfg.RedisWaitTimeout, log.WithName("redis-wait"))
	st := &State{limits: r, billing: billing.NewRedis(client, "").WithWait(wait), keyUse: keyuse.NewRedis(client, ""),
		async:   queue.NewRedis(client, "").WithWait(wait),
		session: sessions.NewRedis(client), windows: limits.NewRedisWindows(client, "", log.WithName("management-limits")),
		// The store queues token charges: flush them before the client goes.
		closers: []func() error{r.Close, client.Close}}
	// The spool keeps billing events that Redis refuses at shutdown. In Redis mode the state directory is
	// optional; without it those events are lost, which the log says at the time.
	if cfg.Dir != "" {
		if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
			log.Error(err, "No billing spool: --state-dir cannot be created", "stateDir", cfg.Dir)
		} else {
			st.spool = filepath.Join(cfg.Dir, spoolFile)
		}
	}
	if wait != nil {
		st.collectors = append(st.collectors, wait.Collector())
	}
	log.Info("Using the Redis store", "mode", cfg.RedisMode, "addrs", redisAddrs(o, client), "failOpen", cfg.RedisFailOpen,
		"waitReplicas", cfg.RedisWaitReplicas)
	return st, nil
}

// redisCheckTimeout bounds the start's check of Redis's credentials; a Redis that does not answer by then is
// waited for by the calls, not by the start.
const redisCheckTimeout = 10 * time.Second

// credentialSetting names where the credentials a sentinel (or a data node) refused come from, for the error that
// stops the start: never the credentials themselves.
func (c *Config) credentialSetting(sentinel bool) string {
	switch {
	case sentinel:
		return "$" + RedisSentinelPasswordEnv
	case c.RedisMode == redisclient.Standalone && urlHasCredentials(c.RedisURL):
		// A URL's username and password win over the others (redisclient.New).
		return "--redis-url"
	case c.RedisUsername != "":
		return "$" + RedisPasswordEnv + " (of --redis-username " + c.RedisUsername + ")"
	}
	return "$" + RedisPasswordEnv
}

func urlHasCredentials(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.User != nil
}

// redisAddrs names what client dials, for the log: never the URL, which may carry a password.
func redisAddrs(o redisclient.Options, client redis.UniversalClient) []string {
	if c, ok := client.(*redis.Client); ok && o.Mode == redisclient.Standalone {
		return []string{c.Options().Addr}
	}
	return o.Addrs
}
