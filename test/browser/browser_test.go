// Package browser drives the operator dashboard in headless Chromium (Debian's chromium, through playwright-core
// with its executable path set; no browser is downloaded) against the real local stack that `make run` runs:
// etcd, kube-apiserver, the manager with its webhooks, gatewayd and the demo upstream. The scenario itself is
// dashboard.mjs (usage.mjs for the usage charts); each test starts the stack, runs its scenario with node and
// reports what it printed. Screenshots of every screen in both themes land in $MODELGATE_BROWSER_OUT (default
// bin/test-output/browser and bin/test-output/browser-usage).
//
//	KUBEBUILDER_ASSETS=$HOME/.cache/modelgate/envtest/v1.37.1 go test ./test/browser/ -count=1 -v
package browser

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd"
	"github.com/modelgate/modelgate/test/stack"
)

// chromiumPath is Debian's chromium, which .ci/run installs.
const chromiumPath = "/usr/bin/chromium"

func TestDashboardInChromium(t *testing.T) {
	b := startBrowserStack(t, "browser")
	keysKey := seedKey(t, b.ctx, b.s, "key-manager", gatewayv1.WorkspaceAPIKeySpec{Type: gatewayv1.KeyTypeManageAPIKeys, DisplayName: "key-manager"})
	// An organization admin's PERSONAL key (its owner's role is its own record's: the stack's Workspace lists no
	// members) creates, renames and revokes workspace keys; the team red is where its new team key goes.
	if err := b.s.Client.Create(b.ctx, &gatewayv1.Team{ObjectMeta: metav1.ObjectMeta{Name: "red", Namespace: b.s.Namespace},
		Spec: gatewayv1.TeamSpec{DisplayName: "Red team"}}); err != nil {
		t.Fatal(err)
	}
	ownerKey := seedKey(t, b.ctx, b.s, "org-admin", gatewayv1.WorkspaceAPIKeySpec{Type: gatewayv1.KeyTypePersonal, DisplayName: "ada-laptop",
		Owner: &gatewayv1.KeyOwner{UserID: "ada", Email: "ada@example.com", Name: "Ada", Role: gatewayv1.OrgRoleAdmin}})
	b.run(t, "dashboard.mjs", "KEYS_API_KEY="+keysKey, "OWNER_API_KEY="+ownerKey)
}

// TestDashboardUsageInChromium: usage.mjs sends calls with tokens, some refused with 429, through the real
// gatewayd, and checks the usage charts of the group page and of the usage page against the billing events.
//
//	KUBEBUILDER_ASSETS=$HOME/.cache/modelgate/envtest/v1.37.1 go test ./test/browser/ -count=1 -v -run TestDashboardUsageInChromium
func TestDashboardUsageInChromium(t *testing.T) {
	b := startBrowserStack(t, "browser-usage")
	b.run(t, "usage.mjs")
}

// browserStack is the local stack a scenario runs against, with where its screenshots go.
type browserStack struct {
	ctx       context.Context
	s         *stack.Stack
	root, web string
	out       string
}

// startBrowserStack checks Chromium and playwright-core, empties the screenshot directory (under dir in bin/
// test-output unless $MODELGATE_BROWSER_OUT names one), and starts the stack; Cleanup stops it.
func startBrowserStack(t *testing.T, dir string) *browserStack {
	t.Helper()
	return startBrowserStackWith(t, dir, gatewayd.Options{})
}

// startBrowserStackWith is startBrowserStack with gw as the base of gatewayd's options.
func startBrowserStackWith(t *testing.T, dir string, gw gatewayd.Options) *browserStack {
	t.Helper()
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
		out = filepath.Join(root, "bin", "test-output", dir)
	}
	// Start from an empty directory, so every file in it is from this run.
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	s := stack.StartTest(ctx, t, stack.Options{GatewayAddr: "127.0.0.1:0", UpstreamAddr: "127.0.0.1:0", ModelAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0", DevDir: t.TempDir(), Gatewayd: gw})
	return &browserStack{ctx: ctx, s: s, root: root, web: web, out: out}
}

// run runs the scenario script of test/browser with node against the stack, with env added, and fails the test
// when it fails.
func (b *browserStack) run(t *testing.T, script string, env ...string) {
	t.Helper()
	// localhost, not 127.0.0.1: Chromium keeps Secure cookies of http://localhost, a potentially trustworthy origin.
	base := strings.Replace(b.s.GatewayURL, "127.0.0.1", "localhost", 1)
	runCtx, stop := context.WithTimeout(context.Background(), 10*time.Minute)
	defer stop()
	cmd := exec.CommandContext(runCtx, "node", filepath.Join(b.root, "test", "browser", script))
	cmd.Dir = b.web
	cmd.Env = append(append(os.Environ(),
		"GATEWAY_URL="+base,
		"API_KEY="+b.s.APIKey,
		"MODEL_SLUG="+stack.EndpointSlug,
		"OUT_DIR="+b.out,
		"CHROMIUM="+chromiumPath,
		"WEB_DIR="+b.web,
	), env...)
	out, err := cmd.CombinedOutput()
	t.Logf("%s output:\n%s", script, out)
	if err != nil {
		t.Fatalf("the browser scenario %s failed: %v (screenshots in %s)", script, err, b.out)
	}
}

// seedKey applies a workspace key of spec (its secret in a Secret), as kubectl would, and waits until gatewayd
// accepts it: the admin key (WORKSPACE_MANAGE_ALL) may not see workspace keys, so the workspace keys screen is seen
// with a WORKSPACE_MANAGE_API_KEYS key and an organization admin's PERSONAL key.
func seedKey(t *testing.T, ctx context.Context, s *stack.Stack, name string, spec gatewayv1.WorkspaceAPIKeySpec) string {
	t.Helper()
	key, err := stack.NewWorkspaceKey()
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "dashboard-" + name, Namespace: s.Namespace},
		Data:       map[string][]byte{"api_key": []byte(key)},
	}
	spec.KeySource = gatewayv1.KeySource{SecretRef: &gatewayv1.SecretKeySelector{Name: secret.Name, Key: "api_key"}}
	wk := &gatewayv1.WorkspaceAPIKey{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace}, Spec: spec}
	if err := s.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if err := s.Client.Create(ctx, wk); err != nil {
		t.Fatal(err)
	}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.GatewayURL+"/v1/api_keys", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return key
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("gatewayd never accepted the %s key %s: %v", spec.Type, name, ctx.Err())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
