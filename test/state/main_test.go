// Package state tests gatewayd's durable and shared state end to end: real gatewayd OS processes (built from
// cmd/gatewayd) against envtest and a real redis-server, killed with SIGTERM or SIGKILL and restarted, so what
// is asserted is what a replica in a cluster does.
package state

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/gatewayd/state/redistest"
	"github.com/modelgate/modelgate/test/kubetest"
	"github.com/modelgate/modelgate/test/testutil"
	"github.com/modelgate/modelgate/test/upstream"
)

var (
	env        *kubetest.Env
	cs         kubernetes.Interface
	kubeconfig string
	binary     string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: the state tests need envtest binaries (make envtest)")
		return 1
	}
	dir, err := os.MkdirTemp("", "modelgate-state-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "gatewayd")
	build := exec.Command("go", "build", "-o", binary, "github.com/modelgate/modelgate/cmd/gatewayd")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "failed to build gatewayd:", err)
		return 1
	}
	if env, err = kubetest.Start(kubetest.Options{CRDs: true}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	cs = env.Clientset
	user, err := env.Environment.AddUser(envtest.User{Name: "gatewayd", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	kc, err := user.KubeConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

const slug = "demo/echo"

// workspace is one namespace with a fake upstream, a group tree and its keys, published as a snapshot.
type workspace struct {
	t    *testing.T
	ns   string
	snap *snapshot.Snapshot
	keys map[string]string // group id -> plaintext federated key
	// admin is a WORKSPACE_MANAGE_ALL key, for GET /v1/gateway/events; personal a non-admin PERSONAL key.
	admin, personal string
}

func newWorkspace(t *testing.T, mode gatewayv1.LimitEnforcement, groups []gatewaytest.Group, edit func(*snapshot.Snapshot)) *workspace {
	t.Helper()
	ctx := context.Background()
	ns, err := gatewaytest.CreateNamespace(ctx, cs, "state")
	if err != nil {
		t.Fatal(err)
	}
	up := upstream.New(upstream.Options{})
	t.Cleanup(up.Close)
	w := &workspace{t: t, ns: ns, keys: map[string]string{}, snap: gatewaytest.Snapshot(ns, mode, groups)}
	for _, g := range groups {
		key, rec := gatewaytest.NewKey("key-"+g.ID, g.ID)
		w.keys[g.ID] = key
		w.snap.APIKeys = append(w.snap.APIKeys, rec)
	}
	admin, rec := gatewaytest.NewWorkspaceKey("admin", "WORKSPACE_MANAGE_ALL")
	personal, prec := gatewaytest.NewWorkspaceKey("dev", "PERSONAL")
	w.admin, w.personal = admin, personal
	w.snap.WorkspaceAPIKeys = []snapshot.WorkspaceAPIKey{rec, prec}
	slices.SortFunc(w.snap.WorkspaceAPIKeys, func(a, b snapshot.WorkspaceAPIKey) int { return strings.Compare(a.Prefix, b.Prefix) })
	w.snap.Endpoints = []snapshot.Endpoint{{ID: "echo", Slug: slug, Targets: []snapshot.Target{{
		Provider: "OPENAI", BaseURL: up.BaseURL(), TargetModel: "echo-large"}}}}
	if edit != nil {
		edit(w.snap)
	}
	if err := gatewaytest.Publish(ctx, cs, w.snap, 1, 0); err != nil {
		t.Fatal(err)
	}
	return w
}

// onEachStore runs test against gatewayd on each store a deployment runs, with the flags that choose it: the
// embedded store in a fresh directory, and Redis standalone, Sentinel and Cluster on real redis-server processes.
func onEachStore(t *testing.T, test func(t *testing.T, flags ...string)) {
	t.Run("embedded", func(t *testing.T) { test(t, "--store=embedded", "--state-dir="+t.TempDir()) })
	onEachRedis(t, test)
}

// onEachRedis runs test against gatewayd on each Redis deployment, with the flags that reach it.
func onEachRedis(t *testing.T, test func(t *testing.T, flags ...string)) {
	redistest.Each(t, func(t *testing.T, d *redistest.Deployment) { test(t, redisFlags(d)...) })
}

// redisFlags are gatewayd's flags that reach d.
func redisFlags(d *redistest.Deployment) []string {
	o := d.Options()
	if o.Mode == redistest.Standalone {
		return []string{"--store=redis", "--redis-url=" + o.URL}
	}
	flags := []string{"--store=redis", "--redis-mode=" + o.Mode, "--redis-addrs=" + strings.Join(o.Addrs, ",")}
	if o.MasterName != "" {
		flags = append(flags, "--redis-master-name="+o.MasterName)
	}
	if o.Username != "" {
		flags = append(flags, "--redis-username="+o.Username)
	}
	if o.TLS {
		flags = append(flags, "--redis-tls", "--redis-tls-ca-file="+o.TLSCAFile)
	}
	return flags
}

// usageLimited is a model config of slug with a REQUEST DAY usage limit.
func usageLimited(threshold int64) []gatewayv1.ModelConfig {
	return []gatewayv1.ModelConfig{{Slug: slug, UsageLimits: []gatewayv1.Limit{{Type: "REQUEST", Unit: "DAY", Threshold: threshold}}}}
}

// gatewayd is one gatewayd OS process.
type gatewayd struct {
	t   *testing.T
	url string
	*testutil.Process
}

// startGatewayd runs gatewayd serving ns with extra flags and waits until it serves the snapshot.
func startGatewayd(t *testing.T, ns string, flags ...string) *gatewayd {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(testutil.MustFreePort(t))
	// Each process its own metrics port: several run at once.
	args := append([]string{"--addr=" + addr, "--metrics-addr=127.0.0.1:0", "--namespaces=" + ns, "--zap-log-level=info"}, flags...)
	g := &gatewayd{t: t, url: "http://" + addr, Process: testutil.StartProcess(t, "gatewayd "+addr, kubeconfig, binary, args...)}
	g.AwaitReady(t, g.url)
	return g
}

// signal sends sig and waits for the process to exit.
func (g *gatewayd) signal(sig syscall.Signal) {
	if g.Exited() {
		return
	}
	_ = g.Cmd.Process.Signal(sig)
	select {
	case <-g.Done:
	case <-time.After(30 * time.Second):
		_ = g.Cmd.Process.Kill()
		<-g.Done
		g.t.Errorf("gatewayd did not exit within 30s of %v", sig)
	}
}

// alive reports whether the process still runs.
func (g *gatewayd) alive() bool { return !g.Exited() }

var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 200}, Timeout: 30 * time.Second}

type answer struct {
	status    int
	code      string
	requestID string
	err       error
}

// chat makes one model call of slug with key.
func chat(url, key string) answer { return chatModel(url, key, slug) }

// chatModel makes one model call of model with key.
func chatModel(url, key, model string) answer {
	body := `{"model":"` + model + `","messages":[{"role":"user","content":"hello world"}]}`
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", bytes.NewReader([]byte(body)))
	req.Header.Set("Authorization", "Api-Key "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e struct {
		Code string `json:"error_code"`
	}
	_ = json.Unmarshal(b, &e)
	return answer{status: resp.StatusCode, code: e.Code, requestID: resp.Header.Get("X-Request-Id")}
}

// tally counts answers by status; transport errors count under 0.
type tally struct {
	mu sync.Mutex
	by map[int]int
	// codes counts error_code values.
	codes map[string]int
	ids   []string
}

func (c *tally) add(a answer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by, c.codes = map[int]int{}, map[string]int{}
	}
	c.by[a.status]++
	if a.code != "" {
		c.codes[a.code]++
	}
	if a.status == http.StatusOK {
		c.ids = append(c.ids, a.requestID)
	}
}

func (c *tally) get(status int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.by[status]
}

// hammer makes n concurrent calls, call i through urls[i%len(urls)] with keys[i%len(keys)].
func hammer(n int, urls, keys []string) *tally {
	var c tally
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { c.add(chat(urls[i%len(urls)], keys[i%len(keys)])) })
	}
	wg.Wait()
	return &c
}
