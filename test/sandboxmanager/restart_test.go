// Package sandboxmanager runs the SandboxImageBuild reconciler against its own envtest and a real OCI registry on
// a loopback socket whose writes the test can hold. Its restart tests run the manager binary (cmd/manager) as
// leader-elected child processes and kill one with SIGKILL (or stop it with SIGTERM) in the middle of a sandbox
// image build: a new process must take the Lease and bring the build to BUILT, with exactly one tag. The
// BuildKit test runs the reconciler in an in-process manager, since it only inspects the Job it creates.
//
// envtest has no kubelet and no gatewayd here, so the tests write what gatewayd's upload would: the context
// artifact in the registry and the build's contextDigest and BUILDING status.
package sandboxmanager

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-containerregistry/pkg/name"
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
	"github.com/modelgate/modelgate/controllers/sandboximage"
	"github.com/modelgate/modelgate/test/kubetest"
	"github.com/modelgate/modelgate/test/ocitest"
)

const ns = "default"

var (
	env *kubetest.Env
	// reg is the workspace registry of namespace default, for every test of the package.
	reg *holdingRegistry
	// api is the manager processes' way to the API server.
	api *apiProxy
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	var err error
	if env, err = kubetest.Start(kubetest.Options{CRDs: true}); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
	reg = newHoldingRegistry()
	if api, err = newAPIProxy(env.Config); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		_ = env.Stop()
		os.Exit(1)
	}
	err = env.Client.Create(context.Background(), &gatewayv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ws"},
		Spec: gatewayv1.WorkspaceSpec{ImageRegistry: registryOf()}})
	code := 1
	if err == nil {
		code = m.Run()
	} else {
		fmt.Fprintf(os.Stderr, "failed to create the Workspace: %v\n", err)
	}
	reg.close()
	api.srv.Close()
	_ = env.Stop()
	os.Exit(code)
}

func registryOf() *gatewayv1.ImageRegistry {
	return &gatewayv1.ImageRegistry{URL: "http://" + reg.host + "/sandboxes"}
}

