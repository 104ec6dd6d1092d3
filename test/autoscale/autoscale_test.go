// Package autoscale_test drives the concurrency autoscaler end to end: the local stack (envtest, the manager with
// its controllers, gatewayd) plus a second gatewayd replica, a slow model server on a real socket, and the
// manager's Autoscaler reading both replicas' /internal/stats through the EndpointSlices of gatewayd's metrics
// Service. One fake clock drives the manager (reconciler and autoscaler) and both gatewayd replicas' peak
// windows, so the scale-down delay is exact; every HTTP exchange is real. logs_test.go runs the logs route
// across two replicas the same way.
package autoscale_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/stats"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers"
	"github.com/modelgate/modelgate/controllers/autoscale"
	"github.com/modelgate/modelgate/gatewayd"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/test/kubetest"
	"github.com/modelgate/modelgate/test/stack"
	"github.com/modelgate/modelgate/test/testutil"
)

const (
	statsService = "gatewayd-metrics"
	round        = autoscale.DefaultInterval
	delay        = 60 * time.Second
)

// slowModel answers GET /health, and holds each POST /predict (after reading its body) from a Hold until its
// release.
type slowModel struct {
	mu sync.Mutex
	// gate, when set, holds every POST /predict until it is closed.
	gate       chan struct{}
	inProgress atomic.Int64
}

// Hold holds every POST /predict from now until release is called (once or more).
func (m *slowModel) Hold() (release func()) {
	gate := make(chan struct{})
	m.mu.Lock()
	m.gate = gate
	m.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			if m.gate == gate {
				m.gate = nil
			}
			m.mu.Unlock()
			close(gate)
		})
	}
}

// serveSlowModel serves a slowModel on host until the test ends, and returns it with its port.
func serveSlowModel(t *testing.T, host string) (*slowModel, int32) {
	t.Helper()
	model := &slowModel{}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: model}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return model, int32(ln.Addr().(*net.TCPAddr).Port)
}

