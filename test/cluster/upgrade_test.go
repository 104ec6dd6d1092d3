package cluster_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/sandbox"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/test/cluster"
)

// A rolling upgrade of gatewayd under steady load fails no call: two replicas sharing Redis (redis-server from
// Debian, run inside the cluster's network on the client address), then `helm upgrade` that rolls them while
// eight clients call the url model through gatewayd's Service without pause.
func TestClusterRollingUpgrade(t *testing.T) {
	tr := upgradedUnderLoad(t, standaloneRedis)
	t.Run("the manager killed mid-build and mid-reconcile", func(t *testing.T) {
		tr.managerKilled(t)
	})
}

// The same on a Redis Cluster outside the pods, as a managed Redis's cluster mode would be: six nodes (three
// primaries, one replica each) inside the cluster's network on the client address, the chart installed with
// redis.mode=cluster and the nodes' addresses. The rolling upgrade fails no call, and a gatewayd pod deleted under
// load loses and repeats no async request.
func TestClusterRollingUpgradeRedisCluster(t *testing.T) {
	tr := upgradedUnderLoad(t, redisCluster)

	// gatewayd's state is on the cluster indeed: each workspace's keys and the async queue's are in a hash slot of
	// their own (docs/operations.md, "Redis"), on whichever primaries serve those slots.
	keys := redisClusterKeys(t, tr.ctx, tr.c)
	t.Logf("keys on each Redis Cluster primary: %v", keys)
	total := 0
	for _, n := range keys {
		total += n
	}
	if len(keys) != 3 || total == 0 {
		t.Fatalf("the Redis Cluster's primaries and their keys: %v, want 3 primaries holding gatewayd's keys", keys)
	}
}

// upgradedUnderLoad installs two gatewayd replicas on redisMode's Redis, rolls them under load, then deletes one
// of their pods under load.
func upgradedUnderLoad(t *testing.T, redisMode string) *tour {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	t.Cleanup(cancel)
	tr := twoReplicas(t, ctx, redisMode)
	tr.rollingUpgrade(t, redisMode)
	t.Run("a gatewayd pod deleted under load loses and repeats no async request", func(t *testing.T) {
		tr.podDeletedUnderLoad(t)
	})
	return tr
}

// rollingUpgrade runs `helm upgrade` with a new pod template, which rolls both gatewayd replicas one at a time
// (maxSurge 1, maxUnavailable 0), while eight clients call the url model through gatewayd's Service without pause:
// not one call may fail. redisMode is the Redis the replicas share, for the figure.
func (tr *tour) rollingUpgrade(t *testing.T, redisMode string) {
	t.Helper()
	_, _, helm := suite(t)

	// Steady load: eight clients, each calling without pause.
	load := tr.steadyLoad(8)
	time.Sleep(3 * time.Second)
	before := load.ok.Load()
	if before == 0 {
		load.stop()
		t.Fatalf("no call succeeded before the upgrade (%d failed)", load.failed.Load())
	}

	start := time.Now()
	out, err := tr.c.Exec(tr.ctx, helm, "upgrade", cluster.ReleaseName, filepath.Join(tr.root, "charts", "modelgate"),
		"--namespace", cluster.ReleaseNamespace, "--reuse-values", "--set-string", "gatewayd.podAnnotations.rolled-at="+start.Format(time.RFC3339Nano),
		"--wait", "--timeout", "5m")
	if err != nil {
		load.stop()
		t.Fatalf("helm upgrade: %v\n%s", err, out)
	}
	rollout := time.Since(start)
	time.Sleep(3 * time.Second) // calls on the new replicas only
	load.stop()

	t.Logf("figure: rolling upgrade of 2 gatewayd replicas on %s Redis under load took %s; %d calls answered, %d failed",
		redisMode, rollout.Round(time.Millisecond), load.ok.Load(), load.failed.Load())
	if n := load.failed.Load(); n > 0 {
		t.Fatalf("%d calls failed during the rolling upgrade (%d answered), for example: %v", n, load.ok.Load(), load.samples())
	}
	if load.ok.Load() <= before {
		t.Fatalf("no call was answered during the upgrade")
	}
}

