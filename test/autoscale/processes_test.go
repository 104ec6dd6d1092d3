package autoscale_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/modelgate/modelgate/api/stats"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers"
	"github.com/modelgate/modelgate/controllers/autoscale"
	"github.com/modelgate/modelgate/test/kubetest"
	"github.com/modelgate/modelgate/test/stack"
)

// TestAutoscalerReadsGatewaydProcesses: the manager's autoscaler, on its real 2 s ticker, reads two gatewayd
// processes (cmd/gatewayd, built here) through their metrics Service's EndpointSlices, and scales 40 calls held
// by a slow model, 20 through each process, with concurrencyTarget 10, to 4 replicas; the count holds while the
// calls do. The timers (scale-down delay, startup protection) are TestAutoscaler's, on a fake clock.
func TestAutoscalerReadsGatewaydProcesses(t *testing.T) {
	ctrl.SetLogger(logr.Discard())
	host := kubetest.EndpointAddress(t).String()
	binary := filepath.Join(t.TempDir(), "gatewayd")
	if out, err := exec.Command("go", "build", "-o", binary, "github.com/modelgate/modelgate/cmd/gatewayd").CombinedOutput(); err != nil {
		t.Fatalf("failed to build gatewayd: %v\n%s", err, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	const ns = "default"
	scaler := &autoscale.Autoscaler{StatsService: types.NamespacedName{Namespace: ns, Name: statsService}}
	s, err := stack.Start(ctx, stack.Options{Namespace: ns, Controllers: controllers.Options{Autoscaler: scaler}})
	if err != nil {
		t.Fatalf("failed to start the stack (KUBEBUILDER_ASSETS=%q): %v", os.Getenv("KUBEBUILDER_ASSETS"), err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("failed to stop the stack: %v", err)
		}
	})
	c := s.Client

	// Two gatewayd processes, each serving calls and stats on the host's address. What the EndpointSlice
	// controller would write for their metrics Service: one ready endpoint per process.
	var gatewayURLs []string
	for i := range 2 {
		addr, metrics := freeAddr(t, host), freeAddr(t, host)
		startProcess(t, binary, s.KubeconfigPath, "--addr="+addr, "--metrics-addr="+metrics, "--namespaces="+ns, "--state-dir="+t.TempDir())
		gatewayURLs = append(gatewayURLs, "http://"+addr)
		port, _ := strconv.Atoi(metrics[strings.LastIndex(metrics, ":")+1:])
		create(t, c, endpointSlice(ns, fmt.Sprintf("%s-p%d", statsService, i), statsService, stats.PortName, host, int32(port), true))
	}

	model, modelPort := serveSlowModel(t, host)

	md := &gatewayv1.ModelDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "proc-v1", Namespace: ns},
		Spec: gatewayv1.ModelDeploymentSpec{ModelID: "proc", StartupTimeoutSeconds: 30,
			Source: gatewayv1.DeploymentSource{Container: &gatewayv1.ContainerSource{Image: "example.com/slow:1", Port: modelPort}},
			Autoscaling: &gatewayv1.Autoscaling{MinReplica: ptr.To[int32](0), MaxReplica: ptr.To[int32](5),
				ConcurrencyTarget: ptr.To[int32](10), ScaleDownDelaySeconds: ptr.To[int32](900)}},
	}
	create(t, c, md)
	create(t, c, &gatewayv1.Model{ObjectMeta: metav1.ObjectMeta{Name: "proc", Namespace: ns},
		Spec: gatewayv1.ModelSpec{Environments: []gatewayv1.ModelEnvironment{{Name: "production", Deployment: md.Name}}}})
	// envtest runs no Deployment controller nor kubelet: the test reports the ready replica and writes the
	// EndpointSlice of the model's Service pointing at the real model server, as they would.
	wl := md.WorkloadName()
	eventually(t, "the Deployment of proc-v1 at 1 replica", func() error { return expectReplicas(c, ns, wl, 1) })
	reportWorkload(t, c, ns, wl, 1)
	create(t, c, endpointSlice(ns, wl+"-1", wl, gatewayv1.ModelPortName, host, modelPort, true))
	eventually(t, "proc-v1 ACTIVE", func() error { return expectStatus(c, ns, md.Name, gatewayv1.StatusActive, "") })

	call := func(base string) (int, error) {
		req, _ := http.NewRequest(http.MethodPost, base+"/models/proc/production/predict", strings.NewReader(`{"x":1}`))
		req.Header.Set("Authorization", "Bearer "+s.APIKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Timeout: 5 * time.Minute}).Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	for _, u := range gatewayURLs {
		eventually(t, "a call through "+u, func() error {
			if code, err := call(u); err != nil || code != http.StatusOK {
				return fmt.Errorf("answered %d, %v", code, err)
			}
			return nil
		})
	}

	model.hold.Store(true)
	var calls sync.WaitGroup
	codes := make(chan int, 40)
	for i := range 40 {
		calls.Go(func() {
			code, err := call(gatewayURLs[i%2])
			if err != nil {
				t.Errorf("call %d: %v", i, err)
			}
			codes <- code
		})
	}
	eventually(t, "40 calls at the model", func() error {
		if n := model.inProgress.Load(); n != 40 {
			return fmt.Errorf("%d in progress", n)
		}
		return nil
	})
	eventually(t, "the Deployment of proc-v1 at 4 replicas", func() error { return expectReplicas(c, ns, wl, 4) })
	// Several more autoscaler rounds while the calls are held: the count stays.
	time.Sleep(3 * autoscale.DefaultInterval)
	if err := expectReplicas(c, ns, wl, 4); err != nil {
		t.Errorf("while 40 calls are held: %v", err)
	}
	close(model.release)
	calls.Wait()
	close(codes)
	for code := range codes {
		if code != http.StatusOK {
			t.Errorf("a held call answered %d, want 200", code)
		}
	}
}

// freeAddr is a free TCP address on host.
func freeAddr(t *testing.T, host string) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startProcess runs the gatewayd binary with args against the cluster of kubeconfig until the test ends, and
// waits until it serves a snapshot (/readyz).
func startProcess(t *testing.T, binary, kubeconfig string, args ...string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	var logs bytes.Buffer
	var mu sync.Mutex
	cmd.Stdout, cmd.Stderr = &lockedBuffer{mu: &mu, b: &logs}, &lockedBuffer{mu: &mu, b: &logs}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			mu.Lock()
			t.Logf("gatewayd %v logs:\n%s", args, logs.String())
			mu.Unlock()
		}
	})
	var addr string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--addr="); ok {
			addr = v
		}
	}
	eventually(t, "gatewayd at "+addr+" ready", func() error {
		select {
		case <-done:
			return fmt.Errorf("gatewayd exited")
		default:
		}
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz answered %d", resp.StatusCode)
		}
		return nil
	})
}

type lockedBuffer struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
