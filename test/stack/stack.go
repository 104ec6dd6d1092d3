// Package stack runs the whole product in one process on a local control plane: etcd and kube-apiserver
// (envtest) with the CRDs, the manager (controllers and admission webhooks, called over TLS by the API server),
// gatewayd, a demo OpenAI-compatible upstream and a demo model server, seeded with a Workspace, an admin workspace
// key, a demo Endpoint and a demo Model whose production deployment is the demo model server. `make run` (cmd/devstack) and the end-to-end suites share it, so what a developer tries by hand is
// what the tests exercise.
package stack

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/modelgate/modelgate/api/apikey"
	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/controllers"
	"github.com/modelgate/modelgate/gatewayd"
	"github.com/modelgate/modelgate/gatewayd/state"
	"github.com/modelgate/modelgate/test/kubetest"
	"github.com/modelgate/modelgate/webhooks"
)

// Options configure a Stack. The zero value is usable from anywhere inside the repository.
type Options struct {
	// Root is the repository root, where config/ lives. Empty finds it by walking up from the working directory.
	Root string
	// GatewayAddr is where gatewayd listens. A port of 0 picks a free one. Default 127.0.0.1:0.
	GatewayAddr string
	// UpstreamAddr is where the demo upstream listens. A port of 0 picks a free one. Default 127.0.0.1:0.
	UpstreamAddr string
	// ModelAddr is where the demo model server listens. A port of 0 picks a free one. Default 127.0.0.1:0.
	ModelAddr string
	// Namespace is the workspace that gets seeded. Default "default".
	Namespace string
	// DevDir receives kubeconfig, env and the workspace signing key. Empty uses a temporary directory that
	// Stop removes.
	DevDir string
	// ReadyTimeout bounds the wait for every component to answer. Default 3 minutes.
	ReadyTimeout time.Duration
	// Controllers is handed to controllers.SetupWithManager.
	Controllers controllers.Options
	// Gatewayd is handed to gatewayd.NewWithState, with Addr and RESTConfig filled in by the stack.
	Gatewayd gatewayd.Options
	// State is gatewayd's durable state, opened as cmd/gatewayd opens it. The zero value is the embedded store
	// (cmd/gatewayd's default) in DevDir/state.
	State state.Config
	// MetricsAddr is where gatewayd serves /metrics. A port of 0 picks a free one. Default 127.0.0.1:0.
	MetricsAddr string
	// RegistryAddr is where the in-process OCI registry (the workspace's image registry) listens. A port of 0
	// picks a free one. Default 127.0.0.1:0.
	RegistryAddr string
}

// Names of the seeded objects. config/samples/endpoint.yaml declares the same Endpoint and upstream Secret, so
// applying the samples to a running stack updates them instead of conflicting.
const (
	WorkspaceName      = "default"
	AdminKeyName       = "admin"
	AdminKeySecretName = "admin-api-key"
	UpstreamSecretName = "demo-upstream"
	UpstreamAPIKey     = "demo-upstream-key"
	EndpointName       = "demo-echo"
	EndpointSlug       = "demo/echo"
	EndpointModel      = "echo"
	// ModelName is the seeded Model, served by ModelDeploymentName (a url deployment at the demo model server)
	// in its production and staging environments.
	ModelName           = "demo-model"
	ModelDeploymentName = "demo-model-v1"
	ModelStagingEnv     = "staging"
	// ChainName is the seeded Chain, whose production environment serves ChainDeploymentName: two url chainlets
	// at the demo model server, ChainEntrypoint (which run_remote calls) and ChainOtherChainlet.
	ChainName           = "demo-chain"
	ChainDeploymentName = "demo-chain-v1"
	ChainEntrypoint     = "sentiment"
	ChainOtherChainlet  = "review"
	// AsyncWebhookSecretName holds the Workspace's asyncWebhook signing secret, AsyncWebhookSecret: a fixed
	// development value, so a local receiver can verify async results.
	AsyncWebhookSecretName = "async-webhook"
	AsyncWebhookSecret     = "whsec_bW9kZWxnYXRlLWRldi1hc3luYy13ZWJob29rLXNlY3JldA=="
	// SandboxUploadKey is gatewayd's development key for signing sandbox upload URLs.
	SandboxUploadKey = "modelgate-dev-sandbox-upload-signing-key"
)

