package cluster_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/test/apibody"
	"github.com/modelgate/modelgate/test/cluster"
	"github.com/modelgate/modelgate/test/stack"
)

// The Redis deployments twoReplicas can give gatewayd's shared state, as the chart's redis.mode names them.
const (
	standaloneRedis = "standalone"
	redisCluster    = "cluster"
)

// twoReplicas builds the images, starts the cluster and installs the chart with two gatewayd replicas sharing
// Redis outside the pods (Debian's redis-server, run inside the cluster's network on the client address): one
// server (standaloneRedis) or a Redis Cluster of six nodes (redisCluster). Everything is removed when the test ends.
func twoReplicas(t *testing.T, ctx context.Context, redisMode string) *tour {
	binDir, root, helm := suite(t)
	redis, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("two gatewayd replicas need Debian's redis-server: %v", err)
	}
	images, err := cluster.BuildImages(ctx, root, filepath.Join(t.TempDir(), "images"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := cluster.Up(ctx, cluster.Options{BinDir: binDir, Images: images, Log: testWriter{t}})
	if err != nil {
		t.Fatalf("the cluster did not start: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Down(); err != nil {
			t.Errorf("teardown: %v", err)
		}
		if left := cluster.Leftovers(c.Dir); len(left) > 0 {
			t.Errorf("the cluster left behind: %v", left)
		}
	})

	// Redis for gatewayd's shared state, inside the namespace; stopped before the cluster goes.
	var store string
	switch redisMode {
	case standaloneRedis:
		redisAddr := net.JoinHostPort(cluster.ClientIP, "6379")
		rs := c.Netns.Command(context.Background(), redis, "--bind", cluster.ClientIP, "--port", "6379", "--save", "", "--appendonly", "no",
			"--dir", t.TempDir(), "--protected-mode", "no")
		rs.Stdout, rs.Stderr = os.Stderr, os.Stderr
		if err := rs.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rs.Process.Kill(); _ = rs.Wait() })
		store = fmt.Sprintf("redis: {url: \"redis://%s\"}\n", redisAddr)
	case redisCluster:
		addrs := startRedisCluster(t, ctx, c, redis)
		store = fmt.Sprintf("redis: {mode: cluster, addrs: [%s]}\n", strings.Join(addrs, ", "))
	default:
		t.Fatalf("unknown Redis mode %q", redisMode)
	}

	values := filepath.Join(t.TempDir(), "redis.yaml")
	if err := os.WriteFile(values, []byte("store: {type: redis}\n"+store+"gatewayd: {replicas: 2}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := c.Install(ctx, cluster.InstallOptions{Root: root, Helm: helm, Values: []string{values}})
	if p != nil {
		t.Cleanup(p.Stop)
	}
	if err != nil {
		t.Fatalf("install: %v", err)
	}
	return &tour{t: t, c: c, p: p, root: root, ctx: ctx}
}

// Read-your-writes on every replica (docs/limits.md): 1,000 writes, each through one gatewayd replica's pod
// address, each followed at once by a call through the other's that uses what was written (a minted workspace
// key, a group with a federated key minted under it, an Endpoint's slug, a model created with its production
// environment at a deployment). A miss is an answer of something the replica does not serve: 401, 404, or the 503 of a slug no Endpoint routes.
func TestClusterReadYourWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	tr := twoReplicas(t, ctx, standaloneRedis)
	replicas := tr.gatewaydPods(t)
	t.Logf("gatewayd replicas: %v", replicas)
	keys := tr.keyManager(t, "rw-keys", replicas)

	const pairs, models, workers = 1000, 100, 4
	tr.createModels(t, models)
	var misses, failed atomic.Int32
	var mu sync.Mutex
	var samples []string
	record := func(kind string, i int, a answer, err error, want int) {
		switch {
		case err == nil && rwMissed(a):
			misses.Add(1)
		case err != nil || a.code != want:
			failed.Add(1)
		default:
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if len(samples) < 10 {
			samples = append(samples, fmt.Sprintf("%s %d: %v %s", kind, i, err, a))
		}
	}
	start := time.Now()
	next := atomic.Int32{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= pairs || t.Failed() {
					return
				}
				tr.writeThenCall(t, i, i < models, replicas[i%2], replicas[(i+1)%2], keys, record)
			}
		})
	}
	wg.Wait()
	t.Logf("figure: %d create-then-call pairs across 2 gatewayd replicas in %s: %d misses, %d other failures",
		pairs, time.Since(start).Round(time.Millisecond), misses.Load(), failed.Load())
	if misses.Load() > 0 || failed.Load() > 0 {
		t.Fatalf("%d misses and %d other failures over %d pairs, for example:\n%s", misses.Load(), failed.Load(), pairs, strings.Join(samples, "\n"))
	}
}

