package cluster_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgate/modelgate/test/cluster"
)

// A rolling upgrade of gatewayd under steady load fails no call: two replicas sharing Redis (redis-server from
// Debian, run inside the cluster's network on the client address), then `helm upgrade` that rolls them while
// eight clients call the url model through gatewayd's Service without pause.
func TestClusterRollingUpgrade(t *testing.T) {
	binDir, root, helm := suite(t)
	redis, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("the rolling-upgrade test needs Debian's redis-server: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
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
	redisAddr := net.JoinHostPort(cluster.ClientIP, "6379")
	rs := c.Netns.Command(context.Background(), redis, "--bind", cluster.ClientIP, "--port", "6379", "--save", "", "--appendonly", "no",
		"--dir", t.TempDir(), "--protected-mode", "no")
	rs.Stdout, rs.Stderr = os.Stderr, os.Stderr
	if err := rs.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Process.Kill(); _ = rs.Wait() })

	values := filepath.Join(t.TempDir(), "redis.yaml")
	if err := os.WriteFile(values, []byte(fmt.Sprintf("store: {type: redis}\nredis: {url: \"redis://%s\"}\ngatewayd: {replicas: 2}\n", redisAddr)), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := c.Install(ctx, cluster.InstallOptions{Root: root, Helm: helm, Values: []string{values}})
	if p != nil {
		t.Cleanup(p.Stop)
	}
	if err != nil {
		t.Fatalf("install: %v", err)
	}
	tr := &tour{t: t, c: c, p: p, root: root, ctx: ctx}

	// Steady load: eight clients, each calling without pause.
	var ok, failed atomic.Int64
	var firstFailures sync.Map
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				a, err := tr.do(http.MethodPost, "/models/demo-model/production/predict", "Bearer "+p.APIKey, map[string]any{"text": "steady"}, nil)
				if err == nil && a.code == http.StatusOK {
					ok.Add(1)
					continue
				}
				n := failed.Add(1)
				if n <= 5 {
					firstFailures.Store(n, fmt.Sprintf("%d %s (%v)", a.code, a.raw, err))
				}
			}
		})
	}
	time.Sleep(3 * time.Second)
	before := ok.Load()
	if before == 0 {
		close(stop)
		wg.Wait()
		t.Fatalf("no call succeeded before the upgrade (%d failed)", failed.Load())
	}

	// The upgrade: a new pod template rolls both replicas, one at a time (maxSurge 1, maxUnavailable 0).
	start := time.Now()
	out, err := c.Exec(ctx, helm, "upgrade", cluster.ReleaseName, filepath.Join(root, "charts", "modelgate"),
		"--namespace", cluster.ReleaseNamespace, "--reuse-values", "--set-string", "gatewayd.podAnnotations.rolled-at="+start.Format(time.RFC3339Nano),
		"--wait", "--timeout", "5m")
	if err != nil {
		close(stop)
		wg.Wait()
		t.Fatalf("helm upgrade: %v\n%s", err, out)
	}
	rollout := time.Since(start)
	time.Sleep(3 * time.Second) // calls on the new replicas only
	close(stop)
	wg.Wait()

	t.Logf("figure: rolling upgrade of 2 gatewayd replicas under load took %s; %d calls answered, %d failed",
		rollout.Round(time.Millisecond), ok.Load(), failed.Load())
	if n := failed.Load(); n > 0 {
		var samples []string
		firstFailures.Range(func(_, v any) bool { samples = append(samples, v.(string)); return true })
		t.Fatalf("%d calls failed during the rolling upgrade (%d answered), for example: %v", n, ok.Load(), samples)
	}
	if ok.Load() <= before {
		t.Fatalf("no call was answered during the upgrade")
	}
}
