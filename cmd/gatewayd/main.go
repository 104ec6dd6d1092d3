// Command gatewayd is the modelgate data plane: it serves the /v1 REST API and the OpenAI-compatible model
// calls, authenticating, limiting and forwarding each one from the snapshots the manager publishes. Replicas
// are stateless apart from the limiter store, so it scales horizontally.
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"strings"
	"syscall"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/modelgate/modelgate/gatewayd"
)

func main() {
	var (
		opts       gatewayd.Options
		namespaces string
	)
	flag.StringVar(&opts.Addr, "addr", ":8080", "Address gatewayd serves model calls, the REST API, /healthz, /readyz and /metrics on.")
	flag.StringVar(&namespaces, "namespaces", "", "Comma-separated workspace namespaces to serve; empty serves every namespace with a snapshot.")
	flag.DurationVar(&opts.UpstreamTimeout, "upstream-timeout", gatewayd.DefaultUpstreamTimeout, "Bound on one upstream call (response headers, and each gap between streamed chunks) for Endpoints that set no timeout.")
	flag.Int64Var(&opts.MaxBodyBytes, "max-body-bytes", gatewayd.DefaultMaxBodyBytes, "Largest request body accepted.")
	flag.DurationVar(&opts.SecretTTL, "secret-ttl", gatewayd.DefaultSecretTTL, "How long an upstream key read from its Secret is reused before it is read again.")
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

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = ctrl.LoggerInto(ctx, log)
	if err := gatewayd.Run(ctx, opts); err != nil {
		log.Error(err, "Stopped with an error")
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