// Stack is a running local product. Its exported fields are set once Start returns.
type Stack struct {
	// Env is the envtest control plane.
	Env *envtest.Environment
	// Config reaches the API server as the envtest admin user.
	Config *rest.Config
	// Client is an uncached client with the product's scheme.
	Client client.Client
	// Namespace is the seeded workspace.
	Namespace string
	// Gateway is the in-process gatewayd, for tests that inspect its loaded view.
	Gateway *gatewayd.Gateway
	// GatewayURL is gatewayd's base URL, for example http://127.0.0.1:8080.
	GatewayURL string
	// MetricsURL is gatewayd's metrics listener, for example http://127.0.0.1:9090.
	MetricsURL string
	// UpstreamURL is the demo upstream's OpenAI base URL, ending in /v1.
	UpstreamURL string
	// ModelURL is the demo model server's base URL (GET /health, POST /predict), for example
	// http://127.0.0.1:9998.
	ModelURL string
	// APIKey is the plaintext of the admin workspace key (WORKSPACE_MANAGE_ALL).
	APIKey string
	// SigningKey is the private half of the Workspace's key-registration public key.
	SigningKey ed25519.PrivateKey
	// KubeconfigPath is a kubeconfig for the admin user, EnvPath the shell file that exports the above.
	KubeconfigPath string
	EnvPath        string
	// KubectlPath is the kubectl binary that matches the API server.
	KubectlPath string
	// RegistryHost is the in-process OCI registry's host:port: the seeded Workspace's imageRegistry is
	// http://<RegistryHost>/sandboxes, and plain-HTTP image references to it are allowed (a development stack).
	RegistryHost string
	// SandboxUploadKey signs sandbox upload URLs (a fixed development value, so tests can sign their own).
	SandboxUploadKey []byte

	devDir        string
	removeDevDir  bool
	cancel        context.CancelFunc
	running       []<-chan struct{}
	stopUpstream  func()
	stopModel     func()
	stopRegistry  func()
	failed        chan error
	webhookServer webhook.Server
}

// Start brings up the whole stack and returns once the API server, the webhooks, the manager (a snapshot that
// holds the seeded objects) and gatewayd (/readyz) all answer. On error everything already started is stopped.
//
// envtest picks the webhook server's port by opening and closing a listener, and the manager binds it later: on
// a busy machine another process can take the port in between. Start then starts again, up to three times; envtest
// does not suggest a port twice in one process.
func Start(ctx context.Context, opts Options) (*Stack, error) {
	for attempt := 1; ; attempt++ {
		s, err := start(ctx, opts)
		if err == nil || attempt == 3 || !webhookPortTaken(err) {
			return s, err
		}
		log.FromContext(ctx).Info("The webhook server's port was taken before the manager bound it; starting the stack again", "error", err.Error())
	}
}

