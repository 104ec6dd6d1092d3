package cluster_test

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/test/cluster"
	"github.com/modelgate/modelgate/test/stack"
)

// The cluster suite runs in its own step of `make test` (make test-cluster), which builds the cluster's binaries
// and sets MODELGATE_CLUSTER_BIN. A plain `go test ./...` skips it, saying so; under CI the step always sets it,
// and a cluster that cannot start fails the suite with the reason.
func TestCluster(t *testing.T) {
	binDir, root, helm := suite(t)
	ctrllog.SetLogger(logr.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()

	start := time.Now()
	images, err := cluster.BuildImages(ctx, root, filepath.Join(t.TempDir(), "images"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("figure: images built in %s", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	c, err := cluster.Up(ctx, cluster.Options{BinDir: binDir, Images: images, Log: testWriter{t}})
	if err != nil {
		t.Fatalf("the cluster did not start: %v", err)
	}
	t.Logf("figure: cluster up (node Ready) in %s", time.Since(start).Round(time.Millisecond))
	// Down runs even when a step fails; then nothing the cluster made may be left on the machine.
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range []string{"kubelet", "containerd", "kube-apiserver"} {
				t.Logf("%s log (tail):\n%s", n, c.LogTail(n, 40))
			}
		}
		if err := c.Down(); err != nil {
			t.Errorf("teardown: %v", err)
		}
		if left := cluster.Leftovers(c.Dir); len(left) > 0 {
			t.Errorf("the cluster left behind:\n  %s", strings.Join(left, "\n  "))
		}
	})

	p, err := c.Install(ctx, cluster.InstallOptions{Root: root, Helm: helm})
	if p != nil {
		t.Cleanup(p.Stop)
	}
	if err != nil {
		t.Fatalf("install: %v", err)
	}
	t.Logf("figure: helm install to every pod Ready in %s", p.InstallDuration.Round(time.Millisecond))

	tour := &tour{t: t, c: c, p: p, root: root, ctx: ctx, writes: &writeLog{}}
	start = time.Now()
	for _, step := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"groups, and a child above its parent refused by the admission webhook", tour.groups},
		{"OpenAI route with a minted key, billing event and metrics", tour.openAI},
		{"url model predict", tour.predict},
		{"async predict with a webhook receiver in the namespace", tour.async},
		{"chain run_remote and its environment promoted", tour.chainPromote},
		{"ZIP sandbox build in the manager pod", tour.sandboxZip},
		{"dashboard in Chromium through the Service", tour.dashboard},
		{"every write route of the OpenAPI document with gatewayd's RBAC", tour.everyWrite},
		{"a container model's life on real pods", tour.containerModelLife},
		{"a promotion's scale-down holds until a call", tour.promotedStaysDown},
		{"an Endpoint's target pod deleted under load fails no call", tour.failoverOnPodDeletion},
		{"figures on real pods: ten wakes from zero, the overhead against the pod, async dispatch", tour.figuresOnRealPods},
	} {
		if !t.Run(step.name, step.run) {
			t.Logf("manager log:\n%s", c.PodLogs(ctx, cluster.ReleaseNamespace, "app.kubernetes.io/component=manager"))
			t.Logf("gatewayd log:\n%s", c.PodLogs(ctx, cluster.ReleaseNamespace, "app.kubernetes.io/component=gatewayd"))
		}
	}
	t.Logf("figure: tour on the cluster in %s", time.Since(start).Round(time.Millisecond))
}

