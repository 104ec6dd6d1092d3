// Package resttest is the fixture of the /v1 management API's suites: the real control plane in-process
// (envtest's kube-apiserver and etcd with the generated CRDs, and a manager with the admission webhooks and every
// controller, including the snapshot materializer) and the API served on a loopback httptest server. Its
// Directory reads the published snapshot ConfigMaps, as gatewayd's loader does, so read-your-writes is checked
// against what the data plane would load.
//
// The API and its Directory run with gatewayd's permissions, not the envtest admin's: Gatewayd impersonates the
// gatewayd ServiceAccount bound to the RBAC that `helm template` renders for the chart (docs/rbac.md), so a
// route that needs a verb the chart does not grant fails its specs as it would fail on a real install.
//
// A package's ginkgo suite calls RunSpecs from its one Test function: the fixture starts once before the
// package's specs and stops after them. The helpers (Call, ExpectError, Conform, Workspace, SeedKey, ...) are
// ginkgo helpers and are called from specs.
package resttest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/modelgate/modelgate/controllers"
	"github.com/modelgate/modelgate/gatewayd/rest"
	"github.com/modelgate/modelgate/test/chart/helmtest"
	"github.com/modelgate/modelgate/test/kubetest"
	"github.com/modelgate/modelgate/webhooks"
)

// The fixture, set before the suite's specs run.
var (
	// Ctx lives until the suite ends.
	Ctx context.Context
	// Client is envtest's client, as the admin: for the specs' own setup and checks.
	Client client.Client
	// Gatewayd is gatewayd's client: envtest's API server as the chart's gatewayd ServiceAccount, with exactly the
	// permissions the chart grants it. Serve gives it to the API; a spec that builds the API itself uses it too.
	Gatewayd client.Client
	// Env is the envtest control plane.
	Env *kubetest.Env
	// Dir is the Directory of every API the fixture serves.
	Dir *Directory
	// Server serves the API with default options.
	Server *httptest.Server

	cancel context.CancelFunc
	// rbac is the chart's rendered RBAC, rendered by RunSpecs (helm needs the test) and applied by start.
	rbac helmtest.RBAC
)

// RunSpecs runs the package's ginkgo specs around the fixture: it starts the control plane and Server before
// the first spec and stops them after the last. Call it once, from the package's Test function.
func RunSpecs(t *testing.T, description string) {
	rbac = helmtest.RenderRBAC(t)
	RegisterFailHandler(ginkgo.Fail)
	ginkgo.BeforeSuite(start)
	ginkgo.AfterSuite(stop)
	ginkgo.RunSpecs(t, description)
}

func start() {
	logf.SetLogger(zap.New(zap.WriteTo(ginkgo.GinkgoWriter), zap.UseDevMode(true)))
	Ctx, cancel = context.WithCancel(context.Background())
	var err error
	Env, err = StartControlPlane(Ctx)
	Expect(err).NotTo(HaveOccurred())
	Client = Env.Client
	Gatewayd, err = gatewaydClient(Ctx, Env, rbac)
	Expect(err).NotTo(HaveOccurred())
	Dir = NewDirectory(Gatewayd)
	Server = Serve(rest.Options{})
}

func stop() {
	if Server != nil {
		Server.Close()
	}
	if cancel != nil {
		cancel()
	}
	Expect(Env.Stop()).To(Succeed())
}

// StartControlPlane starts envtest with the CRDs and webhook configuration, and a manager running the webhooks
// and every controller until ctx ends. It returns once the webhook server answers; when it fails after envtest
// started, it returns the Env too, for the caller to stop.
func StartControlPlane(ctx context.Context) (*kubetest.Env, error) {
	env, err := kubetest.Start(kubetest.Options{CRDs: true, Webhooks: true})
	if err != nil {
		return nil, err
	}
	mgr, err := env.NewManager(webhooks.SetupWithManager, func(mgr ctrl.Manager) error {
		return controllers.SetupWithManager(mgr, controllers.Options{SkipNameValidation: true})
	})
	if err != nil {
		return env, err
	}
	go func() { _ = mgr.Start(ctx) }()
	wctx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	return env, env.WaitWebhook(wctx)
}

// gatewaydClient applies rbac to env's API server and returns a client acting as its gatewayd ServiceAccount.
func gatewaydClient(ctx context.Context, env *kubetest.Env, rbac helmtest.RBAC) (client.Client, error) {
	cfg, err := rbac.As(ctx, env.Config, "gatewayd")
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: env.Scheme})
}

// Serve starts the API with gatewayd's client (Gatewayd) and the fixture's directory on a loopback server, closed
// when the current node's cleanup runs. The read-your-writes bound is generous so that the specs can assert that a
// write is in the snapshot as soon as the call returns.
func Serve(opts rest.Options) *httptest.Server {
	opts.Client = Gatewayd
	opts.Directory = Dir
	if opts.ReadYourWritesTimeout == 0 {
		opts.ReadYourWritesTimeout = 30 * time.Second
	}
	opts.Logger = logf.Log.WithName("rest")
	mux := http.NewServeMux()
	rest.New(opts).Register(mux)
	srv := httptest.NewServer(mux)
	ginkgo.DeferCleanup(srv.Close)
	return srv
}

// Clock is a settable time source for rest.Options.Clock.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock at now.
func NewClock(now time.Time) *Clock { return &Clock{now: now} }

// Now is the clock's time.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.now = c.now.Add(d) }

// FixedUsage is a rest.Options.Usage that answers N for every usage counter.
type FixedUsage struct{ N int64 }

// Usage answers N.
func (u FixedUsage) Usage(_ context.Context, _, _, _, _, _ string, _ time.Time) (int64, error) {
	return u.N, nil
}