func start(ctx context.Context, opts Options) (_ *Stack, err error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	s := &Stack{Namespace: opts.Namespace, failed: make(chan error, 4), devDir: opts.DevDir}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Stop())
		}
	}()
	if s.devDir == "" {
		if s.devDir, err = os.MkdirTemp("", "modelgate-stack-"); err != nil {
			return nil, fmt.Errorf("failed to create a directory for the stack: %w", err)
		}
		s.removeDevDir = true
	} else if err := os.MkdirAll(s.devDir, 0o700); err != nil {
		return nil, fmt.Errorf("failed to create %s: %w", s.devDir, err)
	}

	if err := s.startControlPlane(opts); err != nil {
		return nil, err
	}
	// The components outlive Start's context: they run until Stop.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	if err := s.startManager(runCtx, opts); err != nil {
		return nil, err
	}
	if err := s.startUpstream(opts.UpstreamAddr); err != nil {
		return nil, err
	}
	if err := s.startModel(opts.ModelAddr); err != nil {
		return nil, err
	}
	if err := s.startRegistry(opts.RegistryAddr); err != nil {
		return nil, err
	}

	waitCtx, cancelWait := context.WithTimeout(ctx, opts.ReadyTimeout)
	defer cancelWait()
	if err := s.waitManager(waitCtx); err != nil {
		return nil, err
	}
	// gatewayd starts once the seeded snapshot exists, so its /readyz means that snapshot is loaded.
	if err := s.startGatewayd(runCtx, opts); err != nil {
		return nil, err
	}
	if err := s.waitGatewayd(waitCtx); err != nil {
		return nil, err
	}
	if err := s.writeEnv(); err != nil {
		return nil, err
	}
	return s, nil
}

// Failed reports a component that stopped while the stack was meant to run.
func (s *Stack) Failed() <-chan error { return s.failed }

// Stop stops every component and the control plane, leaving no process behind. It is safe to call on a
// partly started stack.
func (s *Stack) Stop() error {
	var errs []error
	if s.cancel != nil {
		s.cancel()
	}
	for _, done := range s.running {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			errs = append(errs, errors.New("a component did not stop within 30s"))
		}
	}
	s.running = nil
	if s.stopUpstream != nil {
		s.stopUpstream()
		s.stopUpstream = nil
	}
	if s.stopModel != nil {
		s.stopModel()
		s.stopModel = nil
	}
	if s.stopRegistry != nil {
		s.stopRegistry()
		s.stopRegistry = nil
	}
	if s.Env != nil {
		if err := s.Env.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("failed to stop the control plane: %w", err))
		}
		s.Env = nil
	}
	if s.removeDevDir {
		if err := os.RemoveAll(s.devDir); err != nil {
			errs = append(errs, fmt.Errorf("failed to remove %s: %w", s.devDir, err))
		}
		s.removeDevDir = false
	}
	return errors.Join(errs...)
}

func (o *Options) defaults() error {
	if o.Root == "" {
		root, err := FindRoot()
		if err != nil {
			return err
		}
		o.Root = root
	}
	if o.GatewayAddr == "" {
		o.GatewayAddr = "127.0.0.1:0"
	}
	if o.UpstreamAddr == "" {
		o.UpstreamAddr = "127.0.0.1:0"
	}
	if o.ModelAddr == "" {
		o.ModelAddr = "127.0.0.1:0"
	}
	if o.RegistryAddr == "" {
		o.RegistryAddr = "127.0.0.1:0"
	}
	if o.MetricsAddr == "" {
		o.MetricsAddr = "127.0.0.1:0"
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 3 * time.Minute
	}
	// Tests may start several stacks in one process; controller names are then legitimately reused.
	o.Controllers.SkipNameValidation = true
	return nil
}

// FindRoot walks up from the working directory to the directory holding the module's go.mod.
func FindRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("failed to get the working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "config", "crd", "bases")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("failed to find the repository root (a directory with go.mod and config/crd/bases) above the working directory")
		}
		dir = parent
	}
}

// Scheme returns a scheme with the built-in kinds and the product's.
func Scheme() *runtime.Scheme { return kubetest.Scheme() }

