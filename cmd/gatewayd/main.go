// Command gatewayd is the modelgate data plane: it serves the /v1 REST API and the OpenAI-compatible model
// calls, authenticating, limiting and forwarding each one from the snapshots the manager publishes. Replicas
// are stateless apart from the limiter store, so it scales horizontally.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/modelgate/modelgate/api/stats"
	"github.com/modelgate/modelgate/api/tracing"
	"github.com/modelgate/modelgate/gatewayd"
	"github.com/modelgate/modelgate/gatewayd/async"
	"github.com/modelgate/modelgate/gatewayd/dashboard"
	"github.com/modelgate/modelgate/gatewayd/inference"
	"github.com/modelgate/modelgate/gatewayd/ingress"
	"github.com/modelgate/modelgate/gatewayd/state"
	"github.com/modelgate/modelgate/gatewayd/version"
)

func main() {
	var (
		opts       gatewayd.Options
		namespaces string
		st         state.Config
		showVer    bool
		dash       bool
		dashKeys   string
		uploadKey  string
		peers      string
	)
	flag.StringVar(&opts.Addr, "addr", ":8080", "Address gatewayd serves model calls, the REST API, /healthz and /readyz on.")
	flag.StringVar(&opts.MetricsAddr, "metrics-addr", ":9090", "Address of /metrics (every workspace's series): keep it inside the cluster. Empty turns it off.")
	flag.StringVar(&namespaces, "namespaces", "", "Comma-separated workspace namespaces to serve; empty serves every namespace with a snapshot.")
	flag.DurationVar(&opts.UpstreamTimeout, "upstream-timeout", gatewayd.DefaultUpstreamTimeout, "Bound on one upstream call (response headers, and each gap between streamed chunks) for Endpoints that set no timeout.")
	flag.Int64Var(&opts.MaxBodyBytes, "max-body-bytes", gatewayd.DefaultMaxBodyBytes, "Largest request body accepted.")
	flag.DurationVar(&opts.BodyReadTimeout, "body-read-timeout", ingress.DefaultBodyReadTimeout, "How long a request body may take to arrive, on every route (a sandbox upload: until its URL expires); past it the call answers 408, or the connection is closed.")
	flag.Int64Var(&opts.MaxInFlightBytesPerKey, "max-in-flight-bytes-per-key", inference.DefaultMaxInFlightBytesPerKey, "Most request body bytes of one federated key's model calls gatewayd holds at once; a call past it answers 429.")
	flag.DurationVar(&opts.ShutdownDrain, "shutdown-drain", 0, "How long a stop (SIGTERM) keeps serving before it closes the listener, with /readyz failing and every answer saying Connection: close, so a rolling update loses no call (the chart sets 5s). 0 closes at once.")
	flag.DurationVar(&opts.ShutdownGrace, "shutdown-grace", gatewayd.DefaultShutdownGrace, "How long a stop (SIGTERM) lets calls in flight, streams included, finish before cutting them. Keep it below the pod's terminationGracePeriodSeconds.")
	flag.DurationVar(&opts.SecretTTL, "secret-ttl", gatewayd.DefaultSecretTTL, "How long an upstream key read from its Secret is reused before it is read again.")
	flag.DurationVar(&opts.HoldTimeout, "model-hold-timeout", inference.DefaultHoldTimeout, "Longest a predict call waits for a deployment with no ready replica to start (scale from zero); a deployment's shorter startupTimeoutSeconds wins. Then 503 model_not_ready.")
	st.BindFlags(flag.CommandLine)
	flag.BoolVar(&showVer, "version", false, "Print the version and exit.")
	flag.DurationVar(&opts.BillingDelivery.Retention, "billing-retention", 30*24*time.Hour, "How long billing events are kept for GET /v1/gateway/events.")
	flag.BoolVar(&opts.AsyncConfig.AllowInternalWebhooks, "async-allow-internal-webhooks", false, "Let async webhook_endpoint URLs aim at loopback, private and link-local addresses (and use http to loopback and internal address literals). For development stacks only: it lets callers make gatewayd call the cluster's insides.")
	flag.DurationVar(&opts.AsyncConfig.Retention, "async-retention", async.DefaultRetention, "How long an async request is kept, for status polls, after it ended.")
	flag.IntVar(&opts.AsyncConfig.PredictPerSecond, "async-predict-rate", async.DefaultPredictPerSecond, "At most this many async_predict calls per key per second (429 with Retry-After past it).")
	flag.IntVar(&opts.AsyncConfig.MaxQueuedPerKey, "async-max-queued-per-key", async.DefaultMaxQueuedPerKey, "At most this many async requests of one key queued or in progress at once (429 with Retry-After past it).")
	flag.DurationVar(&opts.AsyncConfig.Lease, "async-lease", async.DefaultLease, "How long a worker's lease on a running async request lasts without a heartbeat (sent every third of it): how soon a request of a crashed replica runs again.")
	flag.BoolVar(&dash, "dashboard", true, "Serve the operator dashboard at /dashboard/ (it needs the management API).")
	flag.StringVar(&dashKeys, "dashboard-session-secrets-file", "", "File of the secrets that seal dashboard session cookies, one a line, newest first (the chart mounts its Secret here). Empty: one random secret, so sessions end at a restart and do not span replicas.")
	flag.StringVar(&uploadKey, "sandbox-upload-key-file", "", "File (mount it from a Secret) holding the key that signs sandbox upload URLs; every replica needs the same one. Sandbox pushes answer 503 without it.")
	flag.StringVar(&opts.Sandboxes.BaseURL, "sandbox-base-url", "", "Public base URL that sandbox upload URLs start with; defaults to the scheme and Host of the push request.")
	flag.BoolVar(&opts.Sandboxes.AllowInternalImages, "sandbox-allow-internal-images", false, "Let sandbox image references aim at loopback, private and link-local registries. For development stacks only.")
	flag.StringVar(&peers, "peers-service", "", "gatewayd's metrics Service, as name (in POD_NAMESPACE) or namespace/name: the logs route reads the request log of every ready endpoint of it, so it shows the calls of every replica. Empty shows this replica's only.")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	st.LoadSecrets(os.Getenv)
	if showVer {
		fmt.Println(version.Version)
		return
	}

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("gatewayd")
	log.Info("Starting", "version", version.Version)

	opts.Namespaces = splitList(namespaces)
	if peers != "" {
		opts.PeersService = stats.ServiceName(peers, os.Getenv("POD_NAMESPACE"))
	}
	opts.DisableDashboard = !dash
	if dash && dashKeys != "" {
		var err error
		if opts.DashboardSessionSecrets, err = dashboard.ReadSecrets(dashKeys); err != nil {
			log.Error(err, "Failed to read the dashboard session secrets")
			os.Exit(1)
		}
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		log.Error(err, "Failed to load a Kubernetes client configuration")
		os.Exit(1)
	}
	opts.RESTConfig = cfg
	opts.Logger = log
	if uploadKey != "" {
		key, err := os.ReadFile(uploadKey)
		if err != nil || len(bytes.TrimSpace(key)) < 32 {
			log.Error(err, "The sandbox upload key file must be readable and hold at least 32 bytes", "file", uploadKey)
			os.Exit(1)
		}
		opts.Sandboxes.UploadKey = bytes.TrimSpace(key)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = ctrl.LoggerInto(ctx, log)
	// Traces when OTEL_TRACES_EXPORTER=otlp (the chart's tracing values; docs/operations.md "Traces").
	if opts.Tracer, err = tracing.New(ctx, tracing.FromEnv(os.Getenv, "gatewayd")); err != nil {
		log.Error(err, "Failed to set up tracing")
		os.Exit(1)
	}
	g, store, err := gatewayd.NewWithState(ctx, opts, st)
	if err != nil {
		log.Error(err, "Failed to start", "store", st.Store)
		os.Exit(1)
	}
	runErr := g.ListenAndServe(ctx)
	// ListenAndServe returns once the server has shut down, so nothing charges the store any more: flush it.
	if err := store.Close(); err != nil {
		log.Error(err, "Failed to flush the state store")
	}
	flush, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := opts.Tracer.Shutdown(flush); err != nil {
		log.Error(err, "Failed to export the last spans")
	}
	cancel()
	if runErr != nil {
		log.Error(runErr, "Stopped with an error")
		os.Exit(1)
	}
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