// writeThenCall makes pair i: a write through writer, then at once the call through caller that uses it. The
// first pairs (model) create a model whose production environment serves its deployment; the others write, in turn, a
// workspace key, a group and a federated key under it, an Endpoint.
func (tr *tour) writeThenCall(t *testing.T, i int, model bool, writer, caller, keys string,
	record func(kind string, i int, a answer, err error, want int)) {
	admin := "Bearer " + tr.p.APIKey
	writeWith := func(method, auth, path string, body any, want int) (answer, bool) {
		a, err := tr.doAt(writer, method, path, auth, body, nil)
		if err != nil || a.code != want {
			record(method+" "+path, i, a, err, want)
			return a, false
		}
		return a, true
	}
	write := func(auth, path string, body any) (answer, bool) {
		return writeWith(http.MethodPost, auth, path, body, http.StatusCreated)
	}
	chat := func(auth, slug string) (answer, error) {
		return tr.doAt(caller, http.MethodPost, "/v1/chat/completions", auth,
			map[string]any{"model": slug, "messages": []any{map[string]any{"role": "user", "content": "hello"}}}, nil)
	}
	name := fmt.Sprintf("rw-%d", i)
	switch {
	case model:
		if _, ok := write(admin, "/v1/models", map[string]any{"id": name, "name": name,
			"environments": []any{map[string]any{"name": "production", "deployment": name + "-v1"}}}); ok {
			a, err := tr.doAt(caller, http.MethodPost, "/models/"+name+"/production/async_predict", admin,
				map[string]any{"model_input": map[string]any{"text": "hello"}}, nil)
			record("model", i, a, err, http.StatusCreated)
		}
	case i%3 == 0:
		if w, ok := write("Bearer "+keys, "/v1/api_keys", map[string]any{"type": "WORKSPACE_INVOKE", "name": name}); ok {
			a, err := chat("Bearer "+w.body["api_key"].(string), stack.EndpointSlug)
			record("workspace key", i, a, err, http.StatusOK)
		}
	case i%3 == 1:
		g, ok := write(admin, "/v1/gateway/groups", apibody.Group(name, "CASCADING", nil, apibody.Model(stack.EndpointSlug, nil, nil)))
		if !ok {
			return
		}
		if k, ok := write(admin, "/v1/gateway/groups/"+g.body["id"].(string)+"/api_keys", map[string]any{"name": name}); ok {
			a, err := chat("Api-Key "+k.body["api_key"].(string), stack.EndpointSlug)
			record("federated key", i, a, err, http.StatusOK)
		}
	default:
		slug := "rw/" + name
		if _, ok := write(admin, "/v1/gateway/endpoints", map[string]any{"slug": slug, "targets": []any{map[string]any{
			"provider": "OPENAI", "base_url": tr.p.UpstreamURL, "target_model": stack.EndpointModel,
			"api_key_secret_ref": map[string]any{"name": stack.UpstreamSecretName, "key": "api_key"},
		}}}); ok {
			a, err := chat(admin, slug)
			record("endpoint", i, a, err, http.StatusOK)
		}
	}
}

