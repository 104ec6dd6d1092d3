// Command gatewayd is the modelgate data plane: it serves the /v1 REST API and the OpenAI-compatible model
// calls, authenticating, limiting and forwarding each one from the snapshots the manager publishes. Replicas
// are stateless apart from the limiter store, so it scales horizontally.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/modelgate/modelgate/gatewayd"
	"github.com/modelgate/modelgate/gatewayd/billing"
	"github.com/modelgate/modelgate/gatewayd/inference"
	"github.com/modelgate/modelgate/gatewayd/limits"
)

func main() {
	var (
		opts       gatewayd.Options
		namespaces string
		st         stateFlags
	)
	flag.StringVar(&opts.Addr, "addr", ":8080", "Address gatewayd serves model calls, the REST API, /healthz and /readyz on.")
	flag.StringVar(&opts.MetricsAddr, "metrics-addr", ":9090", "Address of /metrics (every workspace's series): keep it inside the cluster. Empty turns it off.")
	flag.StringVar(&namespaces, "namespaces", "", "Comma-separated workspace namespaces to serve; empty serves every namespace with a snapshot.")
	flag.DurationVar(&opts.UpstreamTimeout, "upstream-timeout", gatewayd.DefaultUpstreamTimeout, "Bound on one upstream call (response headers, and each gap between streamed chunks) for Endpoints that set no timeout.")
	flag.Int64Var(&opts.MaxBodyBytes, "max-body-bytes", gatewayd.DefaultMaxBodyBytes, "Largest request body accepted.")
	flag.IntVar(&opts.MaxInFlightPerKey, "max-in-flight-per-key", inference.DefaultMaxInFlightPerKey, "Most model calls of one federated key whose bodies gatewayd holds at once; more answer 429.")
	flag.DurationVar(&opts.ShutdownGrace, "shutdown-grace", gatewayd.DefaultShutdownGrace, "How long a stop (SIGTERM) lets calls in flight, streams included, finish before cutting them. Keep it below the pod's terminationGracePeriodSeconds.")
	flag.DurationVar(&opts.SecretTTL, "secret-ttl", gatewayd.DefaultSecretTTL, "How long an upstream key read from its Secret is reused before it is read again.")
	flag.StringVar(&st.store, "store", "embedded", "Where limit counters and billing events live: embedded (memory plus a bbolt file in --state-dir; one replica only) or redis (shared by every replica).")
	flag.StringVar(&st.stateDir, "state-dir", "/var/lib/modelgate", "Directory of the embedded store's bbolt file and of the billing spool, which keeps billing events the store refused at shutdown (a volume in the chart).")
	flag.DurationVar(&st.flushInterval, "flush-interval", limits.DefaultFlushInterval, "How often the embedded store writes DAY counters to disk: the most usage a crash can lose. A graceful stop (SIGTERM) flushes everything.")
	flag.StringVar(&st.redisURL, "redis-url", "", "Redis URL of the redis store (redis:// or rediss://, may carry a password).")
	flag.BoolVar(&st.failOpen, "redis-fail-open", false, "Admit limited calls when Redis is unreachable, instead of answering 503 limits_unavailable.")
	flag.DurationVar(&opts.BillingDelivery.Retention, "billing-retention", 30*24*time.Hour, "How long billing events are kept for GET /v1/gateway/events.")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("gatewayd")

	opts.Namespaces = splitList(namespaces)
	cfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "Failed to load a Kubernetes client configuration")
		os.Exit(1)
	}
	opts.RESTConfig = cfg
	opts.Logger = log

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = ctrl.LoggerInto(ctx, log)
	closeState, err := openState(ctx, st, &opts)
	if err != nil {
		log.Error(err, "Failed to open the state store", "store", st.store)
		os.Exit(1)
	}
	runErr := gatewayd.Run(ctx, opts)
	// Run returns once the server has shut down, so nothing charges the store any more: flush it.
	if err := closeState(); err != nil {
		log.Error(err, "Failed to flush the state store")
	}
	if runErr != nil {
		log.Error(runErr, "Stopped with an error")
		os.Exit(1)
	}
}

type stateFlags struct {
	store, stateDir, redisURL string
	flushInterval             time.Duration
	failOpen                  bool
}

// openState builds the limit store and the billing store chosen by the flags, and returns what closes them.
func openState(ctx context.Context, st stateFlags, opts *gatewayd.Options) (func() error, error) {
	log := logr.FromContextOrDiscard(ctx)
	switch st.store {
	case "embedded":
		if err := os.MkdirAll(st.stateDir, 0o700); err != nil {
			return nil, fmt.Errorf("failed to create --state-dir: %w", err)
		}
		e, err := limits.OpenEmbedded(filepath.Join(st.stateDir, "gatewayd.db"), limits.EmbeddedOptions{FlushInterval: st.flushInterval})
		if err != nil {
			return nil, err
		}
		opts.Store, opts.Billing = e, billing.NewBolt(e.DB())
		opts.BillingSpool = filepath.Join(st.stateDir, "billing-spool.jsonl")
		log.Info("Using the embedded store", "stateDir", st.stateDir, "flushInterval", st.flushInterval.String())
		return e.Close, nil
	case "redis":
		if st.redisURL == "" {
			return nil, fmt.Errorf("--redis-url: required with --store=redis")
		}
		ro, err := redis.ParseURL(st.redisURL)
		if err != nil {
			return nil, fmt.Errorf("--redis-url: %w", err)
		}
		client := redis.NewClient(ro)
		r := limits.NewRedis(client, limits.RedisOptions{FailOpen: st.failOpen, Log: log})
		if err := r.Ping(ctx); err != nil {
			// Not fatal: gatewayd fails closed (or open) until Redis answers, and go-redis reconnects by itself.
			log.Error(err, "Redis does not answer yet", "failOpen", st.failOpen)
		}
		opts.Store, opts.Billing = r, billing.NewRedis(client, "")
		// The spool keeps billing events that Redis refuses at shutdown. In Redis mode the state directory is
		// optional; without it those events are lost, which the log says at the time.
		if err := os.MkdirAll(st.stateDir, 0o700); err != nil {
			log.Error(err, "No billing spool: --state-dir cannot be created", "stateDir", st.stateDir)
		} else {
			opts.BillingSpool = filepath.Join(st.stateDir, "billing-spool.jsonl")
		}
		log.Info("Using the Redis store", "addr", ro.Addr, "failOpen", st.failOpen)
		// The store queues token charges: flush them before the client goes.
		return func() error { return errors.Join(r.Close(), client.Close()) }, nil
	}
	return nil, fmt.Errorf("--store: must be embedded or redis, not %q", st.store)
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