// managerKilled kills the manager's process (SIGKILL: its leader Lease left to expire) while a sandbox build is
// inside its reconcile, its last write held at the registry, and right after a container deployment is created:
// the restarted process takes the Lease, runs the build again to BUILT, and the deployment reaches ACTIVE.
func (tr *tour) managerKilled(t *testing.T) {
	ns := cluster.WorkspaceNamespace
	// The build's last write, its image manifest (not the uploaded context's, which gatewayd writes by its digest
	// and then tags context-<build>, both with the context's config media type), is held at the registry: the
	// build is then surely running, inside its reconcile, when the manager dies.
	hold := tr.p.HoldRegistry(func(r *http.Request) bool {
		if r.Method != http.MethodPut || !strings.Contains(r.URL.Path, "/blue/killed/manifests/") {
			return false
		}
		body, err := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		return err == nil && !bytes.Contains(body, []byte(sandbox.ContextMediaType))
	})
	released := false
	defer func() {
		if !released {
			tr.p.Release(hold)
		}
	}()
	noise := make([]byte, 8<<20)
	_, _ = rand.Read(noise)
	blue := tr.pushZip(t, "blue", "killed", map[string][]byte{"Dockerfile": []byte("FROM scratch\nCOPY data.bin /data.bin\n"), "data.bin": noise})
	image := func() answer {
		return tr.call(t, http.MethodGet, "/v1/sandboxes/images/killed", "Bearer "+tr.p.APIKey, nil, blue)
	}
	eventually(t, 3*time.Minute, "the build's image manifest at the registry (held)", func() error {
		if hold.Held() == 0 {
			return fmt.Errorf("not yet: %s", image())
		}
		return nil
	})
	if at := image(); at.body["status"] != "BUILDING" {
		t.Fatalf("the build with its last write held: %s, want BUILDING", at)
	}
	// A container deployment created just before the kill: its first reconciles race the manager's death.
	md := &gatewayv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Name: "after-kill-v1", Namespace: ns},
		Spec: gatewayv1.ModelDeploymentSpec{ModelID: "after-kill", Source: gatewayv1.DeploymentSource{Container: &gatewayv1.ContainerSource{
			Image: cluster.DemoModelImage, Port: 8080}}, StartupTimeoutSeconds: 120}}
	if err := tr.p.Client.Create(tr.ctx, md); err != nil {
		t.Fatal(err)
	}
	managers := func() []corev1.Pod {
		pods := &corev1.PodList{}
		if err := tr.p.Client.List(tr.ctx, pods, client.InNamespace(cluster.ReleaseNamespace), client.MatchingLabels{"app.kubernetes.io/component": "manager"}); err != nil || len(pods.Items) == 0 {
			t.Fatalf("manager pods: %v (%d)", err, len(pods.Items))
		}
		return pods.Items
	}
	// SIGKILL, as the OOM killer would: the process releases nothing, not even its leader Lease, which the next
	// process must wait out (leaderElection.leaseDuration) before it reconciles anything.
	restarts := map[string]int32{}
	for _, p := range managers() {
		for _, cs := range p.Status.ContainerStatuses {
			restarts[p.Name] += cs.RestartCount
			if err := tr.c.KillContainer(tr.ctx, cs.ContainerID); err != nil {
				t.Fatal(err)
			}
		}
	}
	killed := time.Now()
	// The held write's connection closes when the killed process is gone: the build died mid-reconcile.
	eventually(t, 2*time.Minute, "the killed manager's held write cut by its death", func() error {
		if hold.Dropped() == 0 {
			return fmt.Errorf("%d held, none cut", hold.Held())
		}
		return nil
	})
	if at := image(); at.body["status"] != "BUILDING" {
		t.Fatalf("once the killed manager was gone: %s, want BUILDING", at)
	}
	t.Logf("the manager process died %s after its SIGKILL, its build BUILDING with its last write unanswered", time.Since(killed).Round(time.Millisecond))
	tr.p.Release(hold)
	released = true

	// The restarted manager runs the build again to its end, and reconciles the deployment to ACTIVE.
	var r answer
	eventually(t, 4*time.Minute, "the build to end", func() error {
		if r = image(); r.body["status"] != "BUILT" && r.body["status"] != "FAILED" {
			return fmt.Errorf("%s", r)
		}
		return nil
	})
	if r.body["status"] != "BUILT" {
		t.Fatalf("the build after the manager was killed mid-build: %s, want BUILT", r)
	}
	for _, p := range managers() {
		var n int32
		for _, cs := range p.Status.ContainerStatuses {
			n += cs.RestartCount
		}
		if before, ok := restarts[p.Name]; ok && n <= before {
			t.Fatalf("manager pod %s: %d restarts, %d before the kill; the killed process was not replaced", p.Name, n, before)
		}
	}
	built := false
	logs := tr.c.PodLogs(tr.ctx, cluster.ReleaseNamespace, "app.kubernetes.io/component=manager")
	for _, line := range strings.Split(logs, "\n") {
		built = built || (strings.Contains(line, "Sandbox image built") && strings.Contains(line, `"image":"killed"`))
	}
	if !built {
		t.Fatalf("the restarted manager's log does not show it built the image:\n%s", tail(logs, 30))
	}
	t.Logf("the restarted manager built it: BUILT %s after the kill", time.Since(killed).Round(time.Second))
	eventually(t, 4*time.Minute, "the deployment created before the kill ACTIVE", func() error {
		got := &gatewayv1.ModelDeployment{}
		if err := tr.p.Client.Get(tr.ctx, client.ObjectKeyFromObject(md), got); err != nil {
			return err
		}
		if got.Status.Status != gatewayv1.StatusActive {
			return fmt.Errorf("status %q", got.Status.Status)
		}
		return nil
	})
}

