// Package kubetest starts the local control plane that the modelgate suites run against: etcd and kube-apiserver
// from envtest (binaries from KUBEBUILDER_ASSETS) with the generated CRDs of config/crd/bases and, when a suite
// asks, the admission webhook configuration of config/webhook, together with a client and a manager that use the
// product's scheme. It finds config/ from its own source file, so every package directory gets the very same CRDs
// and webhook configuration. Start and NewManager return errors, for TestMain functions and benchmarks;
// StartSuite and RunManager are their forms for a ginkgo suite, which fail the suite instead.
package kubetest

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// Options say what Start installs besides the built-in kinds.
type Options struct {
	// CRDs installs the CRDs of config/crd/bases; Start fails when the directory is missing.
	CRDs bool
	// Webhooks installs the webhook configurations of config/webhook/manifests.yaml, pointed at a local webhook
	// server whose address and certificates ManagerOptions hands to the manager. Only the generated file: the
	// directory also holds kustomize inputs that are not webhook configurations.
	Webhooks bool
	// CRDPaths are more CRD directories or files to install (a chart's, other projects'), with or without CRDs.
	CRDPaths []string
	// Root is the repository whose config/ CRDs and Webhooks install; empty is the one this package was built from.
	Root string
}

// Env is a running control plane.
type Env struct {
	// Environment is the envtest environment, for what this package does not cover (users, kubeconfig).
	Environment *envtest.Environment
	// Config reaches the API server as the envtest admin user.
	Config *rest.Config
	// Scheme holds the built-in kinds and the product's.
	Scheme *k8sruntime.Scheme
	// Client is an uncached client with Scheme.
	Client client.Client
	// Clientset is client-go's typed client of the built-in kinds.
	Clientset kubernetes.Interface
}

func crdDir(root string) string { return filepath.Join(root, "config", "crd", "bases") }

// root is the repository root, two directories above this file.
func root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Scheme returns a new scheme with the built-in kinds and the product's.
func Scheme() *k8sruntime.Scheme {
	scheme := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(gatewayv1.AddToScheme(scheme))
	return scheme
}

// Start starts etcd and kube-apiserver with what opts asks for and builds a client. On error nothing is left
// running.
func Start(opts Options) (*Env, error) {
	if opts.Root == "" {
		opts.Root = root()
	}
	scheme := Scheme()
	env := &envtest.Environment{
		Scheme:                scheme,
		CRDDirectoryPaths:     opts.CRDPaths,
		ErrorIfCRDPathMissing: true,
		// Two shared cores building code can make a cold kube-apiserver slow to answer.
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	if opts.CRDs {
		env.CRDDirectoryPaths = append([]string{crdDir(opts.Root)}, opts.CRDPaths...)
	}
	if opts.Webhooks {
		env.WebhookInstallOptions.Paths = []string{filepath.Join(opts.Root, "config", "webhook", "manifests.yaml")}
	}
	cfg, err := env.Start()
	if err != nil {
		// A control plane that failed half way may still have etcd running.
		_ = env.Stop()
		return nil, fmt.Errorf("failed to start etcd and kube-apiserver (is KUBEBUILDER_ASSETS set? run hack/envtest-binaries.sh): %w", err)
	}
	e := &Env{Environment: env, Config: cfg, Scheme: scheme}
	if e.Client, err = client.New(cfg, client.Options{Scheme: e.Scheme}); err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("failed to create a client for envtest: %w", err)
	}
	if e.Clientset, err = kubernetes.NewForConfig(cfg); err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("failed to create a clientset for envtest: %w", err)
	}
	return e, nil
}

// StartTest is Start for one test: it fails tb when the control plane does not start, and stops it when tb ends.
func StartTest(tb testing.TB, opts Options) *Env {
	tb.Helper()
	e, err := Start(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := e.Stop(); err != nil {
			tb.Error(err)
		}
	})
	return e
}

// Lazy starts a control plane on first use and keeps it for the rest of the test binary, so a package whose unit
// tests and fuzzing need none does not pay for it. It starts one with the CRDs.
type Lazy struct {
	// OnStart, when set, is called once with the control plane, when it has started.
	OnStart func(*Env)

	once sync.Once
	env  *Env
	err  error
}

