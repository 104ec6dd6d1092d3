package imagebuild

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// newRegistry serves an in-memory OCI registry on a real loopback socket; with user set, every request must
// carry that basic-auth user and password.
func newRegistry(t testing.TB, user, pass string) string {
	t.Helper()
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if user != "" {
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u, p, ok := r.BasicAuth()
			if !ok || u != user || p != pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
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

// zipOf builds a ZIP of name -> content; a content starting with "->" is a symlink to the rest.
func zipOf(t *testing.T, files map[string]string) *zip.Reader {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		hdr := &zip.FileHeader{Name: n, Method: zip.Deflate}
		content := files[n]
		if target, ok := strings.CutPrefix(content, "->"); ok {
			hdr.SetMode(fs.ModeSymlink | 0o777)
			content = target
		} else {
			hdr.SetMode(0o644)
		}
		w, err := zw.CreateHeader(hdr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write([]byte(content))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	return zr
}

// pushBase pushes a small base image with one random layer and Env PATH, returning its reference.
func pushBase(t *testing.T, host string, opts ...remote.Option) name.Reference {
	t.Helper()
	img, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, v1.Config{Env: []string{"PATH=/usr/bin:/bin"}, Cmd: []string{"sh"}})
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.ParseReference(host + "/library/base:1")
	if err := remote.Write(ref, img, opts...); err != nil {
		t.Fatal(err)
	}
	return ref
}

// filesOf reads every regular file of img's layers, top layer last.
func filesOf(t *testing.T, img v1.Image) map[string]string {
	t.Helper()
	out := map[string]string{}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(tr)
			out[h.Name] = string(b)
		}
		rc.Close()
	}
	return out
}

