package cli

import (
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestImages: an image imported from a registry reference, then one built from a directory that the CLI zips
// and uploads (no progress bar: stderr is not a terminal), each followed with images get until BUILT; refusals
// name the field.
func TestImages(t *testing.T) {
	admin := as(t, adminKey)
	src := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer src.Close()
	base := strings.TrimPrefix(src.URL, "http://") + "/library/base:1"
	img, err := random.Image(1024, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.ParseReference(base)
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}

	r := admin.ok("images", "push", "cli-base", "--image", base, "--team", team)
	if !strings.Contains(r.stdout, "REPOSITORY") || !strings.Contains(r.stdout, "/"+team+"/cli-base") {
		t.Errorf("push --image: %v", r)
	}
	waitBuilt(t, "cli-base")

	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM "+base+"\nENV MODE=sandbox\nCOPY hello.sh /hello.sh\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "hello.sh"), []byte("echo hello\n"), 0o644)
	r = admin.ok("images", "push", "cli/agent", "--dir", dir, "--team", team)
	if !strings.Contains(r.stdout, "BUILDING") || !strings.Contains(r.stdout, "sha256:") {
		t.Errorf("push --dir: %v", r)
	}
	if strings.Contains(r.stderr, "Uploading") {
		t.Errorf("a progress bar on a stderr that is not a terminal: %q", r.stderr)
	}
	waitBuilt(t, "cli/agent")
	if r := admin.ok("images", "get", "cli/agent", "--team", team); !strings.Contains(r.stdout, "BUILT") || !strings.Contains(r.stdout, "v1,latest") ||
		!strings.Contains(r.stdout, "/"+team+"/cli/agent:v1") {
		t.Errorf("get: %v", r)
	}

	admin.refused(exitInvalid, []string{"HTTP 400", "name: "}, "images", "push", "Not A Name", "--image", base, "--team", team)
	admin.refused(exitNotFound, []string{"HTTP 404"}, "images", "get", "cli-base", "--team", "no-such-team")
	admin.refused(exitNotFound, []string{"HTTP 404"}, "images", "get", "no-such-image", "--team", team)
	admin.refused(exitUsage, []string{"give one of --image, --dir"}, "images", "push", "cli-x")
	admin.refused(exitUsage, []string{"has no Dockerfile"}, "images", "push", "cli-x", "--dir", t.TempDir())
}

// waitBuilt follows an image with `images get -o json` until its latest push is BUILT.
func waitBuilt(t *testing.T, image string) {
	t.Helper()
	admin := as(t, adminKey)
	eventually(t, image+" BUILT", func() (bool, string) {
		got := admin.json("images", "get", image, "--team", team)
		if got["status"] == "FAILED" {
			t.Fatalf("%s failed: %v", image, got)
		}
		tags, _ := got["tags"].([]any)
		return got["status"] == "BUILT" && slices.Contains(tags, any("v1")), ""
	})
}
