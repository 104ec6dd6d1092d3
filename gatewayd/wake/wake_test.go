package wake

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/test/kubetest"
)

// These tests patch real ModelDeployments on envtest's API server; no manager runs, so nothing reacts to the
// annotation: the tests read it back, and count the patches by a watch of the object and by the metric.

var k8s client.WithWatch

func TestMain(m *testing.M) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		// The pure tests still run; the ones that need the API server fail with a clear message.
		os.Exit(m.Run())
	}
	env, err := kubetest.Start(kubetest.Options{CRDs: true})
	if err != nil {
		panic(err)
	}
	if k8s, err = client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme}); err != nil {
		panic(err)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

// deployment creates namespace and a url ModelDeployment "d1" in it, and returns a watch of its modifications.
func deployment(t *testing.T) (string, watch.Interface) {
	t.Helper()
	if k8s == nil {
		t.Fatal("KUBEBUILDER_ASSETS is not set: this test needs envtest binaries (make envtest)")
	}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "wake-"}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	md := &gatewayv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "d1"},
		Spec: gatewayv1.ModelDeploymentSpec{ModelID: "m", Source: gatewayv1.DeploymentSource{URL: "http://model.example"}}}
	if err := k8s.Create(ctx, md); err != nil {
		t.Fatal(err)
	}
	w, err := k8s.Watch(ctx, &gatewayv1.ModelDeploymentList{}, client.InNamespace(ns.Name),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: md.ResourceVersion}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return ns.Name, w
}

// modifications drains the watch until it has been quiet for a while and returns the MODIFIED events seen.
func modifications(w watch.Interface) int {
	n := 0
	for {
		select {
		case ev := <-w.ResultChan():
			if ev.Type == watch.Modified {
				n++
			}
		case <-time.After(500 * time.Millisecond):
			return n
		}
	}
}

func annotation(t *testing.T, ns string) string {
	t.Helper()
	md := &gatewayv1.ModelDeployment{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "d1"}, md); err != nil {
		t.Fatal(err)
	}
	return md.Annotations[gatewayv1.AnnotationWakeRequestedAt]
}

