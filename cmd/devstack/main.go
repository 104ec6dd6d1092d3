// Command devstack is what `make run` runs: the whole product on a local control plane (etcd, kube-apiserver,
// the CRDs, the manager with its webhooks, gatewayd, a demo upstream and a demo model server), seeded with a
// Workspace, an admin key, a demo Endpoint and a demo Model in namespace default. It runs until interrupted and then stops every process it started.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	uzap "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/modelgate/modelgate/api/tracing"
	"github.com/modelgate/modelgate/test/jaegertest"
	"github.com/modelgate/modelgate/test/stack"
)

func main() {
	opts := stack.Options{Namespace: "default"}
	flag.StringVar(&opts.GatewayAddr, "gateway-addr", "127.0.0.1:8080", "Address gatewayd listens on.")
	flag.StringVar(&opts.UpstreamAddr, "upstream-addr", "127.0.0.1:9999", "Address the demo OpenAI-compatible upstream listens on.")
	flag.StringVar(&opts.ModelAddr, "model-addr", "127.0.0.1:9998", "Address the demo model server listens on.")
	flag.StringVar(&opts.MetricsAddr, "metrics-addr", "127.0.0.1:9090", "Address gatewayd serves /metrics on.")
	flag.StringVar(&opts.RegistryAddr, "registry-addr", "127.0.0.1:5000", "Address of the in-process OCI registry, the workspace's image registry for sandbox images.")
	flag.StringVar(&opts.DevDir, "dev-dir", ".dev", "Directory for the kubeconfig, the env file and the workspace signing key.")
	flag.DurationVar(&opts.ReadyTimeout, "ready-timeout", 3*time.Minute, "How long to wait for every component to answer.")
	flag.BoolVar(&traced, "tracing", false, "Start Jaeger on loopback (OTLP on "+jaegerPorts.GRPC+" and "+jaegerPorts.HTTP+", its query API on "+jaegerPorts.Query+") and trace gatewayd and the manager into it, every call sampled (make run TRACING=1).")
	debug := flag.Bool("debug", false, "Show DEBUG lines on the terminal too (the full log is always in <dev-dir>/"+logFile+").")
	zapOpts := terminalOptions(false)
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	if *debug {
		zapOpts.Level = terminalOptions(true).Level
	}

	if err := run(opts, &zapOpts); err != nil {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		os.Exit(1)
	}
}

// terminalOptions are the terminal's log options: INFO and above, DEBUG too when debug (--zap-log-level, bound
// to them, sets the level as well).
func terminalOptions(debug bool) zap.Options {
	if debug {
		return zap.Options{Development: true, Level: zapcore.DebugLevel}
	}
	return zap.Options{Development: true, Level: zapcore.InfoLevel}
}

// traced: --tracing, Jaeger and traces on.
var traced bool

// jaegerPorts are Jaeger's usual ports, on loopback only.
var jaegerPorts = jaegertest.Options{GRPC: "127.0.0.1:4317", HTTP: "127.0.0.1:4318", Query: "127.0.0.1:16686", QueryGRPC: "127.0.0.1:16685"}

// startTracing runs Jaeger in dir, with its web UI when its assets are built (make jaeger-ui), and gives gatewayd
// and the manager a tracer that sends it every span; stop ends both, flushing the spans first.
func startTracing(ctx context.Context, opts *stack.Options, dir string) (ui string, stop func(), err error) {
	bin, err := jaegertest.Binary()
	if err != nil {
		return "", nil, err
	}
	jo := jaegerPorts
	jo.UIAssets = jaegertest.UIAssets()
	j, err := jaegertest.Start(ctx, bin, dir, jo)
	if err != nil {
		return "", nil, err
	}
	cfg := tracing.Config{Exporter: tracing.ExporterOTLP, Protocol: tracing.ProtocolGRPC, Endpoint: j.OTLPGRPC, Sampler: "always_on"}
	cfg.Service = "gatewayd"
	gw, err := tracing.New(ctx, cfg)
	if err != nil {
		j.Stop()
		return "", nil, err
	}
	cfg.Service = "modelgate-manager"
	mgr, err := tracing.New(ctx, cfg)
	if err != nil {
		j.Stop()
		return "", nil, err
	}
	opts.Gatewayd.Tracer, opts.Controllers.Tracer = gw, mgr
	return j.UI, func() {
		flush, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = gw.Shutdown(flush)
		_ = mgr.Shutdown(flush)
		j.Stop()
	}, nil
}

// uiState says whether this run's Jaeger serves its web UI, and how to get it when it does not.
func uiState() string {
	if assets := jaegertest.UIAssets(); assets != "" {
		return "served from " + assets
	}
	return "not built; make jaeger-ui builds it once, then restart make run TRACING=1"
}

// logFile, in the dev directory, holds the full log of the last run, DEBUG included, whatever the terminal shows.
const logFile = "devstack.log"

// newLogger logs to the terminal by zapOpts (INFO and above unless asked) and, every level, to path.
func newLogger(zapOpts *zap.Options, path string) (log logr.Logger, close func() error, err error) {
	f, err := os.Create(path)
	if err != nil {
		return logr.Discard(), nil, fmt.Errorf("failed to create the log file: %w", err)
	}
	full := zapcore.NewCore(zapcore.NewConsoleEncoder(uzap.NewDevelopmentEncoderConfig()), zapcore.AddSync(f), zapcore.DebugLevel)
	zapOpts.ZapOpts = append(zapOpts.ZapOpts, uzap.WrapCore(func(terminal zapcore.Core) zapcore.Core {
		return zapcore.NewTee(terminal, full)
	}))
	return zap.New(zap.UseFlagOptions(zapOpts)), f.Close, nil
}

