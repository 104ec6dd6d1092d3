// Command manager runs the modelgate control plane: the reconcilers that resolve Groups and keys and publish
// each workspace's snapshot, and the admission webhooks that refuse invalid hierarchies. It is leader-elected,
// so several replicas may run while one reconciles.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/leaderelection"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/modelgate/modelgate/api/stats"
	"github.com/modelgate/modelgate/api/tracing"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers"
	"github.com/modelgate/modelgate/controllers/autoscale"
	"github.com/modelgate/modelgate/controllers/sandboximage"
	"github.com/modelgate/modelgate/gatewayd/version"
	"github.com/modelgate/modelgate/webhooks"
	"github.com/modelgate/modelgate/webhooks/certs"
)

func main() {
	var f flags
	flag.StringVar(&f.metricsAddr, "metrics-bind-address", ":8080", "Address the Prometheus metrics endpoint binds to; \"0\" disables it.")
	flag.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz probes bind to.")
	flag.BoolVar(&f.leaderElect, "leader-elect", true, "Elect a leader so that only one replica reconciles at a time.")
	flag.StringVar(&f.leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader-election Lease; defaults to the pod's namespace in a cluster.")
	flag.DurationVar(&f.leaseDuration, "leader-election-lease-duration", 15*time.Second,
		"How long a leader's Lease holds after its last renewal: a replica killed without stepping down is replaced after this.")
	flag.DurationVar(&f.renewDeadline, "leader-election-renew-deadline", 10*time.Second,
		"How long the leader keeps trying to renew its Lease before it stops leading; shorter than the lease duration.")
	flag.DurationVar(&f.retryPeriod, "leader-election-retry-period", 2*time.Second, "How often a replica tries to take or renew the Lease.")
	flag.IntVar(&f.webhookPort, "webhook-port", 9443, "Port the admission webhook server listens on.")
	flag.StringVar(&f.namespaces, "namespaces", "", "Comma-separated workspace namespaces to watch; empty watches every namespace.")
	flag.StringVar(&f.namespace, "namespace", "", "Deprecated: use --namespaces. One namespace to watch, added to --namespaces.")
	flag.StringVar(&f.certs.CertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs", "Directory holding tls.crt and tls.key for the webhook server.")
	flag.StringVar((*string)(&f.certs.Mode), "webhook-cert-mode", string(certs.DefaultMode),
		"Who provides the webhook serving certificate: \"self-managed\" (the manager generates, injects and rotates it) or \"cert-manager\".")
	flag.StringVar(&f.certs.SecretName, "webhook-secret-name", "", "self-managed: the Secret (in POD_NAMESPACE) the CA and serving certificate are kept in.")
	flag.StringVar(&f.certs.ServiceName, "webhook-service-name", "", "self-managed: the webhook Service (in POD_NAMESPACE); the certificate is for <service>.<namespace>.svc.")
	flag.StringVar(&f.certs.WebhookConfigurationName, "webhook-configuration-name", "", "self-managed: the ValidatingWebhookConfiguration whose caBundle is filled in.")
	flag.StringVar(&f.certs.MutatingWebhookConfigurationName, "mutating-webhook-configuration-name", "", "self-managed: the MutatingWebhookConfiguration whose caBundle is filled in.")
	flag.StringVar(&f.statsService, "gatewayd-stats-service", "",
		"gatewayd's metrics Service, as name (in POD_NAMESPACE) or namespace/name: the autoscaler reads /internal/stats from each of its ready endpoints every 2 s. Empty runs no autoscaler.")
	flag.BoolVar(&f.sandbox.AllowInternalImages, "sandbox-allow-internal-images", false, "Let imported and FROM images come from loopback, private and link-local registries. For development stacks only.")
	flag.StringVar(&f.sandbox.BuildKitImage, "sandbox-buildkit-image", "", "Rootless BuildKit image (for example moby/buildkit:rootless) that builds Dockerfiles the built-in builder refuses (RUN, several stages); off when empty.")
	flag.StringVar(&f.sandbox.ContextFetcherImage, "sandbox-context-fetcher-image", "gcr.io/go-containerregistry/crane:debug", "Image (with crane, gunzip and unzip) that fetches a build context for the BuildKit Job.")
	flag.StringVar(&f.sandbox.TempDir, "sandbox-temp-dir", "", "Directory (an emptyDir) that holds a build context and its layers while a build runs; the system's temporary directory when empty.")
	showVersion := flag.Bool("version", false, "Print the version and exit.")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	if *showVersion {
		fmt.Println(version.Version)
		return
	}
	// The downward API sets it in the chart; the self-managed certificate lives in the manager's own namespace.
	f.certs.Namespace = os.Getenv("POD_NAMESPACE")

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")

	if err := run(f); err != nil {
		log.Error(err, "Manager stopped with an error")
		os.Exit(1)
	}
}

// flags are the command-line settings of the manager.
type flags struct {
	sandbox                 sandboximage.Options
	metricsAddr             string
	probeAddr               string
	leaderElect             bool
	leaderElectionNamespace string
	leaseDuration           time.Duration
	renewDeadline           time.Duration
	retryPeriod             time.Duration
	webhookPort             int
	namespaces              string
	namespace               string
	certs                   certs.Options
	statsService            string
}

// autoscaler builds the autoscaler that --gatewayd-stats-service asks for; nil when it is empty.
func (f flags) autoscaler() *autoscale.Autoscaler {
	if f.statsService == "" {
		return nil
	}
	return &autoscale.Autoscaler{StatsService: stats.ServiceName(f.statsService, os.Getenv("POD_NAMESPACE"))}
}

// watchedNamespaces merges --namespaces and the deprecated --namespace, dropping empty items and repeats.
func (f flags) watchedNamespaces() []string {
	var out []string
	for _, ns := range append(strings.Split(f.namespaces, ","), f.namespace) {
		if ns = strings.TrimSpace(ns); ns != "" && !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	return out
}

// validateLeaderElection refuses lease timings the leader elector cannot run with, naming the flag and the rule:
// a leader must give up before its Lease can expire, and try to renew more than once (with jitter) before it gives up.
func (f flags) validateLeaderElection() error {
	switch {
	case f.retryPeriod <= 0:
		return fmt.Errorf("--leader-election-retry-period=%s must be positive", f.retryPeriod)
	case f.renewDeadline <= time.Duration(leaderelection.JitterFactor*float64(f.retryPeriod)):
		return fmt.Errorf("--leader-election-renew-deadline=%s must be longer than %.1f times --leader-election-retry-period=%s",
			f.renewDeadline, leaderelection.JitterFactor, f.retryPeriod)
	case f.leaseDuration <= f.renewDeadline:
		return fmt.Errorf("--leader-election-lease-duration=%s must be longer than --leader-election-renew-deadline=%s", f.leaseDuration, f.renewDeadline)
	}
	return nil
}

func run(f flags) error {
	// Refuse a flag combination that cannot work before connecting to anything.
	if err := f.certs.Validate(); err != nil {
		return err
	}
	if err := f.validateLeaderElection(); err != nil {
		return err
	}
	ctx := ctrl.LoggerInto(ctrl.SetupSignalHandler(), ctrl.Log.WithName("manager"))
	namespaces := f.watchedNamespaces()
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(gatewayv1.AddToScheme(scheme))

	opts := ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: f.metricsAddr},
		HealthProbeBindAddress:  f.probeAddr,
		LeaderElection:          f.leaderElect,
		LeaderElectionID:        controllers.LeaderElectionID,
		LeaderElectionNamespace: f.leaderElectionNamespace,
		LeaseDuration:           &f.leaseDuration,
		RenewDeadline:           &f.renewDeadline,
		RetryPeriod:             &f.retryPeriod,
		// Stepping down promptly on SIGTERM lets the next replica take over without waiting for the lease to expire.
		LeaderElectionReleaseOnCancel: true,
		WebhookServer:                 webhook.NewServer(webhook.Options{Port: f.webhookPort, CertDir: f.certs.CertDir}),
	}
	if len(namespaces) > 0 {
		opts.Cache.DefaultNamespaces = make(map[string]cache.Config, len(namespaces))
		for _, ns := range namespaces {
			opts.Cache.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), opts)
	if err != nil {
		return fmt.Errorf("failed to create manager: %w", err)
	}
	// Traces of the reconciles when OTEL_TRACES_EXPORTER=otlp (the chart's tracing values; docs/operations.md "Traces").
	tracer, err := tracing.New(ctx, tracing.FromEnv(os.Getenv, "modelgate-manager"))
	if err != nil {
		return err
	}
	defer func() {
		flush, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tracer.Shutdown(flush); err != nil {
			ctrl.Log.WithName("setup").Error(err, "Failed to export the last spans")
		}
	}()
	if err := controllers.SetupWithManager(mgr, controllers.Options{Autoscaler: f.autoscaler(), Sandbox: f.sandbox, Tracer: tracer}); err != nil {
		return fmt.Errorf("failed to set up controllers: %w", err)
	}
	// The webhook server starts only once it has a certificate (at once in cert-manager mode).
	webhookReady, err := certs.Setup(ctx, mgr, f.certs, webhooks.SetupWithManager)
	if err != nil {
		return fmt.Errorf("failed to set up webhooks: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("failed to add health check: %w", err)
	}
	// Not ready until the webhook server serves, so the API server is never sent to a replica that cannot answer.
	if err := mgr.AddReadyzCheck("webhook", webhookReady); err != nil {
		return fmt.Errorf("failed to add readiness check: %w", err)
	}

	ctrl.Log.WithName("setup").Info("Starting manager", "version", version.Version, "leaderElection", f.leaderElect, "namespaces", namespaces,
		"webhookCertMode", f.certs.Mode)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("failed to run manager: %w", err)
	}
	return nil
}
