package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/modelgate/modelgate/api/apikey"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/test/stack"
)

// The suite's one stack, the binary under test and its keys.
var (
	st  *stack.Stack
	bin string
	// adminKey is the stack's WORKSPACE_MANAGE_ALL key (workspace-wide); personalKey a PERSONAL key of an
	// organization ADMIN, which manages workspace keys.
	adminKey, personalKey string
)

// team is the one Team of the workspace, which sandbox images belong to.
const team = "cli-red"

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "modelgate-cli-")
	if err == nil {
		defer os.RemoveAll(dir)
		err = build(dir)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "cli suite: %v\n", err)
		return 1
	}
	return stack.RunSuite(m, "cli", stack.Options{DevDir: filepath.Join(dir, "stack")}, func(ctx context.Context, s *stack.Stack) error {
		st, adminKey = s, s.APIKey
		return seed(ctx)
	})
}

// build builds the binary a user builds, with the README's command, into dir.
func build(dir string) error {
	root, err := stack.FindRoot()
	if err != nil {
		return err
	}
	bin = filepath.Join(dir, "modelgate")
	build := exec.Command("go", "build", "-o", bin, "./cmd/modelgate")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("go build ./cmd/modelgate: %w", err)
	}
	return nil
}

// seed creates the team and the PERSONAL admin key, and waits until gatewayd serves both.
func seed(ctx context.Context) error {
	t := &gatewayv1.Team{ObjectMeta: metav1.ObjectMeta{Namespace: st.Namespace, Name: team}, Spec: gatewayv1.TeamSpec{DisplayName: "CLI Red"}}
	if err := st.Client.Create(ctx, t); err != nil {
		return fmt.Errorf("failed to create team %s: %w", team, err)
	}
	key, err := apikey.Mint(apikey.Workspace)
	if err != nil {
		return err
	}
	spec := gatewayv1.WorkspaceAPIKeySpec{Type: gatewayv1.KeyTypePersonal, DisplayName: "cli-ada",
		Owner: &gatewayv1.KeyOwner{UserID: "ada", Name: "Ada", Role: gatewayv1.OrgRoleAdmin}}
	spec.Prefix, spec.Hash = apikey.Prefix(key), apikey.Hash(key)
	obj := &gatewayv1.WorkspaceAPIKey{ObjectMeta: metav1.ObjectMeta{Namespace: st.Namespace, Name: "cli-ada"}, Spec: spec}
	if err := st.Client.Create(ctx, obj); err != nil {
		return fmt.Errorf("failed to create the PERSONAL key: %w", err)
	}
	personalKey = key
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		keys := call(personalKey, http.MethodGet, "/v1/api_keys")
		teams := call(adminKey, http.MethodGet, "/v1/teams")
		if keys == http.StatusOK && teams == http.StatusOK {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gatewayd did not serve the suite's key in time: HTTP %d, %d", keys, teams)
		}
	}
}

// call makes one HTTP call past the CLI (for setup and bursts) and returns its status.
func call(key, method, path string) int {
	req, _ := http.NewRequest(method, st.GatewayURL+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// result is one run of the binary.
type result struct {
	args           []string
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("modelgate %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// cli describes how to run the binary: the key in MODELGATE_API_KEY (none when empty), stdin, and the config
// directory (a fresh one per test unless set).
type cli struct {
	t      *testing.T
	key    string
	stdin  string
	config string
	env    []string
	// deadline, when set, kills a run that has not exited by then and fails the test: for a run that would
	// otherwise hang.
	deadline time.Duration
}

func as(t *testing.T, key string) *cli { return &cli{t: t, key: key} }

// run runs the binary with args. The process sees no MODELGATE_* variable of the test's own environment.
// CLI_LOG=1 logs every run.
func (c *cli) run(args ...string) result {
	c.t.Helper()
	if c.config == "" {
		c.config = c.t.TempDir()
	}
	ctx := context.Background()
	if c.deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.deadline)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MODELGATE_") && !strings.HasPrefix(kv, "XDG_CONFIG_HOME=") && !strings.HasPrefix(kv, "HOME=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "XDG_CONFIG_HOME="+c.config, "HOME="+c.config)
	if c.key != "" {
		cmd.Env = append(cmd.Env, "MODELGATE_URL="+st.GatewayURL, "MODELGATE_API_KEY="+c.key)
	}
	cmd.Env = append(cmd.Env, c.env...)
	cmd.Stdin = strings.NewReader(c.stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := result{args: args, stdout: out.String(), stderr: errOut.String()}
	if ctx.Err() != nil {
		c.t.Fatalf("modelgate %s had not exited after %s: %v", strings.Join(args, " "), c.deadline, r)
	}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatalf("modelgate %s did not run: %v", strings.Join(args, " "), err)
	}
	if os.Getenv("CLI_LOG") != "" {
		c.t.Log(r.String())
	}
	return r
}

// ok runs the binary and fails the test unless it exits 0.
func (c *cli) ok(args ...string) result {
	c.t.Helper()
	r := c.run(args...)
	if r.code != 0 {
		c.t.Fatalf("want exit 0, got %v", r)
	}
	return r
}

// refused runs the binary and fails the test unless it exits with code and stderr holds every one of want.
func (c *cli) refused(code int, want []string, args ...string) result {
	c.t.Helper()
	r := c.run(args...)
	if r.code != code {
		c.t.Fatalf("want exit %d, got %v", code, r)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			c.t.Fatalf("stderr lacks %q: %v", w, r)
		}
	}
	return r
}

// json runs the binary with -o json and decodes stdout.
func (c *cli) json(args ...string) map[string]any {
	c.t.Helper()
	r := c.ok(append(args, "-o", "json")...)
	var v map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		c.t.Fatalf("stdout is not a JSON object: %v\n%v", err, r)
	}
	return v
}

// eventually retries check every 200 ms for up to a minute.
func eventually(t *testing.T, what string, check func() (bool, string)) {
	t.Helper()
	last := ""
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var done bool
		if done, last = check(); done {
			return
		}
	}
	t.Fatalf("%s did not happen within a minute; last: %s", what, last)
}
