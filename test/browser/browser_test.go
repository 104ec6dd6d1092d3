// Package browser drives the operator dashboard in headless Chromium (Debian's chromium, through playwright-core
// with its executable path set; no browser is downloaded) against the real local stack that `make run` runs:
// etcd, kube-apiserver, the manager with its webhooks, gatewayd and the demo upstream. The scenario itself is
// dashboard.mjs; this test starts the stack, runs it with node and reports what it printed. Screenshots of every
// screen in both themes land in $MODELGATE_BROWSER_OUT (default bin/test-output/browser).
//
//	KUBEBUILDER_ASSETS=$HOME/.cache/modelgate/envtest/v1.37.1 go test ./test/browser/ -count=1 -v
package browser

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelgate/modelgate/test/stack"
)

// chromiumPath is Debian's chromium, which .ci/run installs.
const chromiumPath = "/usr/bin/chromium"

func TestDashboardInChromium(t *testing.T) {
	root, err := stack.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("Chromium is missing at %s: .ci/run installs Debian's chromium", chromiumPath)
		}
		t.Skipf("Chromium is missing at %s: apt-get install chromium", chromiumPath)
	}
	web := filepath.Join(root, "gatewayd", "dashboard", "web")
	if _, err := os.Stat(filepath.Join(web, "node_modules", "playwright-core")); err != nil {
		t.Fatalf("playwright-core is not installed under %s: run 'make dashboard' (npm ci)", web)
	}
	out := os.Getenv("MODELGATE_BROWSER_OUT")
	if out == "" {
		out = filepath.Join(root, "bin", "test-output", "browser")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s, err := stack.Start(ctx, stack.Options{GatewayAddr: "127.0.0.1:0", UpstreamAddr: "127.0.0.1:0", ModelAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0", DevDir: t.TempDir()})
	if err != nil {
		t.Fatalf("failed to start the local stack (KUBEBUILDER_ASSETS=%q): %v", os.Getenv("KUBEBUILDER_ASSETS"), err)
	}
	defer func() {
		if err := s.Stop(); err != nil {
			t.Errorf("failed to stop the stack: %v", err)
		}
	}()

	// localhost, not 127.0.0.1: Chromium keeps Secure cookies of http://localhost, a potentially trustworthy origin.
	base := strings.Replace(s.GatewayURL, "127.0.0.1", "localhost", 1)
	runCtx, stop := context.WithTimeout(context.Background(), 10*time.Minute)
	defer stop()
	cmd := exec.CommandContext(runCtx, "node", filepath.Join(root, "test", "browser", "dashboard.mjs"))
	cmd.Dir = web
	cmd.Env = append(os.Environ(),
		"GATEWAY_URL="+base,
		"API_KEY="+s.APIKey,
		"MODEL_SLUG="+stack.EndpointSlug,
		"OUT_DIR="+out,
		"CHROMIUM="+chromiumPath,
		"WEB_DIR="+web,
	)
	b, err := cmd.CombinedOutput()
	t.Logf("dashboard.mjs output:\n%s", b)
	if err != nil {
		t.Fatalf("the browser scenario failed: %v (screenshots in %s)", err, out)
	}
}