func (m *slowModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		return
	}
	_, _ = io.Copy(io.Discard, r.Body)
	m.inProgress.Add(1)
	defer m.inProgress.Add(-1)
	m.mu.Lock()
	gate := m.gate
	m.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"ok":true}`))
}

func TestAutoscaler(t *testing.T) {
	stack.SetTestLogger()
	host := kubetest.EndpointAddress(t).String()
	clk := clocktesting.NewFakeClock(time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The Autoscaler runs as the manager's runnable (its ticker fires on each step of the fake clock); the test
	// also calls Poll after each step, so that it knows a round has run before it looks.
	scaler := &autoscale.Autoscaler{Clock: clk}
	// Stopped in a cleanup: cleanups run last-registered first, so the second gatewayd (registered later) stops
	// before the control plane it watches.
	s := stack.StartTest(ctx, t, stack.Options{
		MetricsAddr: net.JoinHostPort(host, "0"),
		Controllers: controllers.Options{Clock: clk, Autoscaler: scaler},
		Gatewayd:    gatewayd.Options{Clock: clk, UpstreamTimeout: 10 * time.Minute},
	})
	ns, c := s.Namespace, s.Client
	scaler.StatsService = types.NamespacedName{Namespace: ns, Name: statsService}

	// A second gatewayd replica, on the same clock.
	second := startGatewayd(ctx, t, s, host, clk)
	metricsURLs := []string{s.MetricsURL, second.metrics}
	gatewayURLs := []string{s.GatewayURL, second.url}
	// What the EndpointSlice controller would write for gatewayd's metrics Service: one slice per replica here,
	// since the two in-process replicas listen on different ports of one host.
	publishReplicas(t, c, ns, host, metricsURLs)

	model, modelPort := serveSlowModel(t, host)

	md := &gatewayv1.ModelDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "auto-v1", Namespace: ns},
		Spec: gatewayv1.ModelDeploymentSpec{ModelID: "auto", StartupTimeoutSeconds: 30,
			Source: gatewayv1.DeploymentSource{Container: &gatewayv1.ContainerSource{Image: "example.com/slow:1", Port: modelPort}},
			Autoscaling: &gatewayv1.Autoscaling{MinReplica: ptr.To[int32](0), MaxReplica: ptr.To[int32](5),
				ConcurrencyTarget: ptr.To[int32](10), ScaleDownDelaySeconds: ptr.To(int32(delay / time.Second))}},
	}
	never := &gatewayv1.ModelDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "auto-never", Namespace: ns},
		Spec: gatewayv1.ModelDeploymentSpec{ModelID: "auto", StartupTimeoutSeconds: 20,
			Source: gatewayv1.DeploymentSource{Container: &gatewayv1.ContainerSource{Image: "example.com/broken:1"}},
			Autoscaling: &gatewayv1.Autoscaling{MinReplica: ptr.To[int32](0), MaxReplica: ptr.To[int32](3),
				ScaleDownDelaySeconds: ptr.To[int32](10)}},
	}
	create(t, c, md)
	create(t, c, never)
	create(t, c, &gatewayv1.Model{ObjectMeta: metav1.ObjectMeta{Name: "auto", Namespace: ns},
		Spec: gatewayv1.ModelSpec{Environments: []gatewayv1.ModelEnvironment{{Name: "production", Deployment: md.Name}}}})

	// envtest runs no Deployment controller nor kubelet: the test reports one ready replica, and writes the
	// EndpointSlice of the model's Service pointing at the real model server, as they would.
	wl := md.WorkloadName()
	eventually(t, "the Deployment of auto-v1 at 1 replica", func() error { return expectReplicas(c, ns, wl, 1) })
	reportWorkload(t, c, ns, wl, 1)
	create(t, c, testutil.EndpointSlice(ns, wl+"-1", wl, gatewayv1.ModelPortName, modelPort, testutil.Endpoint{Addr: host, Ready: true}))
	eventually(t, "auto-v1 ACTIVE", func() error { return expectStatus(c, ns, md.Name, gatewayv1.StatusActive, "") })
	eventually(t, "the Deployment of auto-never at 1 replica", func() error { return expectReplicas(c, ns, never.WorkloadName(), 1) })

	predict := func(base string) (int, error) { return callModel(base, s.APIKey, "auto") }
	for _, u := range gatewayURLs {
		eventually(t, "a call through "+u, func() error {
			if code, err := predict(u); err != nil || code != http.StatusOK {
				return fmt.Errorf("answered %d, %v", code, err)
			}
			return nil
		})
	}

	// One round: step the shared clock by the autoscaler's interval, then run a round and return whether any
	// gatewayd replica reported calls to auto-v1 in it (read at the same instant as the round, so it is what
	// the round saw).
	step := func() (busy bool) {
		t.Helper()
		clk.Step(round)
		for _, u := range metricsURLs {
			for _, d := range readStats(t, u).Deployments {
				busy = busy || (d.DeploymentID == md.Name && d.Demand() > 0)
			}
		}
		if err := scaler.Poll(ctx); err != nil {
			t.Fatalf("autoscaler round: %v", err)
		}
		return busy
	}

	t.Log("40 calls held by the slow model, 20 through each gatewayd, with concurrencyTarget 10: 4 replicas at once")
	release := model.Hold()
	var calls sync.WaitGroup
	var failed atomic.Int64
	for i := range 40 {
		calls.Go(func() {
			if code, err := predict(gatewayURLs[i%2]); err != nil || code != http.StatusOK {
				failed.Add(1)
				t.Errorf("held call answered %d, %v", code, err)
			}
		})
	}
	eventually(t, "40 calls in progress at the model", func() error {
		if n := model.inProgress.Load(); n != 40 {
			return fmt.Errorf("%d in progress", n)
		}
		return nil
	})
	step()
	if got := annotation(t, c, ns, md.Name, autoscale.AnnotationReplicas); got != "4" {
		t.Fatalf("after one round with 40 calls in flight: decision %q, want 4", got)
	}
	eventually(t, "the Deployment at 4 replicas", func() error { return expectReplicas(c, ns, wl, 4) })
	eventually(t, "a ScaleUp Event on auto-v1", func() error {
		var events corev1.EventList
		if err := c.List(context.Background(), &events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.InvolvedObject.Name == md.Name && e.Reason == "ScaleUp" && strings.HasPrefix(e.Message, "1 → 4 replica(s)") {
				return nil
			}
		}
		return fmt.Errorf("no ScaleUp Event among %d", len(events.Items))
	})
	reportWorkload(t, c, ns, wl, 4)

	t.Log("the count stays up while the calls continue, past the scale-down delay")
	for elapsed := time.Duration(0); elapsed < delay+10*time.Second; elapsed += round {
		step()
		if got := annotation(t, c, ns, md.Name, autoscale.AnnotationReplicas); got != "4" {
			t.Fatalf("%s into 40 held calls: decision %q, want 4", elapsed, got)
		}
		expectNeverScaledDown(t, c, never)
	}
	if err := expectReplicas(c, ns, wl, 4); err != nil {
		t.Fatal(err)
	}

	t.Log("the calls end; one more call half way through the delay restarts the timer")
	release()
	calls.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d held calls failed", failed.Load())
	}
	lastBusy := clk.Now()
	extraSent := false
	for {
		now := clk.Now().Add(round)
		if !extraSent && now.Sub(lastBusy) >= delay/2 {
			if code, err := predict(gatewayURLs[1]); err != nil || code != http.StatusOK {
				t.Fatalf("the extra call answered %d, %v", code, err)
			}
			extraSent = true
		}
		if step() {
			lastBusy = clk.Now()
		}
		got := annotation(t, c, ns, md.Name, autoscale.AnnotationReplicas)
		expectNeverScaledDown(t, c, never)
		if clk.Now().Sub(lastBusy) < delay {
			if got == "0" {
				t.Fatalf("scaled to zero %s after the last call, before scaleDownDelaySeconds (%s)", clk.Now().Sub(lastBusy), delay)
			}
			continue
		}
		if got != "0" {
			t.Fatalf("%s after the last call: decision %q, want 0", clk.Now().Sub(lastBusy), got)
		}
		if !extraSent {
			t.Fatal("scaled to zero before the extra call was sent")
		}
		if annotation(t, c, ns, md.Name, gatewayv1.AnnotationScaledDownAt) == "" {
			t.Fatalf("scaled to zero without %s", gatewayv1.AnnotationScaledDownAt)
		}
		break
	}
	eventually(t, "the Deployment at 0 replicas", func() error { return expectReplicas(c, ns, wl, 0) })
	reportWorkload(t, c, ns, wl, 0)
	removeEndpoints(t, c, ns, wl+"-1")
	eventually(t, "auto-v1 SCALED_TO_ZERO and Ready", func() error {
		return expectStatus(c, ns, md.Name, gatewayv1.StatusScaledToZero, "True/ScaledToZero")
	})

	t.Log("a call at zero replicas is demand: a round wakes the deployment")
	// gatewayd holds it while the deployment wakes, and it counts as demand, in flight or as the window's peak.
	// gatewayd's own wake request is timed by its real clock, which is behind the manager's fake one here, so it
	// is the autoscaler's fallback that wakes the deployment: on demand read at least three rounds after the
	// scale-down, when gatewayd's peak can no longer hold calls from before it.
	atZero := make(chan int, 1)
	go func() {
		code, _ := predict(gatewayURLs[0])
		atZero <- code
	}()
	eventually(t, "the call at zero counted by gatewayd", func() error {
		for _, d := range readStats(t, metricsURLs[0]).Deployments {
			if d.DeploymentID == md.Name && d.Demand() > 0 {
				return nil
			}
		}
		return fmt.Errorf("no demand for %s yet", md.Name)
	})
	for range 3 {
		step()
	}
	if got := annotation(t, c, ns, md.Name, autoscale.AnnotationReplicas); got != "1" {
		t.Fatalf("after a call at zero and three rounds: decision %q, want 1", got)
	}
	if annotation(t, c, ns, md.Name, gatewayv1.AnnotationWakeRequestedAt) == "" {
		t.Fatalf("woken without %s", gatewayv1.AnnotationWakeRequestedAt)
	}
	eventually(t, "the Deployment back at 1 replica", func() error { return expectReplicas(c, ns, wl, 1) })
	eventually(t, "auto-v1 WAKING_UP", func() error { return expectStatus(c, ns, md.Name, gatewayv1.StatusWakingUp, "True/WakingUp") })
	// The replica starts (as the kubelet and the EndpointSlice controller would report), which answers a held call.
	reportWorkload(t, c, ns, wl, 1)
	eventually(t, "restoring the model's endpoint", func() error {
		sl := &discoveryv1.EndpointSlice{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: wl + "-1"}, sl); err != nil {
			return err
		}
		sl.Endpoints = testutil.EndpointSlice(ns, sl.Name, wl, gatewayv1.ModelPortName, modelPort, testutil.Endpoint{Addr: host, Ready: true}).Endpoints
		return c.Update(context.Background(), sl)
	})
	eventually(t, "auto-v1 ACTIVE again", func() error { return expectStatus(c, ns, md.Name, gatewayv1.StatusActive, "True/Active") })
	t.Logf("the call at zero answered %d", <-atZero)
	expectNeverScaledDown(t, c, never)

	t.Log("a service source scales its scaleTargetRef through the scale subresource, within its environment's autoscaling")
	byo := &slowModel{}
	bln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	bsrv := &http.Server{Handler: byo}
	go func() { _ = bsrv.Serve(bln) }()
	defer bsrv.Close()
	byoPort := int32(bln.Addr().(*net.TCPAddr).Port)
	labels := map[string]string{"app": "vllm"}
	create(t, c, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vllm"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai:v0.9.0"}}}}},
	})
	create(t, c, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vllm"},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "openai", Port: byoPort}}}})
	// The EndpointSlice controller would write this for the ready pod of vllm.
	create(t, c, testutil.EndpointSlice(ns, "vllm-1", "vllm", "openai", byoPort, testutil.Endpoint{Addr: host, Ready: true}))
	// The deployment's own autoscaling allows one replica; production's allows four at five calls each, and wins.
	create(t, c, &gatewayv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Name: "byo-v1", Namespace: ns},
		Spec: gatewayv1.ModelDeploymentSpec{ModelID: "byo", StartupTimeoutSeconds: 30,
			Source: gatewayv1.DeploymentSource{Service: &gatewayv1.ServiceSource{Name: "vllm", Port: byoPort,
				ScaleTargetRef: &gatewayv1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "vllm"}}}}})
	create(t, c, &gatewayv1.Model{ObjectMeta: metav1.ObjectMeta{Name: "byo", Namespace: ns},
		Spec: gatewayv1.ModelSpec{Environments: []gatewayv1.ModelEnvironment{{Name: "production", Deployment: "byo-v1",
			Autoscaling: &gatewayv1.Autoscaling{MaxReplica: ptr.To[int32](4), ConcurrencyTarget: ptr.To[int32](5)}}}}})
	eventually(t, "byo-v1 ACTIVE", func() error { return expectStatus(c, ns, "byo-v1", gatewayv1.StatusActive, "") })
	byoPredict := func() (int, error) { return callModel(gatewayURLs[1], s.APIKey, "byo") }
	eventually(t, "a call to byo through gatewayd", func() error {
		if code, err := byoPredict(); err != nil || code != http.StatusOK {
			return fmt.Errorf("answered %d, %v", code, err)
		}
		return nil
	})
	releaseByo := byo.Hold()
	var byoCalls sync.WaitGroup
	for range 12 {
		byoCalls.Go(func() {
			if code, err := byoPredict(); err != nil || code != http.StatusOK {
				t.Errorf("held byo call answered %d, %v", code, err)
			}
		})
	}
	eventually(t, "12 calls in progress at vllm", func() error {
		if n := byo.inProgress.Load(); n != 12 {
			return fmt.Errorf("%d in progress", n)
		}
		return nil
	})
	step()
	eventually(t, "vllm scaled to ceil(12/5) = 3 through its scale subresource", func() error { return expectReplicas(c, ns, "vllm", 3) })
	releaseByo()
	byoCalls.Wait()
}

// expectNeverScaledDown: a deployment that has never been ready keeps its one replica whatever the clock says.
func expectNeverScaledDown(t *testing.T, c client.Client, md *gatewayv1.ModelDeployment) {
	t.Helper()
	if got := annotation(t, c, md.Namespace, md.Name, gatewayv1.AnnotationScaledDownAt); got != "" {
		t.Fatalf("%s, never ready, was scaled down at %s", md.Name, got)
	}
	if err := expectReplicas(c, md.Namespace, md.WorkloadName(), 1); err != nil {
		t.Fatalf("%s, never ready: %v", md.Name, err)
	}
}

type replica struct{ url, metrics string }

func startGatewayd(ctx context.Context, t *testing.T, s *stack.Stack, host string, clk *clocktesting.FakeClock) replica {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := gatewayd.New(gatewayd.Options{RESTConfig: s.Config, Namespaces: []string{s.Namespace}, Clock: clk,
		DisableManagementAPI: true, MetricsListener: mln, UpstreamTimeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := gatewaytest.Start(ctx, g, ln, time.Minute)
	if err != nil {
		t.Fatalf("the second gatewayd never loaded its snapshot: %v", err)
	}
	t.Cleanup(stop)
	return replica{url: "http://" + ln.Addr().String(), metrics: "http://" + mln.Addr().String()}
}

// callModel makes one predict call to model's production environment through the gatewayd at base, and returns
// its status code once the answer has been read. The body suits the slow model and the stack's demo model alike.
func callModel(base, apiKey, model string) (int, error) {
	return callModelTraced(base, apiKey, model, "")
}

// callModelTraced is callModel with the caller's X-Request-Id, when requestID is not empty.
func callModelTraced(base, apiKey, model, requestID string) (int, error) {
	req, err := http.NewRequest(http.MethodPost, base+"/models/"+model+"/production/predict", strings.NewReader(`{"text":"hi"}`))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	if requestID != "" {
		req.Header.Set("X-Request-Id", requestID)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Minute}).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func readStats(t *testing.T, base string) stats.Stats {
	t.Helper()
	resp, err := http.Get(base + stats.Path)
	if err != nil {
		t.Fatalf("GET %s%s: %v", base, stats.Path, err)
	}
	defer resp.Body.Close()
	var st stats.Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("decoding %s%s: %v", base, stats.Path, err)
	}
	return st
}

func create(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), obj); err != nil {
		t.Fatalf("failed to create %T %s: %v", obj, obj.GetName(), err)
	}
}

// publishReplicas writes what the EndpointSlice controller would for gatewayd's metrics Service: one slice per
// replica, since in-process replicas listen on different ports of one host.
func publishReplicas(t *testing.T, c client.Client, ns, host string, metricsURLs []string) {
	t.Helper()
	for i, u := range metricsURLs {
		port, _ := strconv.Atoi(u[strings.LastIndex(u, ":")+1:])
		create(t, c, testutil.EndpointSlice(ns, fmt.Sprintf("%s-%d", statsService, i), statsService, stats.PortName, int32(port), testutil.Endpoint{Addr: host, Ready: true}))
	}
}

// removeEndpoints empties a slice, as the EndpointSlice controller does when the pods behind it are gone.
func removeEndpoints(t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	eventually(t, "emptying EndpointSlice "+name, func() error {
		sl := &discoveryv1.EndpointSlice{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, sl); err != nil {
			return err
		}
		sl.Endpoints = nil
		return c.Update(context.Background(), sl)
	})
}

// reportWorkload writes what the Deployment controller and kubelets would report: n replicas, all ready.
func reportWorkload(t *testing.T, c client.Client, ns, name string, n int32) {
	t.Helper()
	eventually(t, fmt.Sprintf("reporting %d ready replica(s) of %s", n, name), func() error {
		d := &appsv1.Deployment{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
			return err
		}
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, ReadyReplicas: n,
			UpdatedReplicas: n, AvailableReplicas: n}
		return c.Status().Update(context.Background(), d)
	})
}

func expectReplicas(c client.Client, ns, name string, want int32) error {
	d := &appsv1.Deployment{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
		return err
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != want {
		return fmt.Errorf("Deployment %s has replicas %v, want %d", name, ptr.Deref(d.Spec.Replicas, -1), want)
	}
	return nil
}

func expectStatus(c client.Client, ns, name string, want gatewayv1.DeploymentStatus, ready string) error {
	md := &gatewayv1.ModelDeployment{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, md); err != nil {
		return err
	}
	if md.Status.Status != want {
		return fmt.Errorf("%s is %s, want %s", name, md.Status.Status, want)
	}
	if ready != "" {
		cond := meta.FindStatusCondition(md.Status.Conditions, gatewayv1.ConditionReady)
		if cond == nil || string(cond.Status)+"/"+cond.Reason != ready {
			return fmt.Errorf("%s has Ready %+v, want %s", name, cond, ready)
		}
	}
	return nil
}

func annotation(t *testing.T, c client.Client, ns, name, key string) string {
	t.Helper()
	md := &gatewayv1.ModelDeployment{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, md); err != nil {
		t.Fatal(err)
	}
	return md.Annotations[key]
}

func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