// startManager runs a manager with the product's controllers in the test process (for the BuildKit test, which
// kills nothing) until the returned stop is called; stop returns once the manager has stopped.
func startManager(t *testing.T, opts sandboximage.Options) (stop func()) {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	opts.AllowInternalImages, opts.TempDir = true, t.TempDir()
	if err := controllers.SetupWithManager(mgr, controllers.Options{Sandbox: opts}); err != nil {
		t.Fatal(err)
	}
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
	deadline := time.Now().Add(2 * time.Minute)
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

// TestManagerProcessKilledMidBuild runs the manager binary (cmd/manager) as a child process, leader-elected, and
// kills it with SIGKILL at three points of a build: while the built image's manifest is being written; after the
// image's v-tag is in the registry but before the SandboxImage records it; and after the SandboxImage records it
// but before the build's BUILT status is written. Each time a new manager process takes the Lease once the killed
// one's expires, runs the build again to BUILT, and no tag is taken twice.
func TestManagerProcessKilledMidBuild(t *testing.T) {
	img := &gatewayv1.SandboxImage{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: gatewayv1.SandboxImageObjectName("red", "agent")},
		Spec: gatewayv1.SandboxImageSpec{TeamID: "red", Name: "agent"}}
	create(t, img)
	repo, err := sandbox.Repository(registryOf(), "red", "agent")
	if err != nil {
		t.Fatal(err)
	}
	managerBinary(t) // built before any timing matters

	// Manager 1 builds until it writes the image's manifest, and is killed while that write is held.
	held := reg.hold(manifestByDigest(repo))
	b := pushBuild(t, img, repo, "sib-first", map[string]string{"Dockerfile": "FROM scratch\nCOPY hello.txt /hello.txt\nCMD [\"/hello\"]\n", "hello.txt": "hello\n"})
	m1 := startManagerProcess(t, "1")
	waitHeld(t, held, m1, "the manifest write of sib-first")
	holder1, _ := leaseHolder(t)
	m1.kill(t)
	reg.release()
	if got := get(t, b.Name, &gatewayv1.SandboxImageBuild{}); got.Status.Status != gatewayv1.SandboxBuilding {
		t.Fatalf("after the kill the build is %s (%s), want still BUILDING", got.Status.Status, got.Status.Reason)
	}
	if holder, _ := leaseHolder(t); holder != holder1 {
		t.Fatalf("the Lease names %q after the kill, want the killed leader %q (SIGKILL releases nothing)", holder, holder1)
	}
	expectTags(t, repo, nil)

	// Manager 2 leads once the Lease expires and runs the build again, to BUILT, with one tag.
	m2 := startManagerProcess(t, "2")
	done := waitBuild(t, b.Name)
	if done.Status.Status != gatewayv1.SandboxBuilt || done.Status.Tag != "v1" {
		t.Fatalf("build after restart: %s tag %q reason %q", done.Status.Status, done.Status.Tag, done.Status.Reason)
	}
	if c := meta.FindStatusCondition(done.Status.Conditions, gatewayv1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue || c.Reason != gatewayv1.ReasonSandboxBuilt {
		t.Errorf("Ready condition of a BUILT build: %+v", c)
	}
	if holder2, transitions := leaseHolder(t); holder2 == holder1 || transitions < 1 {
		t.Errorf("the Lease is held by %q after %d transitions; want the new manager, not %q", holder2, transitions, holder1)
	}
	expectImageStatus(t, repo, img.Name, 1, map[string]string{"v1": b.Name})
	expectTags(t, repo, map[string]string{"v1": done.Status.Digest, "latest": done.Status.Digest})
	image, err := remote.Image(repo.Tag("v1"))
	if err != nil {
		t.Fatalf("v1 is not in the registry: %v", err)
	}
	layers, _ := image.Layers()
	if len(layers) != 1 || ocitest.FileIn(t, layers[0], "hello.txt") != "hello\n" {
		t.Errorf("v1 does not hold hello.txt")
	}
	if cf, err := image.ConfigFile(); err != nil || !slices.Equal(cf.Config.Cmd, []string{"/hello"}) {
		t.Errorf("v1's config: %+v, %v", cf, err)
	}

	// Manager 2 is killed after writing v2 and while it writes latest: the registry has v2, the SandboxImage
	// does not record it. Manager 3 runs the build again and takes v2, not v3.
	held = reg.hold(tagWrite(repo, "latest"))
	second := pushBuild(t, img, repo, "sib-second", map[string]string{"Dockerfile": "FROM scratch\nCOPY hello.txt /b.txt\n", "hello.txt": "two\n"})
	waitHeld(t, held, m2, "the latest tag write of sib-second")
	m2.kill(t)
	reg.release()
	if got := get(t, second.Name, &gatewayv1.SandboxImageBuild{}); got.Status.Status != gatewayv1.SandboxBuilding {
		t.Fatalf("after the kill the second build is %s (%s), want still BUILDING", got.Status.Status, got.Status.Reason)
	}
	expectImageStatus(t, repo, img.Name, 1, map[string]string{"v1": b.Name})
	orphan, err := remote.Head(repo.Tag("v2"))
	if err != nil {
		t.Fatalf("the killed manager did not get to write v2, so the kill was not between the tag and its record: %v", err)
	}
	m3 := startManagerProcess(t, "3")
	done2 := waitBuild(t, second.Name)
	if done2.Status.Status != gatewayv1.SandboxBuilt || done2.Status.Tag != "v2" {
		t.Fatalf("second build after restart: %s tag %q reason %q", done2.Status.Status, done2.Status.Tag, done2.Status.Reason)
	}
	if done2.Status.Digest != orphan.Digest.String() {
		t.Errorf("the rebuilt image is %s, the killed run's was %s: the built-in builder is not reproducible", done2.Status.Digest, orphan.Digest)
	}
	expectImageStatus(t, repo, img.Name, 2, map[string]string{"v1": b.Name, "v2": second.Name})
	expectTags(t, repo, map[string]string{"v1": done.Status.Digest, "v2": done2.Status.Digest, "latest": done2.Status.Digest})

	// Manager 3 is killed while it writes the third build's BUILT status: the SandboxImage records v3 for it, the
	// build is still BUILDING. Manager 4 runs it again, finds v3 recorded and takes no other.
	held = api.hold(buildStatusWrite("sib-third", string(gatewayv1.SandboxBuilt)))
	third := pushBuild(t, img, repo, "sib-third", map[string]string{"Dockerfile": "FROM scratch\nCOPY hello.txt /c.txt\n", "hello.txt": "three\n"})
	waitHeld(t, held, m3, "the BUILT status write of sib-third")
	m3.kill(t)
	api.release()
	if got := get(t, third.Name, &gatewayv1.SandboxImageBuild{}); got.Status.Status != gatewayv1.SandboxBuilding {
		t.Fatalf("after the kill the third build is %s (%s), want still BUILDING", got.Status.Status, got.Status.Reason)
	}
	expectImageStatus(t, repo, img.Name, 3, map[string]string{"v1": b.Name, "v2": second.Name, "v3": third.Name})
	startManagerProcess(t, "4")
	done3 := waitBuild(t, third.Name)
	if done3.Status.Status != gatewayv1.SandboxBuilt || done3.Status.Tag != "v3" {
		t.Fatalf("third build after restart: %s tag %q reason %q", done3.Status.Status, done3.Status.Tag, done3.Status.Reason)
	}
	expectImageStatus(t, repo, img.Name, 3, map[string]string{"v1": b.Name, "v2": second.Name, "v3": third.Name})
	expectTags(t, repo, map[string]string{"v1": done.Status.Digest, "v2": done2.Status.Digest, "v3": done3.Status.Digest, "latest": done3.Status.Digest})
}

// waitHeld waits until the registry or the API proxy holds a write the manager process m makes, failing if m
// exits first.
func waitHeld(t *testing.T, held <-chan struct{}, m *managerProcess, what string) {
	t.Helper()
	select {
	case <-held:
	case <-m.Done:
		t.Fatalf("the manager exited before %s: %v", what, m.Cmd.ProcessState)
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s never arrived", what)
	}
}

// expectTags checks that the image tags of repo (every tag but the uploaded contexts') are exactly want, tag to
// digest.
func expectTags(t *testing.T, repo name.Repository, want map[string]string) {
	t.Helper()
	tags, err := remote.List(repo)
	if err != nil {
		t.Fatalf("list the tags of %s: %v", repo, err)
	}
	got := map[string]string{}
	for _, tag := range tags {
		if strings.HasPrefix(tag, sandbox.ContextTag("")) {
			continue
		}
		desc, err := remote.Head(repo.Tag(tag))
		if err != nil {
			t.Fatalf("head %s: %v", tag, err)
		}
		got[tag] = desc.Digest.String()
	}
	if len(want) == 0 && len(got) == 0 {
		return
	}
	if !maps.Equal(got, want) {
		t.Errorf("registry tags of %s: %v, want %v", repo, got, want)
	}
}

// expectImageStatus checks the SandboxImage's version counter and that its tags are exactly want (tag to build),
// each once, with the digest the registry has under that tag.
func expectImageStatus(t *testing.T, repo name.Repository, name string, lastVersion int64, want map[string]string) {
	t.Helper()
	st := get(t, name, &gatewayv1.SandboxImage{}).Status
	got := map[string]string{}
	for _, tag := range st.Tags {
		if _, dup := got[tag.Name]; dup {
			t.Errorf("status.tags has %s twice: %+v", tag.Name, st.Tags)
		}
		got[tag.Name] = tag.Build
		if desc, err := remote.Head(repo.Tag(tag.Name)); err != nil || desc.Digest.String() != tag.Digest {
			t.Errorf("status.tags records %s at %s, the registry has %v (%v)", tag.Name, tag.Digest, desc, err)
		}
	}
	if st.LastVersion != lastVersion || len(st.Tags) != len(want) || !maps.Equal(got, want) {
		t.Fatalf("image status: lastVersion %d tags %+v, want %d and %v", st.LastVersion, st.Tags, lastVersion, want)
	}
}

func keyOf(name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }

// TestManagerProcessStoppedMidBuild stops the manager process with SIGTERM while the built image's manifest is
// being written: the manager cancels the build, which stays BUILDING (a stop is not a failure), and gives up its
// Lease on the way out, so the next manager process leads without waiting for it to expire and builds to BUILT.
func TestManagerProcessStoppedMidBuild(t *testing.T) {
	img := &gatewayv1.SandboxImage{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: gatewayv1.SandboxImageObjectName("red", "stopped")},
		Spec: gatewayv1.SandboxImageSpec{TeamID: "red", Name: "stopped"}}
	create(t, img)
	repo, err := sandbox.Repository(registryOf(), "red", "stopped")
	if err != nil {
		t.Fatal(err)
	}
	managerBinary(t)

	held := reg.hold(manifestByDigest(repo))
	b := pushBuild(t, img, repo, "sib-stopped", map[string]string{"Dockerfile": "FROM scratch\nCOPY hello.txt /hello.txt\n", "hello.txt": "stopped\n"})
	m1 := startManagerProcess(t, "1")
	waitHeld(t, held, m1, "the manifest write of sib-stopped")
	m1.terminate(t)
	reg.release()
	if got := get(t, b.Name, &gatewayv1.SandboxImageBuild{}); got.Status.Status != gatewayv1.SandboxBuilding {
		t.Fatalf("after the stop the build is %s (%s), want still BUILDING", got.Status.Status, got.Status.Reason)
	}
	if holder, _ := leaseHolder(t); holder != "" {
		t.Errorf("the stopped leader did not release its Lease: it names %q", holder)
	}
	expectTags(t, repo, nil)

	startManagerProcess(t, "2")
	done := waitBuild(t, b.Name)
	if done.Status.Status != gatewayv1.SandboxBuilt || done.Status.Tag != "v1" {
		t.Fatalf("build after restart: %s tag %q reason %q", done.Status.Status, done.Status.Tag, done.Status.Reason)
	}
	expectImageStatus(t, repo, img.Name, 1, map[string]string{"v1": b.Name})
	expectTags(t, repo, map[string]string{"v1": done.Status.Digest, "latest": done.Status.Digest})
}