func TestBuildFromZip(t *testing.T) {
	src := newRegistry(t, "", "")
	dst := newRegistry(t, "", "")
	base := pushBase(t, src)
	zr := zipOf(t, map[string]string{
		"Dockerfile": "ARG BASE=" + base.String() + "\nFROM ${BASE}\n# a comment\nENV GREETING=hello \\\n    TARGET=\"the world\"\n" +
			"WORKDIR /app\nCOPY app.py ./\nCOPY app.py .\nCOPY app.py /opt/renamed.py\nCOPY conf/ /etc/app/\nLABEL team=red\nEXPOSE 8080\nUSER 1000\nCMD [\"python\", \"app.py\"]\n",
		"app.py":         "print('hi')\n",
		"conf/a.yaml":    "a: 1\n",
		"conf/sub/b.txt": "b\n",
		"ignored.txt":    "not copied\n",
	})
	img, err := Build(context.Background(), zr, Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	repo, _ := name.NewRepository(dst + "/red/agent")
	res, err := Push(context.Background(), img, repo, nil)
	if err != nil {
		t.Fatalf("Push: %v", err)
	}
	// Read the result back from the registry, not from memory.
	got, err := remote.Image(repo.Digest(res.Digest.String()))
	if err != nil {
		t.Fatalf("remote.Image: %v", err)
	}
	layers, _ := got.Layers()
	if len(layers) != 5 {
		t.Errorf("layers = %d, want the base's 1 plus one per COPY", len(layers))
	}
	files := filesOf(t, got)
	for p, want := range map[string]string{"app/app.py": "print('hi')\n", "opt/renamed.py": "print('hi')\n", "etc/app/a.yaml": "a: 1\n", "etc/app/sub/b.txt": "b\n"} {
		if files[p] != want {
			t.Errorf("file %s = %q, want %q (files: %v)", p, files[p], want, keys(files))
		}
	}
	if _, ok := files["ignored.txt"]; ok {
		t.Errorf("a file no COPY named is in the image")
	}
	cf, err := got.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	for _, want := range []string{"PATH=/usr/bin:/bin", "GREETING=hello", "TARGET=the world"} {
		if !slices.Contains(c.Env, want) {
			t.Errorf("Env = %v, want it to contain %q", c.Env, want)
		}
	}
	if !slices.Equal(c.Cmd, []string{"python", "app.py"}) {
		t.Errorf("Cmd = %v", c.Cmd)
	}
	if c.WorkingDir != "/app" || c.User != "1000" || c.Labels["team"] != "red" {
		t.Errorf("WorkingDir %q User %q Labels %v", c.WorkingDir, c.User, c.Labels)
	}
	if _, ok := c.ExposedPorts["8080/tcp"]; !ok {
		t.Errorf("ExposedPorts = %v", c.ExposedPorts)
	}
	if res.Size <= 0 {
		t.Errorf("Size = %d", res.Size)
	}
}

func TestEntrypointResetsInheritedCmd(t *testing.T) {
	src := newRegistry(t, "", "")
	base := pushBase(t, src)
	img, err := Build(context.Background(), zipOf(t, map[string]string{
		"Dockerfile": "FROM " + base.String() + "\nENTRYPOINT /bin/serve --port 80\n",
	}), Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	if !slices.Equal(cf.Config.Entrypoint, []string{"/bin/sh", "-c", "/bin/serve --port 80"}) || cf.Config.Cmd != nil {
		t.Errorf("Entrypoint %v Cmd %v", cf.Config.Entrypoint, cf.Config.Cmd)
	}
}

// TestShellWordExpansion: words are expanded as Docker's shell lexer does, ${VAR:-default} included, and ARG
// values declared before FROM reach the stage only when it declares them again.
func TestShellWordExpansion(t *testing.T) {
	img, err := Build(context.Background(), zipOf(t, map[string]string{
		"Dockerfile": "ARG GLOBAL=g\nARG HIDDEN=h\nFROM scratch\nARG GLOBAL\nENV Y=${HOME:-z} Q=\"${UNSET:-a b}\" P=${GLOBAL}${HIDDEN:-unset} \\\n  E='$Y'\n" +
			"EXPOSE 8000-8002/udp\nCMD echo \"$Y\"\n",
	}), Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	for _, want := range []string{"Y=z", "Q=a b", "P=gunset", "E=$Y"} {
		if !slices.Contains(cf.Config.Env, want) {
			t.Errorf("Env = %q, want it to contain %q", cf.Config.Env, want)
		}
	}
	for _, p := range []string{"8000/udp", "8001/udp", "8002/udp"} {
		if _, ok := cf.Config.ExposedPorts[p]; !ok {
			t.Errorf("ExposedPorts = %v, want %s", cf.Config.ExposedPorts, p)
		}
	}
	if !slices.Equal(cf.Config.Cmd, []string{"/bin/sh", "-c", `echo "$Y"`}) {
		t.Errorf("Cmd = %q, want the shell form unexpanded under /bin/sh -c", cf.Config.Cmd)
	}
}

func TestRefusals(t *testing.T) {
	tests := []struct {
		name      string
		files     map[string]string
		want      string
		buildKit  bool
		needsBase bool
	}{
		{name: "RUN", files: map[string]string{"Dockerfile": "FROM scratch\nRUN pip install x\n"}, want: "RUN", buildKit: true},
		{name: "multi-stage", files: map[string]string{"Dockerfile": "FROM scratch AS a\nFROM scratch\n"}, want: "second FROM", buildKit: true},
		{name: "COPY --from", files: map[string]string{"Dockerfile": "FROM scratch\nCOPY --from=a /x /y\n"}, want: "--from", buildKit: true},
		{name: "unsupported instruction", files: map[string]string{"Dockerfile": "FROM scratch\nHEALTHCHECK NONE\n"}, want: "HEALTHCHECK", buildKit: true},
		{name: "no Dockerfile", files: map[string]string{"app.py": "x"}, want: "no Dockerfile"},
		{name: "no FROM", files: map[string]string{"Dockerfile": "ENV A=1\n"}, want: "before FROM"},
		{name: "zip-slip", files: map[string]string{"Dockerfile": "FROM scratch\n", "../../etc/passwd": "x"}, want: "zip-slip"},
		{name: "zip-slip inside a path", files: map[string]string{"Dockerfile": "FROM scratch\n", "a/../../x": "x"}, want: "zip-slip"},
		{name: "absolute path", files: map[string]string{"Dockerfile": "FROM scratch\n", "/etc/passwd": "x"}, want: "absolute path"},
		{name: "backslash", files: map[string]string{"Dockerfile": "FROM scratch\n", `..\x`: "x"}, want: "backslash"},
		{name: "escaping symlink", files: map[string]string{"Dockerfile": "FROM scratch\n", "a/link": "->../../etc"}, want: "outside the context"},
		{name: "absolute symlink", files: map[string]string{"Dockerfile": "FROM scratch\n", "link": "->/etc/passwd"}, want: "absolute path"},
		{name: "COPY of nothing", files: map[string]string{"Dockerfile": "FROM scratch\nCOPY missing /x\n"}, want: "matches nothing"},
		{name: "ADD of a URL", files: map[string]string{"Dockerfile": "FROM scratch\nADD https://example.com/x /x\n"}, want: "URL"},
		// What Docker refuses, refused with the instruction and its line (docs/security.md, "Dockerfiles").
		{name: "port out of range", files: map[string]string{"Dockerfile": "FROM scratch\nEXPOSE 8080 99999\n"}, want: "Dockerfile line 2: EXPOSE \"99999\" is not a port"},
		{name: "unknown protocol", files: map[string]string{"Dockerfile": "FROM scratch\nEXPOSE 80/http\n"}, want: "Dockerfile line 2: EXPOSE \"80/http\""},
		{name: "broken exec form", files: map[string]string{"Dockerfile": "FROM scratch\n\nCMD [\"a\"\n"}, want: "Dockerfile line 3: CMD is not a valid exec form"},
		{name: "broken exec form of ENTRYPOINT", files: map[string]string{"Dockerfile": "FROM scratch\nENTRYPOINT ['a']\n"}, want: "Dockerfile line 2: ENTRYPOINT is not a valid exec form"},
		{name: "unknown flag", files: map[string]string{"Dockerfile": "FROM scratch\nCOPY --bogus=1 a b\n"}, want: "Dockerfile line 2: COPY is not valid: unknown flag: --bogus"},
		{name: "ENV without a value", files: map[string]string{"Dockerfile": "FROM scratch\nENV ONLYNAME\n"}, want: "Dockerfile line 2: ENV is not valid"},
		{name: "unterminated quote", files: map[string]string{"Dockerfile": "FROM scratch\nENV A=\"x\n"}, want: "Dockerfile line 2: ENV cannot be expanded"},
		{name: "COPY --chmod", files: map[string]string{"Dockerfile": "FROM scratch\nCOPY --chmod=755 a b\n"}, want: "COPY --chmod", buildKit: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(context.Background(), zipOf(t, tc.files), Options{TempDir: t.TempDir()})
			var r *Refusal
			var nb *needsBuildKit
			if !errors.As(err, &r) && !errors.As(err, &nb) {
				t.Fatalf("Build error = %v, want a Refusal", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("reason %q does not mention %q", err, tc.want)
			}
			if got := errors.Is(err, ErrNeedsBuildKit); got != tc.buildKit {
				t.Errorf("needs BuildKit = %v, want %v", got, tc.buildKit)
			}
			if tc.buildKit && !strings.Contains(err.Error(), "BuildKit backend") {
				t.Errorf("reason %q does not name the BuildKit backend", err)
			}
		})
	}
}

func TestSymlinkInsideContextAccepted(t *testing.T) {
	_, err := CheckContext(zipOf(t, map[string]string{"a/b/link": "->../c", "a/c": "x"}))
	if err != nil {
		t.Fatalf("a symlink that stays inside the context was refused: %v", err)
	}
}

func TestTooManyEntries(t *testing.T) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for i := 0; i <= MaxEntries; i++ {
		if _, err := zw.CreateHeader(&zip.FileHeader{Name: "f" + strings.Repeat("x", i%3) + string(rune('a'+i%26)), Method: zip.Store}); err != nil {
			t.Fatal(err)
		}
	}
	_ = zw.Close()
	zr, err := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CheckContext(zr); err == nil || !strings.Contains(err.Error(), "at most 100000") {
		t.Fatalf("CheckContext of %d entries = %v", MaxEntries+1, err)
	}
}

func TestImport(t *testing.T) {
	dst := newRegistry(t, "", "")
	repo, _ := name.NewRepository(dst + "/red/imported")
	t.Run("public image", func(t *testing.T) {
		src := newRegistry(t, "", "")
		ref := pushBase(t, src)
		want, _ := remote.Image(ref)
		res, err := Import(context.Background(), ref, repo, nil, nil)
		if err != nil {
			t.Fatalf("Import: %v", err)
		}
		got, err := remote.Image(repo.Digest(res.Digest.String()))
		if err != nil {
			t.Fatal(err)
		}
		sameImage(t, got, want)
	})
	t.Run("private image with basic auth, every platform of an index", func(t *testing.T) {
		src := newRegistry(t, "alice", "s3cret")
		auth := remote.WithAuth(&authn.Basic{Username: "alice", Password: "s3cret"})
		amd, _ := random.Image(256, 2)
		arm, _ := random.Image(256, 1)
		idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
			mutate.IndexAddendum{Add: amd, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
			mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}})
		ref, _ := name.ParseReference(src + "/team/private:2")
		if err := remote.WriteIndex(ref, idx, auth); err != nil {
			t.Fatal(err)
		}
		if _, err := Import(context.Background(), ref, repo, nil, nil); err == nil {
			t.Fatalf("an import without credentials succeeded against a private registry")
		}
		kc := staticKeychain{src: authn.AuthConfig{Username: "alice", Password: "s3cret"}}
		res, err := Import(context.Background(), ref, repo, []remote.Option{remote.WithAuthFromKeychain(kc)}, nil)
		if err != nil {
			t.Fatalf("Import: %v", err)
		}
		wantDigest, _ := idx.Digest()
		if res.Digest != wantDigest {
			t.Errorf("digest %s, want the index's %s", res.Digest, wantDigest)
		}
		gotIdx, err := remote.Index(repo.Digest(res.Digest.String()))
		if err != nil {
			t.Fatal(err)
		}
		m, _ := gotIdx.IndexManifest()
		if len(m.Manifests) != 2 {
			t.Fatalf("index has %d manifests, want 2", len(m.Manifests))
		}
		for _, want := range []v1.Image{amd, arm} {
			d, _ := want.Digest()
			got, err := remote.Image(repo.Digest(d.String()))
			if err != nil {
				t.Fatalf("platform image %s missing from the workspace registry: %v", d, err)
			}
			sameImage(t, got, want)
		}
	})
}

type staticKeychain map[string]authn.AuthConfig

func (k staticKeychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	if ac, ok := k[r.RegistryStr()]; ok {
		return authn.FromConfig(ac), nil
	}
	return authn.Anonymous, nil
}

// sameImage compares layers (by digest, and that each blob reads back) and config.
func sameImage(t *testing.T, got, want v1.Image) {
	t.Helper()
	gl, _ := got.Layers()
	wl, _ := want.Layers()
	if len(gl) != len(wl) {
		t.Fatalf("layers %d, want %d", len(gl), len(wl))
	}
	for i := range gl {
		gd, _ := gl[i].Digest()
		wd, _ := wl[i].Digest()
		if gd != wd {
			t.Errorf("layer %d digest %s, want %s", i, gd, wd)
		}
		rc, err := gl[i].Compressed()
		if err != nil {
			t.Fatalf("layer %d does not read back: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, rc)
		rc.Close()
	}
	gc, _ := got.RawConfigFile()
	wc, _ := want.RawConfigFile()
	if !bytes.Equal(gc, wc) {
		t.Errorf("config differs")
	}
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
