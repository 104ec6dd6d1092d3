package sandbox

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/ids"
	"github.com/modelgate/modelgate/api/sandbox"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/gatewayd/rest/sandboxes"
	"github.com/modelgate/modelgate/test/kubetest"
	"github.com/modelgate/modelgate/test/ocitest"
	"github.com/modelgate/modelgate/test/stack"
)

// signedUploadURL is the upload URL gatewayd at base would issue for build in ns, expiring at exp (docs/rest-api.md
// "Sandbox images").
func signedUploadURL(base, ns, build string, exp time.Time) string {
	m := hmac.New(sha256.New, st.SandboxUploadKey)
	fmt.Fprintf(m, "PUT\n%s\n%s\n%d", ns, build, exp.Unix())
	q := url.Values{"expires": {fmt.Sprint(exp.Unix())}, "sig": {hex.EncodeToString(m.Sum(nil))}}
	return base + "/v1/sandboxes/uploads/" + ns + "." + build + "?" + q.Encode()
}

// createBuild creates what a push of image for team creates (gatewayd/rest/sandboxes push) in ns, without a key
// of that namespace: the SandboxImage, the build from src, and the image's pointer at the build.
func createBuild(t *testing.T, ns, team, image string, src gatewayv1.SandboxSource) *gatewayv1.SandboxImageBuild {
	t.Helper()
	ctx := t.Context()
	img := &gatewayv1.SandboxImage{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: gatewayv1.SandboxImageObjectName(team, image),
			Labels: map[string]string{gatewayv1.LabelSandboxTeam: team}},
		Spec: gatewayv1.SandboxImageSpec{TeamID: team, Name: image},
	}
	if err := st.Client.Create(ctx, img); err != nil {
		t.Fatal(err)
	}
	build := &gatewayv1.SandboxImageBuild{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ids.New(ids.SandboxImageBuild),
			Labels: map[string]string{gatewayv1.LabelSandboxImage: img.Name, gatewayv1.LabelSandboxTeam: team},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: gatewayv1.GroupVersion.String(), Kind: "SandboxImage",
				Name: img.Name, UID: img.UID}}},
		Spec: gatewayv1.SandboxImageBuildSpec{ImageRef: img.Name, TeamID: team, Source: src},
	}
	if err := st.Client.Create(ctx, build); err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, gatewayv1.AnnotationLatestBuild, build.Name)
	if err := st.Client.Patch(ctx, img, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	return build
}

// waitBuild reads build again until it is BUILT or FAILED.
func waitBuild(t *testing.T, build *gatewayv1.SandboxImageBuild) {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if err := st.Client.Get(t.Context(), client.ObjectKeyFromObject(build), build); err != nil {
			t.Fatal(err)
		}
		if p := build.Phase(); p == gatewayv1.SandboxBuilt || p == gatewayv1.SandboxFailed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("build %s is still %s", build.Name, build.Phase())
		}
	}
}

// gate holds every blob upload a registry receives until each of want requests has either reached it or been
// answered without reaching it: then none has yet recorded its upload, and all of them race for the build.
type gate struct {
	mu     sync.Mutex
	want   int
	seen   int
	opened chan struct{}
}

func newGate(want int) *gate { return &gate{want: want, opened: make(chan struct{})} }

// count counts one request; the last one opens the gate.
func (g *gate) count() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seen++
	if g.seen == g.want {
		close(g.opened)
	}
}

// wrap holds h's blob upload starts (POST .../blobs/uploads/) while the gate is shut.
func (g *gate) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/blobs/uploads/") {
			select {
			case <-g.opened:
			default:
				g.count()
				select {
				case <-g.opened:
				case <-r.Context().Done():
				case <-time.After(2 * time.Minute): // a safety net, should the test have miscounted
				}
			}
		}
		h.ServeHTTP(w, r)
	})
}

