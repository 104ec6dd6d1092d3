package autoscale_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

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
	"github.com/modelgate/modelgate/test/testutil"
)

// TestAutoscalerReadsGatewaydProcesses: the manager's autoscaler, on its real 2 s ticker, reads two gatewayd
// processes (cmd/gatewayd, built here) through their metrics Service's EndpointSlices, and scales 40 calls held
// by a slow model, 20 through each process, with concurrencyTarget 10, to 4 replicas. That the count holds while
// the calls do, and the timers (scale-down delay, startup protection), are TestAutoscalerTimersOnGatewaydProcesses's,
// whose rounds are counted on a fake clock instead of waited for.
func TestAutoscalerReadsGatewaydProcesses(t *testing.T) {
	ctrl.SetLogger(logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := startProcesses(ctx, t, controllers.Options{Autoscaler: &autoscale.Autoscaler{}})
	c, ns := p.Client, p.Namespace

	model, modelPort := serveSlowModel(t, p.host)
	md := &gatewayv1.ModelDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "proc-v1", Namespace: ns},
		Spec: gatewayv1.ModelDeploymentSpec{ModelID: "proc", StartupTimeoutSeconds: 30,
			Source: gatewayv1.DeploymentSource{Container: &gatewayv1.ContainerSource{Image: "example.com/slow:1", Port: modelPort}},
			Autoscaling: &gatewayv1.Autoscaling{MinReplica: ptr.To[int32](0), MaxReplica: ptr.To[int32](5),
				ConcurrencyTarget: ptr.To[int32](10), ScaleDownDelaySeconds: ptr.To[int32](900)}},
	}
	p.serve(t, md, modelPort)
	wl := md.WorkloadName()

	release := model.Hold()
	var calls sync.WaitGroup
	codes := make(chan int, 40)
	for i := range 40 {
		calls.Go(func() {
			code, err := p.call(i % 2)
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
	release()
	calls.Wait()
	close(codes)
	for code := range codes {
		if code != http.StatusOK {
			t.Errorf("a held call answered %d, want 200", code)
		}
	}
}

// processes are the local stack (envtest, the manager with opts, the seeded workspace "default") and two gatewayd
// processes built from cmd/gatewayd, each serving calls and stats on the host's address, with the EndpointSlices
// that the EndpointSlice controller would write for gatewayd's metrics Service: one ready endpoint per process.
// Each process keeps its own real clock (its stats' peak window); only the manager takes opts.Clock.
type processes struct {
	*stack.Stack
	// host is the address every server listens on (kubetest.EndpointAddress).
	host                     string
	gatewayURLs, metricsURLs []string
}

// startProcesses starts them until the test ends; opts.Autoscaler reads gatewayd's metrics Service.
func startProcesses(ctx context.Context, t *testing.T, opts controllers.Options) *processes {
	t.Helper()
	p := &processes{host: kubetest.EndpointAddress(t).String()}
	binary := filepath.Join(t.TempDir(), "gatewayd")
	if out, err := exec.Command("go", "build", "-o", binary, "github.com/modelgate/modelgate/cmd/gatewayd").CombinedOutput(); err != nil {
		t.Fatalf("failed to build gatewayd: %v\n%s", err, out)
	}
	const ns = "default"
	opts.Autoscaler.StatsService = types.NamespacedName{Namespace: ns, Name: statsService}
	// Stopped in a cleanup, registered before the processes': cleanups run last-registered first, so the
	// processes stop before the control plane they watch.
	s := stack.StartTest(ctx, t, stack.Options{Namespace: ns, Controllers: opts})
	p.Stack = s
	for i := range 2 {
		addr, metrics := freeAddr(t, p.host), freeAddr(t, p.host)
		startProcess(t, binary, s.KubeconfigPath, "--addr="+addr, "--metrics-addr="+metrics, "--namespaces="+ns, "--state-dir="+t.TempDir())
		p.gatewayURLs = append(p.gatewayURLs, "http://"+addr)
		p.metricsURLs = append(p.metricsURLs, "http://"+metrics)
		port, _ := strconv.Atoi(metrics[strings.LastIndex(metrics, ":")+1:])
		create(t, s.Client, testutil.EndpointSlice(ns, fmt.Sprintf("%s-p%d", statsService, i), statsService, stats.PortName, int32(port), testutil.Endpoint{Addr: p.host, Ready: true}))
	}
	return p
}

// serve creates md, the Model "proc" whose production environment points at it, and what envtest lacks (it runs
// no Deployment controller nor kubelet): one ready replica of md's Deployment and the EndpointSlice of its
// Service pointing at the model server on modelPort. It returns once md is ACTIVE and a call through each
// process is answered.
func (p *processes) serve(t *testing.T, md *gatewayv1.ModelDeployment, modelPort int32) {
	t.Helper()
	c, ns := p.Client, p.Namespace
	create(t, c, md)
	create(t, c, &gatewayv1.Model{ObjectMeta: metav1.ObjectMeta{Name: "proc", Namespace: ns},
		Spec: gatewayv1.ModelSpec{Environments: []gatewayv1.ModelEnvironment{{Name: "production", Deployment: md.Name}}}})
	wl := md.WorkloadName()
	eventually(t, "the Deployment of "+md.Name+" at 1 replica", func() error { return expectReplicas(c, ns, wl, 1) })
	reportWorkload(t, c, ns, wl, 1)
	create(t, c, testutil.EndpointSlice(ns, wl+"-1", wl, gatewayv1.ModelPortName, modelPort, testutil.Endpoint{Addr: p.host, Ready: true}))
	eventually(t, md.Name+" ACTIVE", func() error { return expectStatus(c, ns, md.Name, gatewayv1.StatusActive, "") })
	for i, u := range p.gatewayURLs {
		eventually(t, "a call through "+u, func() error {
			if code, err := p.call(i); err != nil || code != http.StatusOK {
				return fmt.Errorf("answered %d, %v", code, err)
			}
			return nil
		})
	}
}

// call makes one predict call to the model "proc" through process i.
func (p *processes) call(i int) (int, error) { return callModel(p.gatewayURLs[i], p.APIKey, "proc") }

// demand is what the processes report for deployment id: the sum of each one's stats.Deployment.Demand.
func (p *processes) demand(t *testing.T, id string) int64 {
	t.Helper()
	var n int64
	for _, u := range p.metricsURLs {
		for _, d := range readStats(t, u).Deployments {
			if d.DeploymentID == id {
				n += d.Demand()
			}
		}
	}
	return n
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
	p := testutil.StartProcess(t, fmt.Sprintf("gatewayd %v", args), kubeconfig, binary, args...)
	var addr string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--addr="); ok {
			addr = v
		}
	}
	p.AwaitReady(t, "http://"+addr)
}
