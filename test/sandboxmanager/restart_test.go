// Package sandboxmanager runs the SandboxImageBuild reconciler in managers the test controls. It kills the manager in the middle of a sandbox image build and restarts it: the build
// must reach BUILT, with exactly one tag. It runs its own envtest and managers (the local stack's manager cannot
// be killed), and a real OCI registry on a loopback socket whose manifest writes the test can hold.
//
// envtest has no kubelet and no gatewayd here, so the test writes what gatewayd's upload would: the context
// artifact in the registry and the build's contextDigest and BUILDING status.
package sandboxmanager

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/modelgate/modelgate/api/sandbox"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers"
	"github.com/modelgate/modelgate/test/kubetest"
)

const ns = "default"

var (
	env *kubetest.Env
	// reg is the workspace registry of namespace default, for every test of the package.
	reg *holdingRegistry
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	var err error
	if env, err = kubetest.Start(kubetest.Options{CRDs: true}); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
	reg = newHoldingRegistry()
	err = env.Client.Create(context.Background(), &gatewayv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ws"},
		Spec: gatewayv1.WorkspaceSpec{ImageRegistry: registryOf()}})
	code := 1
	if err == nil {
		code = m.Run()
	} else {
		fmt.Fprintf(os.Stderr, "failed to create the Workspace: %v\n", err)
	}
	reg.close()
	_ = env.Stop()
	os.Exit(code)
}

func registryOf() *gatewayv1.ImageRegistry {
	return &gatewayv1.ImageRegistry{URL: "http://" + reg.host + "/sandboxes"}
}

// holdingRegistry is a registry whose manifest writes by digest wait while held, and report that they wait.
type holdingRegistry struct {
	host    string
	close   func()
	mu      sync.Mutex
	held    bool
	waiting chan struct{} // closed when the first held write arrives
	once    sync.Once
}

func newHoldingRegistry() *holdingRegistry {
	h := &holdingRegistry{waiting: make(chan struct{})}
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		held := h.held
		h.mu.Unlock()
		if held && r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/manifests/sha256:") {
			// Read the body, so the server notices when the client goes away, then hold until it does: the killed
			// manager's request dies with it.
			_, _ = io.Copy(io.Discard, r.Body)
			h.once.Do(func() { close(h.waiting) })
			select {
			case <-r.Context().Done():
			case <-time.After(time.Minute):
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		inner.ServeHTTP(w, r)
	}))
	h.close = srv.Close
	h.host = strings.TrimPrefix(srv.URL, "http://")
	return h
}

func (h *holdingRegistry) hold(on bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held = on
}

// startManager runs a manager with the product's controllers until the returned stop is called; stop returns
// once the manager has stopped.
func startManager(t *testing.T, opts controllers.SandboxOptions) (stop func()) {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := controllers.SetupWithManager(mgr, controllers.Options{Sandbox: opts}); err != nil {
		t.Fatal(err)
	}
	opts.AllowInternalImages, opts.TempDir = true, t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	return func() { cancel(); <-done }
}

// uploadContext writes what gatewayd's upload would: the ZIP as a single-layer artifact, tagged for the build.
func uploadContext(t *testing.T, repo name.Repository, build string, files map[string]string) string {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for n, c := range files {
		w, _ := zw.Create(n)
		_, _ = io.WriteString(w, c)
	}
	_ = zw.Close()
	layer := static.NewLayer(buf.Bytes(), types.MediaType("application/zip"))
	art, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	art = mutate.ConfigMediaType(mutate.MediaType(art, types.OCIManifestSchema1), sandbox.ContextMediaType)
	if err := remote.Write(repo.Tag(sandbox.ContextTag(build)), art); err != nil {
		t.Fatal(err)
	}
	d, _ := art.Digest()
	return d.String()
}

func create(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := env.Client.Create(context.Background(), o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
}

// pushBuild creates a build of img with an uploaded context, as the POST and the PUT would.
func pushBuild(t *testing.T, img *gatewayv1.SandboxImage, repo name.Repository, build string, files map[string]string) *gatewayv1.SandboxImageBuild {
	t.Helper()
	ctx := context.Background()
	b := &gatewayv1.SandboxImageBuild{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: build, Labels: map[string]string{gatewayv1.LabelSandboxImage: img.Name}},
		Spec:       gatewayv1.SandboxImageBuildSpec{ImageRef: img.Name, TeamID: img.Spec.TeamID, Source: gatewayv1.SandboxSource{Upload: &gatewayv1.SandboxUpload{}}},
	}
	create(t, b)
	b.Status.ContextDigest = uploadContext(t, repo, build, files)
	b.Status.Status = gatewayv1.SandboxBuilding
	if err := env.Client.Status().Update(ctx, b); err != nil {
		t.Fatal(err)
	}
	return b
}