// secondReplica starts another gatewayd on the stack's API server, with the stack's upload key, and returns its
// base URL: a signed URL is valid on every replica.
func secondReplica(t *testing.T) string {
	t.Helper()
	g, err := gatewayd.New(gatewayd.Options{RESTConfig: st.Config,
		Sandboxes: sandboxes.Options{UploadKey: st.SandboxUploadKey, AllowInternalImages: true}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop, err := gatewaytest.Start(context.Background(), g, ln, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return "http://" + ln.Addr().String()
}

// TestConcurrentUploadsOneWins: N different ZIPs PUT at once to one signed URL, through two gatewayd replicas, all
// past the check that the build waits for an upload: exactly one is answered 200, the others 409 naming build, and
// the build, the registry's context tag and the built image all hold the winner's context (docs/rest-api.md
// "Sandbox images": a second upload to the same build is 409).
func TestConcurrentUploadsOneWins(t *testing.T) {
	const n = 6
	ctx := t.Context()
	g := newGate(n)
	regSrv := httptest.NewServer(g.wrap(stack.Registry(t.TempDir())))
	t.Cleanup(regSrv.Close)
	regHost := strings.TrimPrefix(regSrv.URL, "http://")

	ns, err := kubetest.NewNamespace(ctx, st.Client, "upload-race-")
	if err != nil {
		t.Fatal(err)
	}
	ws := &gatewayv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"},
		Spec: gatewayv1.WorkspaceSpec{ImageRegistry: &gatewayv1.ImageRegistry{URL: "http://" + regHost + "/sandboxes"}}}
	if err := st.Client.Create(ctx, ws); err != nil {
		t.Fatal(err)
	}
	build := createBuild(t, ns, "red", "race", gatewayv1.SandboxSource{Upload: &gatewayv1.SandboxUpload{}})

	bases := []string{st.GatewayURL, secondReplica(t)}
	exp := time.Now().Add(time.Hour)
	answers, errs := make([]response, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		body := zipBytes(t, map[string]string{"Dockerfile": "FROM scratch\nCOPY id.txt /id.txt\n", "id.txt": fmt.Sprintf("upload %d\n", i)})
		wg.Go(func() {
			defer g.count() // answered: counted, in case it never reached the registry
			answers[i], errs[i] = tryPut(signedUploadURL(bases[i%len(bases)], ns, build.Name, exp), bytes.NewReader(body), int64(len(body)))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("PUT upload: %v", err)
	}

	winner, digest := -1, ""
	for i, a := range answers {
		switch a.code {
		case http.StatusOK:
			var out struct {
				ContextDigest string `json:"context_digest"`
			}
			_ = json.Unmarshal(a.raw, &out)
			if winner >= 0 {
				t.Errorf("uploads %d and %d were both accepted: %v; %v", winner, i, answers[winner], a)
			}
			winner, digest = i, out.ContextDigest
		case http.StatusConflict:
			if !strings.Contains(string(a.raw), `"field":"build"`) {
				t.Errorf("upload %d: a 409 that does not name build: %v", i, a)
			}
		default:
			t.Errorf("upload %d: %v, want 200 or 409", i, a)
		}
	}
	if winner < 0 {
		t.Fatalf("no upload was accepted: %v", answers)
	}

	if err := st.Client.Get(ctx, client.ObjectKeyFromObject(build), build); err != nil {
		t.Fatal(err)
	}
	if build.Status.ContextDigest != digest {
		t.Errorf("the build records context %s, the accepted upload answered %s", build.Status.ContextDigest, digest)
	}
	repo, err := name.NewRepository(regHost+"/sandboxes/red/race", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Head(repo.Tag(sandbox.ContextTag(build.Name)))
	if err != nil {
		t.Fatalf("the context tag: %v", err)
	}
	if desc.Digest.String() != digest {
		t.Errorf("the registry's %s is %s, the accepted upload answered %s", sandbox.ContextTag(build.Name), desc.Digest, digest)
	}

	// The manager builds the winner's context.
	if waitBuild(t, build); build.Phase() != gatewayv1.SandboxBuilt {
		t.Fatalf("build %s is %s: %s", build.Name, build.Phase(), build.Status.Reason)
	}
	built, err := remote.Image(repo.Tag(build.Status.Tag))
	if err != nil {
		t.Fatalf("the built image: %v", err)
	}
	layers, err := built.Layers()
	if err != nil || len(layers) == 0 {
		t.Fatalf("the built image's layers: %d, %v", len(layers), err)
	}
	if got, want := ocitest.FileIn(t, layers[len(layers)-1], "id.txt"), fmt.Sprintf("upload %d\n", winner); got != want {
		t.Errorf("the built image holds id.txt %q, want the accepted upload's %q", got, want)
	}
}