func (s *Stack) startControlPlane(opts Options) error {
	env, err := kubetest.Start(kubetest.Options{CRDs: true, Webhooks: true, Root: opts.Root})
	if err != nil {
		return err
	}
	s.Env, s.Client, s.Config = env.Environment, env.Client, env.Config
	s.KubectlPath = s.Env.ControlPlane.KubectlPath
	if s.KubectlPath == "" {
		s.KubectlPath = filepath.Join(s.Env.BinaryAssetsDirectory, "kubectl")
	}
	s.KubeconfigPath = filepath.Join(s.devDir, "kubeconfig")
	if err := os.WriteFile(s.KubeconfigPath, s.Env.KubeConfig, 0o600); err != nil {
		return fmt.Errorf("failed to write kubeconfig: %w", err)
	}
	return nil
}

func (s *Stack) startManager(ctx context.Context, opts Options) error {
	wio := &s.Env.WebhookInstallOptions
	mgr, err := ctrl.NewManager(s.Config, ctrl.Options{
		Scheme:                 s.Env.Scheme,
		Logger:                 log.FromContext(ctx).WithName("manager"),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// One in-process manager: nothing to elect, and no Lease to wait for.
		LeaderElection: false,
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir,
		}),
		// Tests may start several stacks in one process; controller names are then legitimately reused.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return fmt.Errorf("failed to create manager: %w", err)
	}
	copts := opts.Controllers
	// A development stack imports and builds from registries on this machine.
	copts.Sandbox.AllowInternalImages = true
	if err := controllers.SetupWithManager(mgr, copts); err != nil {
		return fmt.Errorf("failed to set up controllers: %w", err)
	}
	if err := webhooks.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("failed to set up webhooks: %w", err)
	}
	s.webhookServer = mgr.GetWebhookServer()
	s.run(ctx, "manager", mgr.Start)
	return nil
}

// startGatewayd runs gatewayd with the wiring of cmd/gatewayd (gatewayd.NewWithState): the same state store,
// billing events and webhook delivery, so what works here works in a cluster.
func (s *Stack) startGatewayd(ctx context.Context, opts Options) error {
	gopts := opts.Gatewayd
	gopts.RESTConfig = s.Config
	gopts.Addr = opts.GatewayAddr
	// A development stack: async result webhooks may go to a receiver on this machine (docs/decisions.md
	// "The local stack").
	gopts.AsyncConfig.AllowInternalWebhooks = true
	// ... and sandbox images may come from this machine's registries (the in-process one included).
	gopts.Sandboxes.AllowInternalImages = true
	if len(gopts.Sandboxes.UploadKey) == 0 {
		gopts.Sandboxes.UploadKey = []byte(SandboxUploadKey)
	}
	s.SandboxUploadKey = gopts.Sandboxes.UploadKey
	// Listening here, rather than in ListenAndServe, makes a port of 0 safe: the address is known and held.
	ln, err := net.Listen("tcp", opts.GatewayAddr)
	if err != nil {
		return fmt.Errorf("failed to listen on %s for gatewayd: %w", opts.GatewayAddr, err)
	}
	if gopts.MetricsListener, err = net.Listen("tcp", opts.MetricsAddr); err != nil {
		_ = ln.Close()
		return fmt.Errorf("failed to listen on %s for gatewayd's metrics: %w", opts.MetricsAddr, err)
	}
	cfg := opts.State
	if cfg.Store == "" {
		cfg.Store = state.Embedded
	}
	if cfg.Dir == "" {
		cfg.Dir = filepath.Join(s.devDir, "state")
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithName("gatewayd"))
	g, st, err := gatewayd.NewWithState(ctx, gopts, cfg)
	if err != nil {
		_, _ = ln.Close(), gopts.MetricsListener.Close()
		return fmt.Errorf("failed to create gatewayd: %w", err)
	}
	s.Gateway = g
	s.GatewayURL = "http://" + ln.Addr().String()
	s.MetricsURL = "http://" + gopts.MetricsListener.Addr().String()
	s.run(ctx, "gatewayd", func(ctx context.Context) error {
		err := g.Serve(ctx, ln)
		// Serve has returned, so nothing charges the store any more: flush and close it.
		return errors.Join(err, st.Close())
	})
	return nil
}