func get[T client.Object](t *testing.T, name string, obj T) T {
	t.Helper()
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

func waitBuild(t *testing.T, name string) *gatewayv1.SandboxImageBuild {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		b := get(t, name, &gatewayv1.SandboxImageBuild{})
		if b.Status.Status.Terminal() {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("build %s is still %s", name, b.Phase())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestManagerKilledMidBuild(t *testing.T) {
	img := &gatewayv1.SandboxImage{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: gatewayv1.SandboxImageObjectName("red", "agent")},
		Spec: gatewayv1.SandboxImageSpec{TeamID: "red", Name: "agent"}}
	create(t, img)
	repo, err := sandbox.Repository(registryOf(), "red", "agent")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"Dockerfile": "FROM scratch\nCOPY hello.txt /hello.txt\nCMD [\"/hello\"]\n", "hello.txt": "hello\n"}
	b := pushBuild(t, img, repo, "sib-first", files)

	// Manager 1 builds until it writes the image's manifest, and is killed while that write hangs.
	reg.hold(true)
	stop := startManager(t, controllers.SandboxOptions{})
	select {
	case <-reg.waiting:
	case <-time.After(60 * time.Second):
		stop()
		t.Fatalf("the build never reached the registry")
	}
	stop()
	reg.hold(false)
	if got := get(t, b.Name, &gatewayv1.SandboxImageBuild{}); got.Status.Status != gatewayv1.SandboxBuilding {
		t.Fatalf("after the kill the build is %s (%s), want still BUILDING", got.Status.Status, got.Status.Reason)
	}
	if _, err := remote.Head(repo.Tag("v1")); err == nil {
		t.Fatalf("a tag exists although no build finished")
	}

	// Manager 2 runs the build again, to BUILT, with one tag.
	stop = startManager(t, controllers.SandboxOptions{})
	defer func() { stop() }()
	done := waitBuild(t, b.Name)
	if done.Status.Status != gatewayv1.SandboxBuilt || done.Status.Tag != "v1" {
		t.Fatalf("build after restart: %s tag %q reason %q", done.Status.Status, done.Status.Tag, done.Status.Reason)
	}
	if c := meta.FindStatusCondition(done.Status.Conditions, gatewayv1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue || c.Reason != gatewayv1.ReasonSandboxBuilt {
		t.Errorf("Ready condition of a BUILT build: %+v", c)
	}
	got := get(t, img.Name, &gatewayv1.SandboxImage{})
	if got.Status.LastVersion != 1 || len(got.Status.Tags) != 1 || got.Status.Tags[0].Name != "v1" || got.Status.Tags[0].Build != b.Name {
		t.Fatalf("image status after restart: %+v", got.Status)
	}
	image, err := remote.Image(repo.Tag("v1"))
	if err != nil {
		t.Fatalf("v1 is not in the registry: %v", err)
	}
	if d, _ := image.Digest(); d.String() != done.Status.Digest || got.Status.Tags[0].Digest != d.String() {
		t.Errorf("v1 is %s, status says %s / %s", d, done.Status.Digest, got.Status.Tags[0].Digest)
	}
	layers, _ := image.Layers()
	if len(layers) != 1 || fileIn(t, layers[0], "hello.txt") != "hello\n" {
		t.Errorf("v1 does not hold hello.txt")
	}

	// A run that died after recording its tag but before the build's status finds its tag and takes no other.
	pushBuild(t, img, repo, "sib-second", map[string]string{"Dockerfile": "FROM scratch\nCOPY hello.txt /b.txt\n", "hello.txt": "two\n"})
	deadline := time.Now().Add(60 * time.Second)
	for {
		d := get(t, "sib-second", &gatewayv1.SandboxImageBuild{})
		if d.Status.Status == gatewayv1.SandboxBuilt {
			if d.Status.Tag != "v2" {
				t.Fatalf("second build took %s", d.Status.Tag)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("second build: %+v", d.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Replay: mark it BUILDING again, as if the status write after the tag had been lost, and restart.
	stop()
	replay := get(t, "sib-second", &gatewayv1.SandboxImageBuild{})
	replay.Status.Status, replay.Status.Tag, replay.Status.Digest = gatewayv1.SandboxBuilding, "", ""
	if err := env.Client.Status().Update(context.Background(), replay); err != nil {
		t.Fatal(err)
	}
	stop = startManager(t, controllers.SandboxOptions{})
	again := waitBuild(t, "sib-second")
	if again.Status.Status != gatewayv1.SandboxBuilt || again.Status.Tag != "v2" {
		t.Fatalf("replayed build: %s %q %q", again.Status.Status, again.Status.Tag, again.Status.Reason)
	}
	final := get(t, img.Name, &gatewayv1.SandboxImage{})
	if final.Status.LastVersion != 2 || len(final.Status.Tags) != 2 {
		t.Fatalf("the replayed build took another tag: %+v", final.Status)
	}
	if _, err := remote.Head(repo.Tag("v3")); err == nil {
		t.Errorf("v3 exists in the registry")
	}
}

func fileIn(t *testing.T, l interface{ Uncompressed() (io.ReadCloser, error) }, path string) string {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			return ""
		}
		if h.Name == path {
			b, _ := io.ReadAll(tr)
			return string(b)
		}
	}
}

func keyOf(name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }
