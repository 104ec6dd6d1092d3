package version_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const stamp = "github.com/modelgate/modelgate/gatewayd/version.Version"

// TestBuiltBinariesReportTheStampedVersion builds both binaries the way the Makefile and the Dockerfile do, with
// the version stamped by -ldflags, and reads it back from --version. It also checks that both build files stamp
// this package's variable, so a renamed package cannot leave the stamp pointing nowhere again.
func TestBuiltBinariesReportTheStampedVersion(t *testing.T) {
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	dir := strings.TrimSpace(string(root))
	for _, f := range []string{"Makefile", "Dockerfile"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "-X "+stamp+"=") {
			t.Errorf("%s does not stamp %s", f, stamp)
		}
	}
	out := t.TempDir()
	for _, cmd := range []string{"gatewayd", "manager"} {
		bin := filepath.Join(out, cmd)
		build := exec.Command("go", "build", "-ldflags", "-X "+stamp+"=v9.9.9-test", "-o", bin, "./cmd/"+cmd)
		build.Dir = dir
		if b, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build ./cmd/%s: %v\n%s", cmd, err, b)
		}
		got, err := exec.Command(bin, "--version").Output()
		if err != nil {
			t.Fatalf("%s --version: %v", cmd, err)
		}
		if v := strings.TrimSpace(string(got)); v != "v9.9.9-test" {
			t.Errorf("%s --version = %q, want v9.9.9-test", cmd, v)
		}
	}
}
