package sandbox

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/test/kubetest"
	"github.com/modelgate/modelgate/test/ocitest"
)

// sourceRegistry starts a registry on a loopback socket; with user set, every request needs basic auth.
func sourceRegistry(t *testing.T, user, pass string) string {
	t.Helper()
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if user != "" {
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="source"`)
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			inner.ServeHTTP(w, r)
		})
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// cleaningProxy serves the registry at host behind a proxy that merges slashes and resolves dot segments in the
// path before it forwards, as nginx does by default, and returns the proxy's host.
func cleaningProxy(t *testing.T, host string) string {
	t.Helper()
	target, _ := url.Parse("http://" + host)
	rp := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cleaned := path.Clean(r.URL.Path)
		if strings.HasSuffix(r.URL.Path, "/") && cleaned != "/" {
			cleaned += "/"
		}
		r.URL.Path, r.URL.RawPath = cleaned, ""
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func pushRandom(t *testing.T, ref string, opts ...remote.Option) v1.Image {
	t.Helper()
	img, err := random.Image(1024, 2)
	if err != nil {
		t.Fatal(err)
	}
	img, _ = mutate.Config(img, v1.Config{Env: []string{"PATH=/bin"}, Cmd: []string{"sh"}})
	r, _ := name.ParseReference(ref)
	if err := remote.Write(r, img, opts...); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return img
}

// workspaceImage reads tag of the team's repository from the workspace registry.
func workspaceImage(t *testing.T, team, repo, tag string) v1.Image {
	t.Helper()
	ref, err := name.ParseReference(st.RegistryHost+"/sandboxes/"+team+"/"+repo+":"+tag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatalf("remote.Image(%s): %v", ref, err)
	}
	return img
}

func digestOf(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// waitStatus polls GET until the image reaches a terminal status, and returns the last answer.
func waitStatus(t *testing.T, key, image string, header map[string]string) response {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		r := call(t, key, "GET", "/v1/sandboxes/images/"+url.PathEscape(image), nil, header)
		if r.code != 200 {
			t.Fatalf("GET image: %v", r)
		}
		if _, has := r.body["error"]; has && r.body["status"] != "FAILED" {
			t.Errorf("image %s is %s and says an error: %v", image, r.body["status"], r)
		}
		if s := r.body["status"]; s == "BUILT" || s == "FAILED" {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("image %s did not finish: %v", image, r)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var red = map[string]string{"X-Team-Id": "red"}

func TestImportPublicImage(t *testing.T) {
	src := sourceRegistry(t, "", "")
	want := pushRandom(t, src+"/library/tool:1.0")
	r := call(t, redKey, "POST", "/v1/sandboxes/images", map[string]any{"name": "tool", "image": src + "/library/tool:1.0"}, nil)
	if r.code != http.StatusAccepted || r.body["status"] != "BUILDING" || r.body["upload_url"] != nil {
		t.Fatalf("POST import: %v", r)
	}
	wantRefs(t, "the import's push answer", r, "tool", "")
	done := waitStatus(t, redKey, "tool", nil)
	if done.body["status"] != "BUILT" || !slices.Contains(asStrings(done.body["tags"]), "v1") {
		t.Fatalf("import did not build v1: %v", done)
	}
	wantRefs(t, "GET once BUILT", done, "tool", "v1")
	got := workspaceImage(t, "red", "tool", "v1")
	sameImage(t, got, want)
	if digestOf(t, workspaceImage(t, "red", "tool", "latest")) != digestOf(t, want) {
		t.Errorf("latest does not point at the import")
	}
}

// wantRefs fails unless r (a push answer or a GET) names the image's repository in the workspace registry and,
// in image_ref, the registered reference with tag (repository:tag), or no image_ref when tag is "" (nothing
// registered yet, or a push answer, whose build has no tag yet).
func wantRefs(t *testing.T, what string, r response, image, tag string) {
	t.Helper()
	repo := st.RegistryHost + "/sandboxes/red/" + image
	if r.body["repository"] != repo {
		t.Errorf("%s: repository = %v, want %s: %v", what, r.body["repository"], repo, r)
	}
	switch ref, has := r.body["image_ref"]; {
	case tag == "" && has:
		t.Errorf("%s: image_ref %v before any tag: %v", what, ref, r)
	case tag != "" && ref != repo+":"+tag:
		t.Errorf("%s: image_ref = %v, want %s:%s: %v", what, ref, repo, tag, r)
	}
}

// TestImportFromAnotherWorkspacesPath: a registry shared by two workspaces, readable by anyone, still binds each
// path to its workspace: red may not import, nor build FROM, an image in the path of another namespace's Workspace
// (docs/security.md "Registry paths are bound to their workspace"). The shared registry sits behind a proxy that
// merges slashes and resolves dot segments, as nginx does by default, so a reference that only spells another
// path differently would reach the other workspace's image.
func TestImportFromAnotherWorkspacesPath(t *testing.T) {
	shared := cleaningProxy(t, sourceRegistry(t, "", ""))
	other, err := kubetest.NewNamespace(context.Background(), st.Client, "other-ws-")
	if err != nil {
		t.Fatal(err)
	}
	ws := &gatewayv1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "default"},
		Spec: gatewayv1.WorkspaceSpec{ImageRegistry: &gatewayv1.ImageRegistry{URL: "http://" + shared + "/tenants/other"}}}
	if err := st.Client.Create(context.Background(), ws); err != nil {
		t.Fatal(err)
	}
	theirs := shared + "/tenants/other/blue/secret-agent:v1"
	pushRandom(t, theirs)

	r := call(t, redKey, "POST", "/v1/sandboxes/images", map[string]any{"name": "stolen", "image": theirs}, nil)
	if r.code != http.StatusAccepted {
		t.Fatalf("POST import: %v", r)
	}
	f := waitStatus(t, redKey, "stolen", nil)
	if reason, _ := f.body["error"].(string); f.body["status"] != "FAILED" || !strings.Contains(reason, "belongs to another workspace") {
		t.Fatalf("import from another workspace's path = %v, want FAILED naming the rule", f)
	}

	pushZip(t, "stolen-base", map[string]string{"Dockerfile": "FROM " + theirs + "\nCMD [\"sh\"]\n"}, "")
	f = waitStatus(t, redKey, "stolen-base", nil)
	if reason, _ := f.body["error"].(string); f.body["status"] != "FAILED" || !strings.Contains(reason, "belongs to another workspace") {
		t.Fatalf("build FROM another workspace's path = %v, want FAILED naming the rule", f)
	}

	// Other spellings of the same path: refused by the push route before anything is created, and in a FROM by
	// the build.
	for _, ref := range []string{shared + "/library/../tenants/other/blue/secret-agent:v1", shared + "//tenants/other/blue/secret-agent:v1"} {
		r := call(t, redKey, "POST", "/v1/sandboxes/images", map[string]any{"name": "respelled", "image": ref}, nil)
		if r.code != http.StatusBadRequest || !strings.Contains(r.String(), `"field":"image"`) || !strings.Contains(r.String(), "repository path") {
			t.Errorf("POST import of %s = %v, want 400 naming image and the path rule", ref, r)
		}
		image := "respelled-base-" + fmt.Sprint(len(ref))
		pushZip(t, image, map[string]string{"Dockerfile": "FROM " + ref + "\nCMD [\"sh\"]\n"}, "")
		f := waitStatus(t, redKey, image, nil)
		if reason, _ := f.body["error"].(string); f.body["status"] != "FAILED" || !strings.Contains(reason, "repository path") {
			t.Errorf("build FROM %s = %v, want FAILED naming the path rule", ref, f)
		}
	}

	// A build written with kubectl, which no push route checked: the manager refuses the import itself.
	b := createBuild(t, st.Namespace, "red", "respelled-direct", gatewayv1.SandboxSource{
		Import: &gatewayv1.SandboxImport{Image: shared + "/library/../tenants/other/blue/secret-agent:v1"}})
	if waitBuild(t, b); b.Phase() != gatewayv1.SandboxFailed || !strings.Contains(b.Status.Reason, `dot segment ".."`) {
		t.Errorf("a build importing a path with '..' is %s: %q, want FAILED naming the dot segment", b.Phase(), b.Status.Reason)
	}

	public := shared + "/library/tool:1.0"
	pushRandom(t, public)
	r = call(t, redKey, "POST", "/v1/sandboxes/images", map[string]any{"name": "shared-public", "image": public}, nil)
	if f := waitStatus(t, redKey, "shared-public", nil); r.code != http.StatusAccepted || f.body["status"] != "BUILT" {
		t.Fatalf("import from a path no workspace owns = %v, %v; want BUILT", r, f)
	}
}

func TestImportPrivateImage(t *testing.T) {
	src := sourceRegistry(t, "robot", "hunter2")
	want := pushRandom(t, src+"/team/private:7", remote.WithAuth(&authn.Basic{Username: "robot", Password: "hunter2"}))
	cfg := fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, src, base64.StdEncoding.EncodeToString([]byte("robot:hunter2")))

	// Without credentials the import fails, with a reason.
	r := call(t, redKey, "POST", "/v1/sandboxes/images", map[string]any{"name": "private", "image": src + "/team/private:7"}, nil)
	if r.code != http.StatusAccepted {
		t.Fatalf("POST import: %v", r)
	}
	f := waitStatus(t, redKey, "private", nil)
	if reason, _ := f.body["error"].(string); f.body["status"] != "FAILED" || !strings.Contains(reason, "team/private:7") {
		t.Fatalf("an import without credentials did not fail with a reason naming the image: %v", f)
	}

	r = call(t, redKey, "POST", "/v1/sandboxes/images", map[string]any{"name": "private", "image": src + "/team/private:7", "docker_config": cfg}, nil)
	if r.code != http.StatusAccepted {
		t.Fatalf("POST import with docker_config: %v", r)
	}
	if strings.Contains(string(r.raw), "hunter2") || strings.Contains(string(r.raw), base64.StdEncoding.EncodeToString([]byte("robot:hunter2"))) {
		t.Errorf("the answer echoes the credentials: %s", r.raw)
	}
	done := waitStatus(t, redKey, "private", nil)
	if done.body["status"] != "BUILT" {
		t.Fatalf("private import: %v", done)
	}
	sameImage(t, workspaceImage(t, "red", "private", "v1"), want)

	// The credentials are in a Secret owned by the build, and in no status.
	var builds gatewayv1.SandboxImageBuildList
	if err := st.Client.List(t.Context(), &builds, client.InNamespace(st.Namespace),
		client.MatchingLabels{gatewayv1.LabelSandboxImage: gatewayv1.SandboxImageObjectName("red", "private")}); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, b := range builds.Items {
		if ref := b.Spec.Source.Import.DockerConfigSecretRef; ref != nil {
			found = true
			var sec corev1.Secret
			if err := st.Client.Get(t.Context(), client.ObjectKey{Namespace: st.Namespace, Name: ref.Name}, &sec); err != nil {
				t.Fatalf("docker config Secret: %v", err)
			}
			if len(sec.OwnerReferences) != 1 || sec.OwnerReferences[0].UID != b.UID {
				t.Errorf("the docker config Secret is not owned by its build: %v", sec.OwnerReferences)
			}
		}
		if strings.Contains(fmt.Sprint(b.Status), "hunter2") {
			t.Errorf("a build's status holds the password")
		}
	}
	if !found {
		t.Errorf("no build references a docker config Secret")
	}
}

// zipBytes builds a ZIP of name -> content.
func zipBytes(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, n := range sortedKeys(files) {
		w, err := zw.Create(n)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(w, files[n])
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func put(t *testing.T, uploadURL string, body io.Reader, length int64) response {
	t.Helper()
	r, err := tryPut(uploadURL, body, length)
	if err != nil {
		t.Fatalf("PUT upload: %v", err)
	}
	return r
}

// tryPut PUTs body to uploadURL as a client uploads a ZIP.
func tryPut(uploadURL string, body io.Reader, length int64) (response, error) {
	req, err := http.NewRequest("PUT", uploadURL, body)
	if err != nil {
		return response{}, err
	}
	req.ContentLength = length
	req.Header.Set("Content-Type", "application/zip")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return response{code: resp.StatusCode, raw: raw}, nil
}

// pushZip POSTs a build of image for team red, checks the GET right after shows UPLOADING, uploads files and
// returns the push answer.
// pushZip pushes files as image; registered is the tag GET's image_ref names before this push builds ("" when
// none is).
func pushZip(t *testing.T, image string, files map[string]string, registered string) response {
	t.Helper()
	r := call(t, adminKey, "POST", "/v1/sandboxes/images?team_id=red", map[string]any{"name": image}, nil)
	if r.code != http.StatusAccepted || r.body["status"] != "UPLOADING" {
		t.Fatalf("POST build: %v", r)
	}
	wantRefs(t, "the push answer", r, image, "")
	// Right after the POST, the image reports this push, never the previous one's terminal status.
	g := call(t, adminKey, "GET", "/v1/sandboxes/images/"+url.PathEscape(image), nil, red)
	if g.body["status"] != "UPLOADING" {
		t.Fatalf("GET right after the POST: %v", g)
	}
	// Until this push is BUILT (it cannot be before its upload), image_ref is what is registered already.
	wantRefs(t, "GET before the upload", g, image, registered)
	// The path without /v1 answers the same (docs/rest-api.md "Sandbox images").
	if g := call(t, adminKey, "GET", "/sandboxes/images/"+url.PathEscape(image), nil, red); g.body["status"] != "UPLOADING" {
		t.Fatalf("GET %s right after the POST: %v", "/sandboxes/images", g)
	}
	body := zipBytes(t, files)
	if u := put(t, r.body["upload_url"].(string), bytes.NewReader(body), int64(len(body))); u.code != http.StatusOK {
		t.Fatalf("PUT upload: %v", u)
	}
	return r
}

func TestBuildFromZipAndRepeatPush(t *testing.T) {
	src := sourceRegistry(t, "", "")
	base := pushRandom(t, src+"/library/python:3.12")
	baseLayers, _ := base.Layers()
	files := map[string]string{
		"Dockerfile": "FROM " + src + "/library/python:3.12\nENV APP_MODE=sandbox\nWORKDIR /srv\nCOPY main.py .\nCMD [\"python\", \"main.py\"]\n",
		"main.py":    "print('v1')\n",
	}
	pushZip(t, "agents/runner", files, "")
	done := waitStatus(t, adminKey, "agents/runner", red)
	if done.body["status"] != "BUILT" {
		t.Fatalf("build: %v", done)
	}
	v1img := workspaceImage(t, "red", "agents/runner", "v1")
	layers, _ := v1img.Layers()
	if len(layers) != len(baseLayers)+1 {
		t.Errorf("layers = %d, want the base's %d plus the COPY's", len(layers), len(baseLayers))
	}
	if got := ocitest.FileIn(t, layers[len(layers)-1], "srv/main.py"); got != "print('v1')\n" {
		t.Errorf("srv/main.py = %q", got)
	}
	cf, _ := v1img.ConfigFile()
	if !slices.Contains(cf.Config.Env, "APP_MODE=sandbox") || !slices.Equal(cf.Config.Cmd, []string{"python", "main.py"}) {
		t.Errorf("config Env %v Cmd %v", cf.Config.Env, cf.Config.Cmd)
	}

	wantRefs(t, "GET once v1 is BUILT", done, "agents/runner", "v1")

	// A repeat push: GET right after the POST shows UPLOADING (not the previous BUILT), then v2, and latest moves.
	files["main.py"] = "print('v2')\n"
	pushZip(t, "agents/runner", files, "v1")
	done = waitStatus(t, adminKey, "agents/runner", red)
	if done.body["status"] != "BUILT" || !slices.Equal(asStrings(done.body["tags"]), []string{"v1", "v2", "latest"}) {
		t.Fatalf("second build: %v", done)
	}
	wantRefs(t, "GET once v2 is BUILT", done, "agents/runner", "v2")
	v2img := workspaceImage(t, "red", "agents/runner", "v2")
	if digestOf(t, workspaceImage(t, "red", "agents/runner", "latest")) != digestOf(t, v2img) {
		t.Errorf("latest did not move to v2")
	}
	if digestOf(t, workspaceImage(t, "red", "agents/runner", "v1")) != digestOf(t, v1img) {
		t.Errorf("v1 changed")
	}
	tags := call(t, adminKey, "GET", "/v1/sandboxes/images/"+url.PathEscape("agents/runner")+"/tags?limit=1", nil, red)
	items, _ := tags.body["items"].([]any)
	if tags.code != 200 || len(items) != 1 || items[0].(map[string]any)["name"] != "v1" {
		t.Fatalf("tags page 1: %v", tags)
	}
	cursor := tags.body["pagination"].(map[string]any)["cursor"].(string)
	tags = call(t, adminKey, "GET", "/v1/sandboxes/images/"+url.PathEscape("agents/runner")+"/tags?limit=1&cursor="+cursor, nil, red)
	items, _ = tags.body["items"].([]any)
	if len(items) != 1 || items[0].(map[string]any)["name"] != "v2" || items[0].(map[string]any)["size_bytes"].(float64) <= 0 {
		t.Fatalf("tags page 2: %v", tags)
	}

	// DELETE removes the record, not the blobs.
	if d := call(t, adminKey, "DELETE", "/v1/sandboxes/images/"+url.PathEscape("agents/runner"), nil, red); d.code != 200 || d.body["deleted"] != true || d.body["name"] != "agents/runner" {
		t.Fatalf("DELETE: %v", d)
	}
	if g := call(t, adminKey, "GET", "/v1/sandboxes/images/"+url.PathEscape("agents/runner"), nil, red); g.code != 404 {
		t.Fatalf("GET after DELETE: %v", g)
	}
	workspaceImage(t, "red", "agents/runner", "v2")
}

func TestRunFailsNamingBuildKit(t *testing.T) {
	pushZip(t, "needs-run", map[string]string{"Dockerfile": "FROM scratch\nRUN pip install requests\n"}, "")
	done := waitStatus(t, adminKey, "needs-run", red)
	if done.body["status"] != "FAILED" {
		t.Fatalf("RUN: %v", done)
	}
	b := latestBuild(t, "red", "needs-run")
	if !strings.Contains(b.Status.Reason, "RUN") || !strings.Contains(b.Status.Reason, "BuildKit backend") {
		t.Errorf("reason %q does not name RUN and the BuildKit backend", b.Status.Reason)
	}
	if done.body["error"] != b.Status.Reason {
		t.Errorf("GET says error %q, want the build's reason %q", done.body["error"], b.Status.Reason)
	}
}

func TestZipSlipFails(t *testing.T) {
	pushZip(t, "slip", map[string]string{"Dockerfile": "FROM scratch\nCOPY . /\n", "../../etc/cron.d/x": "* * * * * root sh\n"}, "")
	if done := waitStatus(t, adminKey, "slip", red); done.body["status"] != "FAILED" {
		t.Fatalf("zip-slip: %v", done)
	}
	if b := latestBuild(t, "red", "slip"); !strings.Contains(b.Status.Reason, "zip-slip") {
		t.Errorf("reason %q", b.Status.Reason)
	}
}

func latestBuild(t *testing.T, team, image string) *gatewayv1.SandboxImageBuild {
	t.Helper()
	var img gatewayv1.SandboxImage
	if err := st.Client.Get(t.Context(), client.ObjectKey{Namespace: st.Namespace, Name: gatewayv1.SandboxImageObjectName(team, image)}, &img); err != nil {
		t.Fatal(err)
	}
	var b gatewayv1.SandboxImageBuild
	if err := st.Client.Get(t.Context(), client.ObjectKey{Namespace: st.Namespace, Name: img.Annotations[gatewayv1.AnnotationLatestBuild]}, &b); err != nil {
		t.Fatal(err)
	}
	return &b
}

// zeros is an endless reader of zero bytes: a large body is generated, never allocated.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func TestUploadURLRefusals(t *testing.T) {
	r := call(t, adminKey, "POST", "/v1/sandboxes/images", map[string]any{"name": "refusals"}, red)
	if r.code != http.StatusAccepted {
		t.Fatalf("POST: %v", r)
	}
	u, _ := url.Parse(r.body["upload_url"].(string))
	small := zipBytes(t, map[string]string{"Dockerfile": "FROM scratch\n"})

	t.Run("wrong signature", func(t *testing.T) {
		bad := *u
		q := bad.Query()
		sig := []byte(q.Get("sig"))
		sig[0] ^= 1
		q.Set("sig", string(sig))
		bad.RawQuery = q.Encode()
		if a := put(t, bad.String(), bytes.NewReader(small), int64(len(small))); a.code != 403 || !strings.Contains(string(a.raw), `"sig"`) {
			t.Fatalf("wrong signature: %v", a)
		}
	})
	t.Run("expired", func(t *testing.T) {
		// A URL the service would have issued an hour and a second ago: a correct signature, over a past expiry.
		ns, build, _ := strings.Cut(strings.TrimPrefix(u.Path, "/v1/sandboxes/uploads/"), ".")
		old := signedUploadURL(st.GatewayURL, ns, build, time.Now().Add(-time.Second))
		if a := put(t, old, bytes.NewReader(small), int64(len(small))); a.code != 403 || !strings.Contains(string(a.raw), `"expires"`) {
			t.Fatalf("expired: %v", a)
		}
	})
	t.Run("5 GB + 1 byte", func(t *testing.T) {
		const n = 5_000_000_000 + 1
		if a := put(t, u.String(), io.LimitReader(zeros{}, n), n); a.code != http.StatusRequestEntityTooLarge {
			t.Fatalf("5 GB + 1: %v", a)
		}
	})
	t.Run("a refused upload leaves the URL usable", func(t *testing.T) {
		if a := put(t, u.String(), bytes.NewReader(small), int64(len(small))); a.code != 200 {
			t.Fatalf("upload: %v", a)
		}
		if a := put(t, u.String(), bytes.NewReader(small), int64(len(small))); a.code != http.StatusConflict {
			t.Fatalf("a second upload to the same URL: %v", a)
		}
	})
}

func TestTeamSelection(t *testing.T) {
	body := map[string]any{"name": "team-table", "image": "docker.io/library/busybox:1"}
	tests := []struct {
		name   string
		key    string
		path   string
		header map[string]string
		want   int
		code   string
	}{
		{"header and query differ", adminKey, "/v1/sandboxes/images?team_id=blue", red, 400, "invalid_request"},
		{"several teams, none selected", adminKey, "/v1/sandboxes/images", nil, 400, "team_required"},
		{"no accessible team", noTeamKey, "/v1/sandboxes/images", nil, 403, "forbidden"},
		{"a team the key does not act for", redKey, "/v1/sandboxes/images?team_id=blue", nil, 403, "forbidden"},
		{"an unknown team", adminKey, "/v1/sandboxes/images", map[string]string{"X-Team-Id": "violet"}, 404, "not_found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, tc.key, "POST", tc.path, body, tc.header)
			if r.code != tc.want || r.body["error_code"] != tc.code {
				t.Fatalf("got %v, want %d %s", r, tc.want, tc.code)
			}
		})
	}
	t.Run("invalid names name the field", func(t *testing.T) {
		for _, n := range []string{"", "Upper", "a//b", "-x", strings.Repeat("a", 201)} {
			r := call(t, redKey, "POST", "/v1/sandboxes/images", map[string]any{"name": n}, nil)
			if r.code != 400 || !strings.Contains(string(r.raw), `"name"`) {
				t.Errorf("name %q: %v", n, r)
			}
		}
	})
	t.Run("an image reference without a registry host", func(t *testing.T) {
		r := call(t, redKey, "POST", "/v1/sandboxes/images", map[string]any{"name": "x", "image": "busybox:1"}, nil)
		if r.code != 400 || !strings.Contains(string(r.raw), `"image"`) {
			t.Errorf("image without a registry host: %v", r)
		}
	})
	t.Run("docker_config without image", func(t *testing.T) {
		r := call(t, redKey, "POST", "/v1/sandboxes/images", map[string]any{"name": "x", "docker_config": "{}"}, nil)
		if r.code != 400 || !strings.Contains(string(r.raw), `"docker_config"`) {
			t.Errorf("%v", r)
		}
	})
}

func sameImage(t *testing.T, got, want v1.Image) {
	t.Helper()
	if digestOf(t, got) != digestOf(t, want) {
		t.Errorf("digest %s, want %s", digestOf(t, got), digestOf(t, want))
	}
	gl, _ := got.Layers()
	wl, _ := want.Layers()
	if len(gl) != len(wl) {
		t.Fatalf("layers %d, want %d", len(gl), len(wl))
	}
	for i := range gl {
		rc, err := gl[i].Compressed()
		if err != nil {
			t.Fatalf("layer %d does not read back: %v", i, err)
		}
		n, _ := io.Copy(io.Discard, rc)
		rc.Close()
		ws, _ := wl[i].Size()
		if n != ws {
			t.Errorf("layer %d is %d bytes, want %d", i, n, ws)
		}
	}
	gc, _ := got.RawConfigFile()
	wc, _ := want.RawConfigFile()
	if !bytes.Equal(gc, wc) {
		t.Errorf("config differs")
	}
}

func asStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// bodyReadTimeout is the stack's body read deadline (gatewayd.Options.BodyReadTimeout): far above what the suite's
// other bodies take on loopback.
const bodyReadTimeout = 2 * time.Second

// pausedReader reads half of b, waits for pause, then reads the rest: an upload on a slow link.
type pausedReader struct {
	b     []byte
	pause time.Duration
	read  int
}

func (p *pausedReader) Read(buf []byte) (int, error) {
	if p.read == len(p.b) {
		return 0, io.EOF
	}
	if p.read == len(p.b)/2 {
		time.Sleep(p.pause)
	}
	end := len(p.b)
	if p.read < len(p.b)/2 {
		end = len(p.b) / 2
	}
	n := copy(buf, p.b[p.read:end])
	p.read += n
	return n, nil
}

// TestUploadOutlastsTheBodyDeadline: a signed upload may take longer than gatewayd's body read deadline, until its
// URL expires (docs/security.md "Request bodies"): one that pauses past the deadline half-way still succeeds.
func TestUploadOutlastsTheBodyDeadline(t *testing.T) {
	r := call(t, adminKey, "POST", "/v1/sandboxes/images?team_id=red", map[string]any{"name": "slow-upload"}, nil)
	if r.code != http.StatusAccepted {
		t.Fatalf("POST build: %v", r)
	}
	body := zipBytes(t, map[string]string{"Dockerfile": "FROM scratch\n"})
	if u := put(t, r.body["upload_url"].(string), &pausedReader{b: body, pause: 2 * bodyReadTimeout}, int64(len(body))); u.code != http.StatusOK {
		t.Fatalf("PUT of an upload that paused past the body deadline: %v", u)
	}
}