// suite answers the cluster's binaries, the repository root and helm, or skips the test outside make
// test-cluster (never where that step asked for the suite).
func suite(t *testing.T) (binDir, root, helm string) {
	binDir = os.Getenv("MODELGATE_CLUSTER_BIN")
	if binDir == "" {
		if os.Getenv("MODELGATE_CLUSTER_SUITE") == "required" {
			t.Fatal("MODELGATE_CLUSTER_BIN is not set: run the suite with make test-cluster")
		}
		t.Skip("the cluster suite runs in make test's cluster step (make test-cluster), which sets MODELGATE_CLUSTER_BIN")
	}
	root, err := stack.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	if helm = os.Getenv("MODELGATE_HELM"); helm == "" {
		helm = filepath.Join(root, "bin", "helm")
	}
	return binDir, root, helm
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

type tour struct {
	t    *testing.T
	c    *cluster.Cluster
	p    *cluster.Product
	root string
	ctx  context.Context
	// writes records the answers to the write routes of openapi.json (writes_test.go), whichever step called them.
	writes *writeLog
}

type answer struct {
	code   int
	header http.Header
	raw    []byte
	body   map[string]any
}

func (a answer) String() string { return fmt.Sprintf("%d %s", a.code, a.raw) }

// call sends a request to gatewayd's Service from inside the namespace.
func (tr *tour) call(t *testing.T, method, path, auth string, body any, header map[string]string) answer {
	t.Helper()
	a, err := tr.do(method, path, auth, body, header)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return a
}

// do is call for any goroutine: a failed exchange is an error, and the answer's code is 0.
func (tr *tour) do(method, path, auth string, body any, header map[string]string) (answer, error) {
	return tr.doAt(tr.p.GatewayURL, method, path, auth, body, header)
}

// doAt is do against the gatewayd at base (one replica's pod address) instead of the Service.
func (tr *tour) doAt(base, method, path, auth string, body any, header map[string]string) (answer, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(tr.ctx, method, base+path, rd)
	if err != nil {
		return answer{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := tr.p.HTTP.Do(req)
	if err != nil {
		return answer{raw: []byte(err.Error())}, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{code: resp.StatusCode, header: resp.Header, raw: raw}
	_ = json.Unmarshal(raw, &a.body)
	tr.writes.record(method, req.URL.Path, a)
	return a, nil
}

func (tr *tour) admin(t *testing.T, method, path string, body any) answer {
	t.Helper()
	return tr.call(t, method, path, "Bearer "+tr.p.APIKey, body, nil)
}

// eventually retries f until it answers nil or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	gomega.NewWithT(t).Eventually(f).WithTimeout(timeout).WithPolling(300*time.Millisecond).Should(gomega.Succeed(), what)
}

func (tr *tour) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := tr.c.Kubectl(tr.ctx, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// groups applies the README's sample trees with kubectl and checks the CASCADING refusal, which the real API
// server gets from the manager's validating webhook, called through its Service with the CA the manager wrote
// into the webhook configuration.
func (tr *tour) groups(t *testing.T) {
	samples := filepath.Join(tr.root, "config", "samples")
	tr.kubectl(t, "apply", "-n", cluster.WorkspaceNamespace, "-f", filepath.Join(samples, "groups-cascading.yaml"),
		"-f", filepath.Join(samples, "groups-independent.yaml"), "-f", filepath.Join(samples, "apikeys.yaml"))
	eventually(t, time.Minute, "every sample group Ready", func() error {
		out := tr.kubectl(t, "get", "groups", "-n", cluster.WorkspaceNamespace, "--no-headers")
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(line); len(f) < 2 || f[1] != "True" {
				return fmt.Errorf("not Ready: %q", line)
			}
		}
		return nil
	})
	out, err := tr.c.Kubectl(tr.ctx, "patch", "group", "acme-eu-research", "-n", cluster.WorkspaceNamespace, "--type=json",
		"-p", `[{"op":"replace","path":"/spec/models/0/rateLimits/0/threshold","value":100000}]`)
	// The message names the ancestor's limit, which only the webhook reads (CEL sees one object).
	if err == nil || !strings.Contains(string(out), "exceeds parent group limit") || !strings.Contains(string(out), "ancestor acme-eu allows 300") {
		t.Fatalf("a child above its parent: %v\n%s", err, out)
	}
	if logs := tr.c.PodLogs(tr.ctx, cluster.ReleaseNamespace, "app.kubernetes.io/component=manager"); !strings.Contains(logs, `"Refused write"`) {
		t.Fatalf("the manager's webhook did not log the refusal:\n%s", logs)
	}
	r := tr.admin(t, http.MethodGet, "/v1/gateway/groups?limit=100", nil)
	if r.code != http.StatusOK || !strings.Contains(string(r.raw), "acme-eu-research") {
		t.Fatalf("GET /v1/gateway/groups: %s", r)
	}
}

// openAI calls the demo Endpoint with the key the controller minted, then reads the billing event and metrics.
func (tr *tour) openAI(t *testing.T) {
	var key string
	eventually(t, time.Minute, "the minted key's Secret", func() error {
		ak := &gatewayv1.APIKey{}
		if err := tr.p.Client.Get(tr.ctx, client.ObjectKey{Namespace: cluster.WorkspaceNamespace, Name: "acme-eu-research-minted"}, ak); err != nil {
			return err
		}
		if ak.Status.SecretName == "" {
			return fmt.Errorf("no secretName yet")
		}
		out, err := tr.c.Kubectl(tr.ctx, "get", "secret", ak.Status.SecretName, "-n", cluster.WorkspaceNamespace, "-o", "jsonpath={.data.api_key}")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		b, err := base64.StdEncoding.DecodeString(string(out))
		key = string(b)
		return err
	})
	body := map[string]any{"model": stack.EndpointSlug, "messages": []map[string]string{{"role": "user", "content": "hello"}}}
	var r answer
	eventually(t, time.Minute, "a chat completion through gatewayd's Service", func() error {
		r = tr.call(t, http.MethodPost, "/v1/chat/completions", "Api-Key "+key, body, nil)
		if r.code != http.StatusOK {
			return fmt.Errorf("%s", r)
		}
		return nil
	})
	if r.body["object"] != "chat.completion" {
		t.Fatalf("completion: %s", r)
	}
	last, ok := tr.p.Upstream.Last()
	if !ok || last.Header.Get("Authorization") != "Bearer "+stack.UpstreamAPIKey {
		t.Fatalf("the upstream did not get the Endpoint's credential: %+v", last.Header)
	}
	eventually(t, 30*time.Second, "the call's billing event", func() error {
		ev := tr.admin(t, http.MethodGet, "/v1/gateway/events", nil)
		if ev.code != http.StatusOK || !strings.Contains(string(ev.raw), stack.EndpointSlug) {
			return fmt.Errorf("%s", ev)
		}
		return nil
	})
	m := tr.admin(t, http.MethodGet, "/v1/metrics", nil)
	if m.code != http.StatusOK || !strings.Contains(string(m.raw), "service_model_api") {
		t.Fatalf("GET /v1/metrics: %d %.300s", m.code, m.raw)
	}
}

// predict calls the seeded url model, whose server runs in this process on ClientIP: gatewayd's pod reaches it.
func (tr *tour) predict(t *testing.T) {
	var r answer
	eventually(t, 2*time.Minute, "the url deployment to answer", func() error {
		r = tr.admin(t, http.MethodPost, "/models/demo-model/production/predict", map[string]any{"text": "I love it"})
		if r.code != http.StatusOK {
			return fmt.Errorf("%s", r)
		}
		return nil
	})
	if r.body["label"] != "positive" || r.body["deployment"] != stack.ModelDeploymentName {
		t.Fatalf("predict: %s", r)
	}
}

// async queues a predict whose result goes to a receiver listening on ClientIP, signed with the Workspace's
// secret.
func (tr *tour) async(t *testing.T) {
	ln, err := tr.c.Netns.Listen("tcp", net.JoinHostPort(cluster.ClientIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	type delivery struct {
		header http.Header
		body   []byte
	}
	got := make(chan delivery, 4)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- delivery{r.Header.Clone(), b}
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	r := tr.admin(t, http.MethodPost, "/models/demo-model/production/async_predict", map[string]any{
		"model_input": map[string]any{"text": "I love it"}, "webhook_endpoint": "http://" + ln.Addr().String() + "/hook"})
	if r.code != http.StatusCreated {
		t.Fatalf("async_predict: %s", r)
	}
	id, _ := r.body["request_id"].(string)
	var d delivery
	select {
	case d = <-got:
	case <-time.After(time.Minute):
		t.Fatal("the result webhook never arrived")
	}
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(stack.AsyncWebhookSecret, "whsec_"))
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(d.header.Get("webhook-id") + "." + d.header.Get("webhook-timestamp") + "."))
	mac.Write(d.body)
	if want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)); d.header.Get("webhook-signature") != want {
		t.Fatalf("signature %q, want %q", d.header.Get("webhook-signature"), want)
	}
	if !strings.Contains(string(d.body), id) || !strings.Contains(string(d.body), "positive") {
		t.Fatalf("webhook payload %s", d.body)
	}
	eventually(t, 30*time.Second, "the async request SUCCEEDED", func() error {
		st := tr.call(t, http.MethodGet, "/models/demo-model/async_request/"+id, "Api-Key "+tr.p.APIKey, nil, nil)
		if st.body["status"] != "SUCCEEDED" {
			return fmt.Errorf("%s", st)
		}
		return nil
	})
}

// chainPromote runs the seeded chain, then promotes a second deployment into its production environment through
// the management API, which updates the Chain with gatewayd's own RBAC.
func (tr *tour) chainPromote(t *testing.T) {
	eventually(t, 2*time.Minute, "run_remote", func() error {
		r := tr.admin(t, http.MethodPost, "/chains/demo-chain/production/run_remote", map[string]any{"text": "I love it"})
		if r.code != http.StatusOK || r.body["label"] != "positive" {
			return fmt.Errorf("%s", r)
		}
		return nil
	})
	v2 := &gatewayv1.ChainDeployment{}
	v2.Name, v2.Namespace = "demo-chain-v2", cluster.WorkspaceNamespace
	v2.Spec = gatewayv1.ChainDeploymentSpec{ChainID: stack.ChainName, Entrypoint: stack.ChainEntrypoint, Chainlets: []gatewayv1.Chainlet{
		{Name: stack.ChainEntrypoint, Source: gatewayv1.DeploymentSource{URL: tr.p.ModelURL}},
		{Name: stack.ChainOtherChainlet, Source: gatewayv1.DeploymentSource{URL: tr.p.ModelURL}},
	}}
	if err := tr.p.Client.Create(tr.ctx, v2); err != nil {
		t.Fatal(err)
	}
	var r answer
	eventually(t, 2*time.Minute, "promote demo-chain-v2", func() error {
		r = tr.admin(t, http.MethodPost, "/v1/chains/demo-chain/environments/production/promote", map[string]any{"deployment_id": "demo-chain-v2"})
		if r.code != http.StatusOK {
			return fmt.Errorf("%s", r)
		}
		return nil
	})
	if !strings.Contains(string(r.raw), "demo-chain-v2") {
		t.Fatalf("promote: %s", r)
	}
	ch := &gatewayv1.Chain{}
	if err := tr.p.Client.Get(tr.ctx, client.ObjectKey{Namespace: cluster.WorkspaceNamespace, Name: stack.ChainName}, ch); err != nil {
		t.Fatal(err)
	}
	if got := ch.Spec.Environments[0].Deployment; got != "demo-chain-v2" {
		t.Fatalf("the Chain's production environment serves %q, want demo-chain-v2", got)
	}
}

// sandboxZip pushes a ZIP build context; the manager pod builds it (its temporary files on the volume the chart
// gives it) and pushes the image to the workspace's registry.
func (tr *tour) sandboxZip(t *testing.T) {
	red := tr.pushZip(t, "red", "agent", map[string][]byte{
		"Dockerfile": []byte("FROM scratch\nENV MODE=sandbox\nCOPY hello.sh /hello.sh\nCMD [\"sh\", \"/hello.sh\"]\n"),
		"hello.sh":   []byte("echo hello\n"),
	})
	var r answer
	eventually(t, 2*time.Minute, "the build to finish", func() error {
		r = tr.call(t, http.MethodGet, "/v1/sandboxes/images/agent", "Bearer "+tr.p.APIKey, nil, red)
		if s := r.body["status"]; s != "BUILT" && s != "FAILED" {
			return fmt.Errorf("%s", r)
		}
		return nil
	})
	if r.body["status"] != "BUILT" {
		t.Fatalf("the ZIP build: %s", r)
	}
}

// pushZip creates team, pushes a build of image for it and uploads files as its ZIP context (stored, not
// compressed), answering the team header for the image's routes.
func (tr *tour) pushZip(t *testing.T, team, image string, files map[string][]byte) map[string]string {
	t.Helper()
	tm := &gatewayv1.Team{}
	tm.Name, tm.Namespace, tm.Spec.DisplayName = team, cluster.WorkspaceNamespace, team
	if err := tr.p.Client.Create(tr.ctx, tm); err != nil {
		t.Fatal(err)
	}
	header := map[string]string{"X-Team-Id": team}
	var r answer
	eventually(t, time.Minute, "a push", func() error {
		r = tr.call(t, http.MethodPost, "/v1/sandboxes/images", "Bearer "+tr.p.APIKey, map[string]any{"name": image}, header)
		if r.code != http.StatusAccepted {
			return fmt.Errorf("%s", r)
		}
		return nil
	})
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, content := range files {
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Store})
		_, _ = w.Write(content)
	}
	_ = zw.Close()
	uploadURL, _ := r.body["upload_url"].(string)
	req, err := http.NewRequestWithContext(tr.ctx, http.MethodPut, uploadURL, bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("upload URL %q: %v", uploadURL, err)
	}
	req.Header.Set("Content-Type", "application/zip")
	resp, err := tr.p.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	uploaded := answer{code: resp.StatusCode, header: resp.Header, raw: raw}
	_ = json.Unmarshal(raw, &uploaded.body)
	tr.writes.record(http.MethodPut, req.URL.Path, uploaded)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT upload: %s", uploaded)
	}
	return header
}

