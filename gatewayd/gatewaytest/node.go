package gatewaytest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// NodeWithPackage is the path of `node` for a test that runs a Node client from its own directory, after
// installing that directory's npm packages (from its lockfile) when pkg is not there yet. The test is skipped,
// saying why, when Node.js is not installed, and fails when KUBEBUILDER_ASSETS is not set, since every such test
// drives a real gatewayd.
func NodeWithPackage(t testing.TB, pkg string) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skipf("SKIPPED: `node` is not on PATH, so the %s npm check cannot run. Install Node.js to run it.", pkg)
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: this test needs the envtest binaries (make envtest)")
	}
	dir, _ := os.Getwd()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg)); err != nil {
		npm := exec.Command("npm", "install", "--no-audit", "--no-fund")
		npm.Dir = dir
		if out, err := npm.CombinedOutput(); err != nil {
			t.Fatalf("npm install failed: %v\n%s", err, out)
		}
	}
	return node
}