// podDeletedUnderLoad deletes one of the two gatewayd pods while sync calls run without pause and async requests
// are queued and running against a model server that counts each request id it answers: no sync call fails, and
// every accepted async request ends SUCCEEDED, answered exactly once.
func (tr *tour) podDeletedUnderLoad(t *testing.T) {
	var mu sync.Mutex
	answered := map[string]int{}
	tr.serveURLModel(t, "counted", func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec := &statusRecorder{ResponseWriter: w}
			next.ServeHTTP(rec, r)
			if r.URL.Path == "/predict" && rec.status == http.StatusOK {
				mu.Lock()
				answered[r.Header.Get("X-Request-Id")]++
				mu.Unlock()
			}
		})
	})

	load := tr.steadyLoad(6)
	var ids []string
	submit := func(n int) {
		for range n {
			a, err := tr.do(http.MethodPost, "/models/counted/production/async_predict", "Bearer "+tr.p.APIKey,
				map[string]any{"model_input": map[string]any{"text": "queued", "delay_ms": 400}}, nil)
			if err != nil || a.code != http.StatusCreated {
				// Refused before it was accepted: allowed (it is not an accepted request), but say so.
				t.Logf("async_predict not accepted: %d %s (%v)", a.code, a.raw, err)
				continue
			}
			ids = append(ids, a.body["request_id"].(string))
		}
	}
	submit(20)
	pods := &corev1.PodList{}
	if err := tr.p.Client.List(tr.ctx, pods, client.InNamespace(cluster.ReleaseNamespace), client.MatchingLabels{"app.kubernetes.io/component": "gatewayd"}); err != nil || len(pods.Items) < 2 {
		t.Fatalf("gatewayd pods: %v (%d)", err, len(pods.Items))
	}
	victim := pods.Items[0].Name
	if err := tr.p.Client.Delete(tr.ctx, &pods.Items[0]); err != nil {
		t.Fatal(err)
	}
	submit(20)
	eventually(t, 3*time.Minute, "a replacement gatewayd Ready", func() error {
		if err := tr.c.WaitPodsReady(tr.ctx, cluster.ReleaseNamespace); err != nil {
			return err
		}
		list := &corev1.PodList{}
		if err := tr.p.Client.List(tr.ctx, list, client.InNamespace(cluster.ReleaseNamespace), client.MatchingLabels{"app.kubernetes.io/component": "gatewayd"}); err != nil {
			return err
		}
		for _, p := range list.Items {
			if p.Name == victim {
				return fmt.Errorf("%s still there", victim)
			}
		}
		return nil
	})
	submit(10)
	time.Sleep(2 * time.Second)
	load.stop()
	t.Logf("figure: gatewayd pod %s deleted under load: %d sync calls answered, %d failed; %d async requests accepted", victim, load.ok.Load(), load.failed.Load(), len(ids))
	if n := load.failed.Load(); n > 0 {
		t.Errorf("%d sync calls failed while a gatewayd pod was deleted, for example %v", n, load.samples())
	}
	// One request at a time, each polled every 300 ms: status polls are limited to 20 a second per key.
	for _, id := range ids {
		eventually(t, 3*time.Minute, "async request "+id+" SUCCEEDED", func() error {
			st := tr.call(t, http.MethodGet, "/models/counted/async_request/"+id, "Api-Key "+tr.p.APIKey, nil, nil)
			if st.body["status"] != "SUCCEEDED" {
				return fmt.Errorf("%s", st)
			}
			return nil
		})
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if n := answered[id]; n != 1 {
			t.Errorf("async request %s was answered by the model %d times, want exactly once", id, n)
		}
	}
}

// load is clients calling gatewayd's Service without pause, until stop.
type load struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	first      []string
	done       chan struct{}
	wg         sync.WaitGroup
}

// steadyLoad starts n clients calling the seeded url model's predict without pause.
func (tr *tour) steadyLoad(n int) *load {
	return startLoad(n, func() (answer, error) {
		return tr.do(http.MethodPost, "/models/demo-model/production/predict", "Bearer "+tr.p.APIKey, map[string]any{"text": "steady"}, nil)
	})
}

// startLoad starts n clients running call without pause; a call is answered when it gets a 2xx, and failed on
// any other answer or a failed exchange.
func startLoad(n int, call func() (answer, error)) *load {
	l := &load{done: make(chan struct{})}
	for range n {
		l.wg.Go(func() {
			for {
				select {
				case <-l.done:
					return
				default:
				}
				a, err := call()
				if err == nil && a.code >= 200 && a.code < 300 {
					l.ok.Add(1)
					continue
				}
				l.failed.Add(1)
				l.mu.Lock()
				if len(l.first) < 5 {
					l.first = append(l.first, fmt.Sprintf("%d %s (%v)", a.code, a.raw, err))
				}
				l.mu.Unlock()
			}
		})
	}
	return l
}

// stop ends the clients and waits for them.
func (l *load) stop() {
	close(l.done)
	l.wg.Wait()
}

// samples are the first failures.
func (l *load) samples() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}