// dashboard loads the dashboard in Debian's headless Chromium, run inside the namespace, through gatewayd's
// Service, and checks that the application rendered its sign-in form.
func (tr *tour) dashboard(t *testing.T) {
	chromium := "/usr/bin/chromium"
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("the dashboard step needs Debian's chromium at %s: %v", chromium, err)
	}
	profile := t.TempDir()
	out, err := tr.c.Exec(tr.ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+profile, "--virtual-time-budget=10000", "--dump-dom", tr.p.GatewayURL+"/dashboard/")
	if err != nil {
		t.Fatalf("chromium: %v\n%.2000s", err, out)
	}
	if !strings.Contains(string(out), "Sign in with a workspace key") {
		t.Fatalf("the dashboard did not render its sign-in form:\n%.3000s", out)
	}
}

// Ctrl-C on `make cluster` removes everything it made: the same cluster, brought up by the command a person runs
// (test/cluster/cmd/cluster), interrupted once the chart is installed, leaves no process, mount, cgroup, veth or
// network namespace behind (the iptables rules lived in the namespace).
func TestClusterInterrupted(t *testing.T) {
	binDir, root, helm := suite(t)
	bin := filepath.Join(t.TempDir(), "cluster")
	if out, err := exec.Command("go", "build", "-C", root, "-o", bin, "./test/cluster/cmd/cluster").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-bin-dir", binDir, "-helm", helm)
	cmd.Dir = root
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		found := false
		for sc.Scan() {
			if strings.Contains(sc.Text(), "Ctrl-C removes the cluster") && !found {
				found = true
				ready <- true
			}
		}
		if !found {
			ready <- false
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			_ = cmd.Wait()
			t.Fatalf("make cluster stopped before it was ready:\n%s", tail(stderr.String(), 60))
		}
	case <-time.After(10 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("make cluster was not ready after 10 minutes:\n%s", tail(stderr.String(), 60))
	}
	env, err := os.ReadFile(filepath.Join(root, ".dev", "cluster.env"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"MODELGATE_URL=http://", "MODELGATE_API_KEY=", "KUBECONFIG=", "MODELGATE_NAMESPACE=default", "MODELGATE_CLIENT_ADDR=" + cluster.ClientIP} {
		if !strings.Contains(string(env), v) {
			t.Errorf(".dev/cluster.env lacks %s:\n%s", v, env)
		}
	}
	// hack/cluster.sh exec runs a client inside the namespace with the env sourced.
	out, err := exec.Command(filepath.Join(root, "hack", "cluster.sh"), "exec", "--", "sh", "-c", `kubectl get nodes --no-headers`).CombinedOutput()
	if err != nil || !strings.Contains(string(out), cluster.NodeName) || !strings.Contains(string(out), " Ready") {
		t.Errorf("hack/cluster.sh exec -- kubectl get nodes: %v\n%s", err, out)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("make cluster exited with %v after Ctrl-C:\n%s", err, tail(stderr.String(), 30))
		}
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("make cluster did not stop within 3 minutes of Ctrl-C")
	}
	if left := cluster.Leftovers(cluster.DefaultDir); len(left) > 0 {
		t.Errorf("Ctrl-C left behind:\n  %s", strings.Join(left, "\n  "))
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