// Start returns the package's control plane, started by the first call; it fails tb when KUBEBUILDER_ASSETS is
// not set or the start failed.
func (l *Lazy) Start(tb testing.TB) *Env {
	tb.Helper()
	l.once.Do(func() {
		if os.Getenv("KUBEBUILDER_ASSETS") == "" {
			l.err = fmt.Errorf("KUBEBUILDER_ASSETS is not set: this test needs envtest binaries (make envtest)")
			return
		}
		if l.env, l.err = Start(Options{CRDs: true}); l.err == nil && l.OnStart != nil {
			l.OnStart(l.env)
		}
	})
	if l.err != nil {
		tb.Fatal(l.err)
	}
	return l.env
}

// Main is a TestMain that runs the tests and then stops the control plane if one started.
func (l *Lazy) Main(m *testing.M) {
	code := m.Run()
	_ = l.env.Stop()
	os.Exit(code)
}

// Stop stops the control plane. It is safe on a nil Env, so that a suite whose start failed can still call it.
func (e *Env) Stop() error {
	if e == nil {
		return nil
	}
	if err := e.Environment.Stop(); err != nil {
		return fmt.Errorf("failed to stop envtest: %w", err)
	}
	return nil
}

// ManagerOptions returns the options of a manager in a test process: the Env's scheme, no metrics or health
// probe listener (several suites run at once on one machine), and, when the webhooks are installed, a webhook
// server on the address and with the certificates the API server was configured to call.
func (e *Env) ManagerOptions() ctrl.Options {
	opts := ctrl.Options{
		Scheme:                 e.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	}
	if wio := &e.Environment.WebhookInstallOptions; len(wio.Paths) > 0 {
		opts.WebhookServer = webhook.NewServer(webhook.Options{
			Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir,
		})
	}
	return opts
}

// NewManager creates a manager with ManagerOptions and runs each setup on it (adding controllers or webhooks).
func (e *Env) NewManager(setup ...func(ctrl.Manager) error) (ctrl.Manager, error) {
	mgr, err := ctrl.NewManager(e.Config, e.ManagerOptions())
	if err != nil {
		return nil, fmt.Errorf("failed to create manager: %w", err)
	}
	for _, s := range setup {
		if err := s(mgr); err != nil {
			return nil, fmt.Errorf("failed to set up the manager: %w", err)
		}
	}
	return mgr, nil
}

// ProbeWebhook makes one TLS connection to the webhook server, the way the API server reaches it, and reports
// whether it answered. Until it does, a write that needs admission fails.
func (e *Env) ProbeWebhook() error {
	wio := &e.Environment.WebhookInstallOptions
	addr := net.JoinHostPort(wio.LocalServingHost, strconv.Itoa(wio.LocalServingPort))
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // test-only probe of a local self-signed server
	if err != nil {
		return fmt.Errorf("webhook server at %s did not answer: %w", addr, err)
	}
	return conn.Close()
}

// WaitWebhook probes the webhook server every 50 ms until it answers or ctx ends.
func (e *Env) WaitWebhook(ctx context.Context) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := e.ProbeWebhook()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-tick.C:
		}
	}
}

// NewNamespace creates a namespace named prefix plus a generated suffix and returns its name. A spec that
// works in its own namespace (a workspace) never sees another spec's objects or snapshot.
func NewNamespace(ctx context.Context, c client.Client, prefix string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := c.Create(ctx, ns); err != nil {
		return "", fmt.Errorf("failed to create a namespace %s*: %w", prefix, err)
	}
	return ns.Name, nil
}

// EndpointAddress returns an address of this host that an EndpointSlice accepts (the API server refuses loopback
// and link-local ones), for tests that write slices pointing at real servers as the EndpointSlice controller
// would. It skips the test when the host has none.
func EndpointAddress(tb testing.TB) netip.Addr {
	tb.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		tb.Fatalf("failed to list the host's addresses: %v", err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().IsGlobalUnicast() {
			return p.Addr()
		}
	}
	tb.Skip("the host has no non-loopback address for an EndpointSlice to point at")
	return netip.Addr{}
}
