package cluster

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/modelgate/modelgate/test/stack"
)

// The cluster runs the product's image as the harness builds it, not as the Dockerfile does (no Docker engine
// runs here). This keeps the two equivalent: the same entrypoint, user and binaries at the same paths.
func TestProductImageMatchesDockerfile(t *testing.T) {
	root, err := stack.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	// The final stage is what runs: everything after the last FROM.
	lines := strings.Split(string(raw), "\n")
	last := 0
	for i, l := range lines {
		if strings.HasPrefix(strings.ToUpper(strings.TrimSpace(l)), "FROM ") {
			last = i
		}
	}
	var user string
	var entrypoint []string
	files := map[string]bool{}
	for _, l := range lines[last:] {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "USER":
			user = f[1]
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), f[0]))), &entrypoint); err != nil {
				t.Fatalf("ENTRYPOINT is not in exec form: %v", err)
			}
		case "COPY":
			files[f[len(f)-1]] = true
		}
	}
	img := productImages()[0]
	if img.ref != ImageRepository+":"+ImageTag {
		t.Fatalf("the first image is %s, want the product's", img.ref)
	}
	if img.user != user {
		t.Errorf("user %q, the Dockerfile's USER is %q", img.user, user)
	}
	if !slices.Equal(img.entrypoint, entrypoint) {
		t.Errorf("entrypoint %q, the Dockerfile's is %q", img.entrypoint, entrypoint)
	}
	got := map[string]bool{}
	for _, dst := range img.binaries {
		got[dst] = true
	}
	if !maps.Equal(got, files) {
		t.Errorf("binaries at %v, the Dockerfile copies %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(files)))
	}
}