// run runs a component until ctx ends, reporting an early stop on s.failed.
func (s *Stack) run(ctx context.Context, name string, start func(context.Context) error) {
	done := make(chan struct{})
	s.running = append(s.running, done)
	go func() {
		defer close(done)
		err := start(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("stopped without an error")
		}
		s.failed <- &stoppedError{component: name, err: err}
	}()
}

// webhookPortTaken tells whether err is the manager stopping because its webhook server's port was in use.
func webhookPortTaken(err error) bool {
	var stopped *stoppedError
	return errors.As(err, &stopped) && stopped.component == "manager" && errors.Is(stopped.err, syscall.EADDRINUSE)
}

// stoppedError is a component of the stack that stopped while it was meant to run.
type stoppedError struct {
	component string
	err       error
}

func (e *stoppedError) Error() string { return e.component + " stopped: " + e.err.Error() }
func (e *stoppedError) Unwrap() error { return e.err }

// waitManager waits for the webhook server, seeds the workspace through the webhooks, and waits for the
// manager to publish a snapshot that holds the seeded objects.
func (s *Stack) waitManager(ctx context.Context) error {
	logger := log.FromContext(ctx)
	if err := s.poll(ctx, "the webhook server to serve", func() error {
		return s.webhookServer.StartedChecker()(nil)
	}); err != nil {
		return err
	}
	logger.Info("Webhook server is serving")

	if err := s.seed(ctx); err != nil {
		return err
	}
	logger.Info("Seeded the workspace", "namespace", s.Namespace, "adminKeyPrefix", apikey.Prefix(s.APIKey))

	prefix := apikey.Prefix(s.APIKey)
	// The demo model server answers before the seed, so its deployment is ACTIVE at the first probe.
	if err := s.poll(ctx, "the manager to publish a snapshot with the admin key, the demo Endpoint and the demo model", func() error {
		snap, version, err := ReadSnapshot(ctx, s.Client, s.Namespace)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(snap.WorkspaceAPIKeys, func(k snapshot.WorkspaceAPIKey) bool { return k.Prefix == prefix }) {
			return fmt.Errorf("snapshot version %d lacks the admin key", version)
		}
		if !slices.ContainsFunc(snap.Endpoints, func(e snapshot.Endpoint) bool { return e.Slug == EndpointSlug }) {
			return fmt.Errorf("snapshot version %d lacks Endpoint %s", version, EndpointSlug)
		}
		if !slices.ContainsFunc(snap.Models, func(m snapshot.ServedModel) bool { return m.ID == ModelName }) {
			return fmt.Errorf("snapshot version %d lacks Model %s", version, ModelName)
		}
		if !slices.ContainsFunc(snap.Deployments, func(d snapshot.Deployment) bool { return d.ID == ModelDeploymentName && d.Ready }) {
			return fmt.Errorf("snapshot version %d lacks a ready ModelDeployment %s", version, ModelDeploymentName)
		}
		return nil
	}); err != nil {
		return err
	}
	logger.Info("Manager published the snapshot")
	return nil
}

// waitGatewayd waits for gatewayd's /readyz, which answers once the snapshots present at its start are loaded.
func (s *Stack) waitGatewayd(ctx context.Context) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	if err := s.poll(ctx, "gatewayd to be ready", func() error {
		resp, err := hc.Get(s.GatewayURL + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz answered %s", resp.Status)
		}
		return nil
	}); err != nil {
		return err
	}
	log.FromContext(ctx).Info("Gateway is ready", "url", s.GatewayURL)
	return nil
}

// poll retries check until it passes, ctx ends or a component fails, and reports the last reason on timeout.
func (s *Stack) poll(ctx context.Context, what string, check func() error) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out waiting for %s: %w", what, err)
		case ferr := <-s.failed:
			return fmt.Errorf("while waiting for %s: %w", what, ferr)
		case <-tick.C:
		}
	}
}