func run(opts stack.Options, zapOpts *zap.Options) error {
	root, err := stack.FindRoot()
	if err != nil {
		return err
	}
	opts.Root = root
	if !filepath.IsAbs(opts.DevDir) {
		opts.DevDir = filepath.Join(root, opts.DevDir)
	}
	if err := os.MkdirAll(opts.DevDir, 0o700); err != nil {
		return fmt.Errorf("failed to create %s: %w", opts.DevDir, err)
	}
	logger, closeLog, err := newLogger(zapOpts, filepath.Join(opts.DevDir, logFile))
	if err != nil {
		return err
	}
	defer func() { _ = closeLog() }()
	ctrl.SetLogger(logger)

	// The signal context stays registered until run returns, so a second Ctrl-C during shutdown does not kill
	// the process before it has stopped etcd and kube-apiserver.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := ctrl.Log.WithName("devstack")
	ctx = ctrl.LoggerInto(ctx, log)

	var jaegerUI string
	if traced {
		var stopTracing func()
		if jaegerUI, stopTracing, err = startTracing(ctx, &opts, opts.DevDir); err != nil {
			return err
		}
		defer stopTracing()
	}
	log.Info("Starting etcd, kube-apiserver, the manager, gatewayd, the demo upstream and the demo model")
	s, err := stack.Start(ctx, opts)
	if err != nil {
		return err
	}
	printUsage(s)
	if jaegerUI != "" {
		fmt.Printf(`
Traces: every call, its tries, async requests and the manager's reconciles, in Jaeger
(the README's "Traces" step follows a failed-over call's trace):

  %[1]s/search?service=gatewayd   (the web UI: %[2]s)
  curl -s "%[1]s/api/traces?service=gatewayd&limit=1" | jq '.data[0].spans[] | {operationName, tags}'

`, jaegerUI, uiState())
	}

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("Stopping")
	case runErr = <-s.Failed():
		log.Error(runErr, "A component failed; stopping")
	}
	if err := s.Stop(); err != nil {
		return fmt.Errorf("failed to stop cleanly: %w", err)
	}
	log.Info("Stopped every process")
	return runErr
}

func printUsage(s *stack.Stack) {
	fmt.Printf(`
modelgate is running.

  gatewayd        %[1]s   (metrics: %[6]s/metrics)
  demo upstream   %[2]s
  demo model      %[7]s   (Model %[8]s, deployment %[9]s)
  namespace       %[3]s
  kubectl         %[4]s

In another terminal:

  tail -f %[13]s   # the full log, DEBUG included (make run RUN_ARGS=--debug shows it here too)
  . %[5]s        # MODELGATE_URL, MODELGATE_API_KEY, KUBECONFIG, MODELGATE_NAMESPACE, kubectl on PATH

  kubectl apply -k config/samples
  kubectl get groups
  kubectl get modelgate          # every modelgate kind

  # The snapshot gatewayd serves (gzip'd JSON in the ConfigMap):
  kubectl get configmap modelgate-snapshot -o jsonpath='{.data.version}{"\n"}'
  kubectl get configmap modelgate-snapshot -o jsonpath='{.binaryData.snapshot\.json\.gz}' | base64 -d | gunzip

  # Call the demo model with the key the controller minted for acme-eu-research:
  KEY=$(kubectl get secret "$(kubectl get apikey acme-eu-research-minted -o jsonpath='{.status.secretName}')" -o jsonpath='{.data.api_key}' | base64 -d)
  curl -s "$MODELGATE_URL/v1/chat/completions" -H "Authorization: Api-Key $KEY" \
    -H 'Content-Type: application/json' -d '{"model":"demo/echo","messages":[{"role":"user","content":"hello"}]}'

  # Its billing event, and the workspace's own series:
  curl -s "$MODELGATE_URL/v1/gateway/events" -H "Authorization: Bearer $MODELGATE_API_KEY"
  curl -s "$MODELGATE_URL/v1/metrics" -H "Authorization: Bearer $MODELGATE_API_KEY"

  # Models: %[8]s serves its production and staging environments from %[9]s, a url deployment at the demo model:
  kubectl get models,modeldeployments
  curl -s "$MODELGATE_URL/models/%[8]s/production/predict" -H "Authorization: Bearer $MODELGATE_API_KEY" \
    -H 'Content-Type: application/json' -d '{"text":"I love it"}'
  # Any other body passes through unchanged (the demo model echoes it):
  printf 'raw bytes' | curl -s "$MODELGATE_URL/models/%[8]s/production/predict" -H "Authorization: Bearer $MODELGATE_API_KEY" \
    -H 'Content-Type: application/octet-stream' --data-binary @-
  # Activate an environment (no_op is true while its deployment is already active):
  curl -s -X POST "$MODELGATE_URL/v1/models/%[8]s/environments/%[10]s/activate" -H "Authorization: Bearer $MODELGATE_API_KEY"

  # Chains: %[11]s runs %[12]s as two url chainlets on the demo model; run_remote calls the entrypoint:
  kubectl get chains,chaindeployments
  curl -s "$MODELGATE_URL/chains/%[11]s/production/run_remote" -H "Authorization: Bearer $MODELGATE_API_KEY" \
    -H 'Content-Type: application/json' -d '{"text":"I love it"}'

Press Ctrl-C to stop everything.
`, s.GatewayURL, s.UpstreamURL, s.Namespace, s.KubectlPath, s.EnvPath, s.MetricsURL,
		s.ModelURL, stack.ModelName, stack.ModelDeploymentName, stack.ModelStagingEnv, stack.ChainName, stack.ChainDeploymentName,
		filepath.Join(filepath.Dir(s.EnvPath), logFile))
}
