// Package state opens and owns gatewayd's durable state, and hands it to its users: the limit counters
// (gatewayd/limits), the billing events and webhook outbox (gatewayd/billing), workspace keys' last uses
// (gatewayd/keyuse), the async inference queue (gatewayd/async/queue), which dashboard sessions are live
// (gatewayd/sessions), and the management API's rate-limit windows (limits.Windows). The embedded store is one
// bbolt file on a volume (one replica); the Redis store is one client shared by every user (several replicas). Nothing else in gatewayd opens a file or a connection for state, and Close
// flushes and closes in the one right order.
package state

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	bolt "go.etcd.io/bbolt"

	"github.com/modelgate/modelgate/gatewayd/async/queue"
	"github.com/modelgate/modelgate/gatewayd/billing"
	"github.com/modelgate/modelgate/gatewayd/keyuse"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/gatewayd/sessions"
)

// Store kinds.
const (
	Embedded = "embedded"
	Redis    = "redis"
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
	// FlushInterval is how often the embedded store writes DAY counters: the most usage a crash can lose.
	FlushInterval time.Duration
	// RedisURL reaches the Redis store (redis:// or rediss://, may carry a password).
	RedisURL string
	// RedisFailOpen admits limited calls while Redis is unreachable.
	RedisFailOpen bool
}

// BindFlags registers the flags of c on fs, with their defaults.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Store, "store", Embedded, "Where limit counters and billing events live: embedded (memory plus a bbolt file in --state-dir; one replica only) or redis (shared by every replica).")
	fs.StringVar(&c.Dir, "state-dir", "/var/lib/modelgate", "Directory of the embedded store's bbolt file and of the billing spool, which keeps billing events the store refused at shutdown (a volume in the chart).")
	fs.DurationVar(&c.FlushInterval, "flush-interval", limits.DefaultFlushInterval, "How often the embedded store writes DAY counters to disk: the most usage a crash can lose. A graceful stop (SIGTERM) flushes everything.")
	fs.StringVar(&c.RedisURL, "redis-url", "", "Redis URL of the redis store (redis:// or rediss://, may carry a password).")
	fs.BoolVar(&c.RedisFailOpen, "redis-fail-open", false, "Admit limited calls when Redis is unreachable, instead of answering 503 limits_unavailable.")
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
	if cfg.RedisURL == "" {
		return nil, errors.New("--redis-url: required with --store=redis")
	}
	ro, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("--redis-url: %w", err)
	}
	client := redis.NewClient(ro)
	r := limits.NewRedis(client, limits.RedisOptions{FailOpen: cfg.RedisFailOpen, Log: log})
	if err := r.Ping(ctx); err != nil {
		// Not fatal: gatewayd fails closed (or open) until Redis answers, and go-redis reconnects by itself.
		log.Error(err, "Redis does not answer yet", "failOpen", cfg.RedisFailOpen)
	}
	st := &State{limits: r, billing: billing.NewRedis(client, ""), keyUse: keyuse.NewRedis(client, ""), async: queue.NewRedis(client, ""),
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
	log.Info("Using the Redis store", "addr", ro.Addr, "failOpen", cfg.RedisFailOpen)
	return st, nil
}