// rwMissed reports whether a is the answer of a replica that does not serve what the call names.
func rwMissed(a answer) bool {
	code, _ := a.body["error_code"].(string)
	return a.code == http.StatusUnauthorized || a.code == http.StatusNotFound ||
		a.code == http.StatusServiceUnavailable && code == httperr.CodeModelNotReady
}

// gatewaydPods answers the base URLs of the two Ready gatewayd pods, by pod address.
func (tr *tour) gatewaydPods(t *testing.T) []string {
	t.Helper()
	var out []string
	eventually(t, 2*time.Minute, "two Ready gatewayd pods", func() error {
		list := &corev1.PodList{}
		if err := tr.p.Client.List(tr.ctx, list, client.InNamespace(cluster.ReleaseNamespace),
			client.MatchingLabels{"app.kubernetes.io/component": "gatewayd"}); err != nil {
			return err
		}
		out = nil
		for _, p := range list.Items {
			if p.DeletionTimestamp != nil || !podIsReady(p) || p.Status.PodIP == "" {
				continue
			}
			for _, cp := range p.Spec.Containers[0].Ports {
				if cp.Name == "http" {
					out = append(out, "http://"+net.JoinHostPort(p.Status.PodIP, fmt.Sprint(cp.ContainerPort)))
				}
			}
		}
		if len(out) != 2 {
			return fmt.Errorf("%d Ready gatewayd pods", len(out))
		}
		return nil
	})
	return out
}

func podIsReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// keyManager creates a key-management workspace key as kubectl would and answers its plaintext once every
// replica authenticates it.
func (tr *tour) keyManager(t *testing.T, name string, replicas []string) string {
	t.Helper()
	k := &gatewayv1.WorkspaceAPIKey{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.WorkspaceNamespace, Name: name},
		Spec: gatewayv1.WorkspaceAPIKeySpec{Type: gatewayv1.KeyTypeManageAPIKeys, DisplayName: name}}
	if err := tr.p.Client.Create(tr.ctx, k); err != nil {
		t.Fatal(err)
	}
	var plain string
	eventually(t, 2*time.Minute, "the key-management key minted and served by every replica", func() error {
		if err := tr.p.Client.Get(tr.ctx, client.ObjectKeyFromObject(k), k); err != nil || k.Status.SecretName == "" {
			return fmt.Errorf("not minted yet: %v", err)
		}
		sec := &corev1.Secret{}
		if err := tr.p.Client.Get(tr.ctx, client.ObjectKey{Namespace: k.Namespace, Name: k.Status.SecretName}, sec); err != nil {
			return err
		}
		plain = string(sec.Data["api_key"])
		for _, r := range replicas {
			if a, err := tr.doAt(r, http.MethodGet, "/v1/api_keys", "Bearer "+plain, nil, nil); err != nil || a.code != http.StatusOK {
				return fmt.Errorf("%s: %v %s", r, err, a)
			}
		}
		return nil
	})
	return plain
}

// createModels creates, as kubectl would, a url deployment rw-<i>-v1 at the demo model server for each model
// rw-<i>, i below n, that does not exist yet, and waits until the published snapshot holds them all: the write
// under test creates the model through POST /v1/models with its production environment at the deployment.
func (tr *tour) createModels(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		md := &gatewayv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("rw-%d-v1", i), Namespace: cluster.WorkspaceNamespace},
			Spec: gatewayv1.ModelDeploymentSpec{ModelID: fmt.Sprintf("rw-%d", i), Source: gatewayv1.DeploymentSource{URL: tr.p.ModelURL}}}
		if err := tr.p.Client.Create(tr.ctx, md); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 2*time.Minute, "the deployments in the published snapshot", func() error {
		s, _, err := stack.ReadSnapshot(tr.ctx, tr.p.Client, cluster.WorkspaceNamespace)
		if err != nil {
			return err
		}
		found := 0
		for _, d := range s.Deployments {
			if strings.HasPrefix(d.ID, "rw-") {
				found++
			}
		}
		if found != n {
			return fmt.Errorf("%d of %d published", found, n)
		}
		return nil
	})
}