func newWaker(t *testing.T, clk *clocktesting.FakeClock, addrs Addresses) (*Waker, *Metrics) {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	w := New(Options{Client: k8s, Addresses: addrs, Metrics: m, Clock: clk, MinInterval: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go w.Run(ctx)
	return w, m
}

// TestWakeCoalesces: 50 concurrent wakes of one deployment make one patch, stamped with the clock's time; a
// wake within MinInterval makes none; one after it makes a second.
func TestWakeCoalesces(t *testing.T) {
	ns, watcher := deployment(t)
	t0 := time.Date(2026, 3, 16, 10, 0, 0, 123456789, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	w, m := newWaker(t, clk, nil)
	target := Target{Namespace: ns, Deployment: "d1", Model: "m"}

	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- w.Wake(context.Background(), target)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Wake = %v, want nil", err)
		}
	}
	if got, want := annotation(t, ns), t0.Format(time.RFC3339Nano); got != want {
		t.Fatalf("annotation = %q, want %q", got, want)
	}
	if n := modifications(watcher); n != 1 {
		t.Fatalf("50 concurrent wakes modified the ModelDeployment %d times, want 1", n)
	}
	if n := testutil.ToFloat64(m.requests.WithLabelValues(ns, "m", "ok")); n != 1 {
		t.Fatalf("modelgate_model_wake_requests_total = %v, want 1", n)
	}

	clk.Step(59 * time.Second)
	if err := w.Wake(context.Background(), target); err != nil {
		t.Fatal(err)
	}
	if n := modifications(watcher); n != 0 {
		t.Fatalf("a wake within MinInterval modified the ModelDeployment %d times, want 0", n)
	}

	clk.Step(time.Second)
	if err := w.Wake(context.Background(), target); err != nil {
		t.Fatal(err)
	}
	if got, want := annotation(t, ns), t0.Add(time.Minute).Format(time.RFC3339Nano); got != want {
		t.Fatalf("annotation after MinInterval = %q, want %q", got, want)
	}
	if n := testutil.ToFloat64(m.requests.WithLabelValues(ns, "m", "ok")); n != 2 {
		t.Fatalf("modelgate_model_wake_requests_total = %v after MinInterval, want 2", n)
	}
}

// TestWakeMissingDeployment: a patch of a ModelDeployment that does not exist fails, is counted as an error,
// and its error is what callers within MinInterval get, without a second patch.
func TestWakeMissingDeployment(t *testing.T) {
	ns, _ := deployment(t)
	clk := clocktesting.NewFakeClock(time.Now())
	w, m := newWaker(t, clk, nil)
	target := Target{Namespace: ns, Deployment: "gone", Model: "m"}
	for range 3 {
		if err := w.Wake(context.Background(), target); err == nil {
			t.Fatal("Wake of a missing ModelDeployment = nil, want an error")
		}
	}
	if n := testutil.ToFloat64(m.requests.WithLabelValues(ns, "m", "error")); n != 1 {
		t.Fatalf("failed wake requests = %v, want 1 (the others reuse its result)", n)
	}
}

// addresses is a Service whose readiness the test sets.
type addresses struct {
	mu      sync.Mutex
	ready   bool
	changed chan struct{}
}

func newAddresses() *addresses { return &addresses{changed: make(chan struct{})} }

func (a *addresses) Ready(_, _, _ string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ready {
		return 1
	}
	return 0
}

func (a *addresses) WaitReady(ctx context.Context, _, _, _ string) error {
	for {
		a.mu.Lock()
		ready, changed := a.ready, a.changed
		a.mu.Unlock()
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

func (a *addresses) set(ready bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ready = ready
	close(a.changed)
	a.changed = make(chan struct{})
}

// TestColdStartClock: the clock runs from the first wake to the first ready address, once however many wakes
// come between, and not at all for a wake of a deployment that has an address already.
func TestColdStartClock(t *testing.T) {
	ns, _ := deployment(t)
	clk := clocktesting.NewFakeClock(time.Now())
	addrs := newAddresses()
	w, m := newWaker(t, clk, addrs)
	target := Target{Namespace: ns, Deployment: "d1", Model: "m", Service: "svc"}
	hist := func() (uint64, float64) {
		h := &dtoHistogram{}
		h.read(t, m.coldStart.WithLabelValues(ns, "m"))
		return h.count, h.sum
	}

	if err := w.Wake(context.Background(), target); err != nil {
		t.Fatal(err)
	}
	clk.Step(7 * time.Second)
	if err := w.Wake(context.Background(), target); err != nil {
		t.Fatal(err)
	}
	clk.Step(5 * time.Second)
	addrs.set(true)
	deadline := time.Now().Add(10 * time.Second)
	for n, _ := hist(); n == 0; n, _ = hist() {
		if time.Now().After(deadline) {
			t.Fatal("no cold start observed after the address became ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n, sum := hist(); n != 1 || sum != 12 {
		t.Fatalf("cold starts: %d observations summing %vs, want 1 of 12s (first wake to ready)", n, sum)
	}

	// Ready now: a wake is no cold start.
	clk.Step(time.Hour)
	if err := w.Wake(context.Background(), target); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	running := w.entries[key{ns, "d1"}].clock
	w.mu.Unlock()
	if running {
		t.Fatal("a wake of a deployment with a ready address started the cold-start clock")
	}
	if n, _ := hist(); n != 1 {
		t.Fatalf("cold starts after waking a ready deployment = %d, want still 1", n)
	}
}

// dtoHistogram reads a histogram's count and sum.
type dtoHistogram struct {
	count uint64
	sum   float64
}

func (h *dtoHistogram) read(t *testing.T, o prometheus.Observer) {
	t.Helper()
	var m dto.Metric
	if err := o.(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	h.count, h.sum = m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}
