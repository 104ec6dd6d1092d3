package autoscale_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers"
	"github.com/modelgate/modelgate/controllers/autoscale"
)

// TestAutoscalerTimersOnGatewaydProcesses: the manager (its ModelDeployment reconciler and its autoscaler
// runnable) runs on a fake clock and reads two gatewayd processes. Each step of the clock by the autoscaler's
// interval fires the runnable's ticker; the test waits for that round to end (Autoscaler.Rounds) before it looks.
//
// The manager knows of a call only from a round that reads it in flight or as a process's recent peak. The
// processes time their peak window with their own real clock, so the test never lets a round race a window: a
// call whose end a round must see is held by the model until the round has run, and after calls end the test
// waits until both processes report no demand before the next step. The last round that saw a call is then
// exactly known, and so is the instant the scale-down delay after it ends.
//
// It shows: 40 calls (20 through each process) at concurrencyTarget 10 scale to 4 and stay there while they
// continue, past the delay; after they end the count holds up to just before the delay; one call half way
// through restarts the timer (at the original deadline the deployment goes down only to the one replica that
// call needed); scale to zero comes exactly scaleDownDelaySeconds after that last call. Meanwhile a deployment
// that has never been ready is never scaled down, even a day later, and one that has been ready is not scaled
// down within startupTimeoutSeconds of its deploy, though idle past its delay, and is at the first round after.
func TestAutoscalerTimersOnGatewaydProcesses(t *testing.T) {
	ctrl.SetLogger(logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Whole seconds: the API server keeps metav1.Time (deployingSince) to the second.
	clk := clocktesting.NewFakeClock(time.Now().Truncate(time.Second))
	rounds := make(chan error)
	p := startProcesses(ctx, t, controllers.Options{Clock: clk, Autoscaler: &autoscale.Autoscaler{Clock: clk, Rounds: rounds}})
	c, ns := p.Client, p.Namespace

	model, modelPort := serveSlowModel(t, p.host)
	md := &gatewayv1.ModelDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "proc-v1", Namespace: ns},
		Spec: gatewayv1.ModelDeploymentSpec{ModelID: "proc", StartupTimeoutSeconds: 30,
			Source: gatewayv1.DeploymentSource{Container: &gatewayv1.ContainerSource{Image: "example.com/slow:1", Port: modelPort}},
			Autoscaling: &gatewayv1.Autoscaling{MinReplica: ptr.To[int32](0), MaxReplica: ptr.To[int32](5),
				ConcurrencyTarget: ptr.To[int32](10), ScaleDownDelaySeconds: ptr.To(int32(delay / time.Second))}},
	}
	// Never reported ready: no ready replica, no readySince.
	never := &gatewayv1.ModelDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "proc-never", Namespace: ns},
		Spec: gatewayv1.ModelDeploymentSpec{ModelID: "proc", StartupTimeoutSeconds: 20,
			Source: gatewayv1.DeploymentSource{Container: &gatewayv1.ContainerSource{Image: "example.com/broken:1"}},
			Autoscaling: &gatewayv1.Autoscaling{MinReplica: ptr.To[int32](0), MaxReplica: ptr.To[int32](3),
				ScaleDownDelaySeconds: ptr.To[int32](10)}},
	}
	// Ready once and never called: idle past its delay long before its startup window ends.
	starting := &gatewayv1.ModelDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "proc-starting", Namespace: ns},
		Spec: gatewayv1.ModelDeploymentSpec{ModelID: "proc", StartupTimeoutSeconds: 120,
			Source: gatewayv1.DeploymentSource{Container: &gatewayv1.ContainerSource{Image: "example.com/slow:1", Port: modelPort}},
			Autoscaling: &gatewayv1.Autoscaling{MinReplica: ptr.To[int32](0), MaxReplica: ptr.To[int32](1),
				ScaleDownDelaySeconds: ptr.To[int32](10)}},
	}
	create(t, c, never)
	create(t, c, starting)
	p.serve(t, md, modelPort)
	wl := md.WorkloadName()
	eventually(t, "the Deployment of proc-never at 1 replica", func() error { return expectReplicas(c, ns, never.WorkloadName(), 1) })
	eventually(t, "the Deployment of proc-starting at 1 replica", func() error { return expectReplicas(c, ns, starting.WorkloadName(), 1) })
	reportWorkload(t, c, ns, starting.WorkloadName(), 1)
	var startupEnds time.Time
	eventually(t, "proc-starting ready once", func() error {
		got := &gatewayv1.ModelDeployment{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(starting), got); err != nil {
			return err
		}
		if got.Status.ReadySince == nil || got.Status.DeployingSince == nil {
			return fmt.Errorf("readySince %v, deployingSince %v", got.Status.ReadySince, got.Status.DeployingSince)
		}
		startupEnds = got.Status.DeployingSince.Add(time.Duration(starting.Spec.StartupTimeoutSeconds) * time.Second)
		return nil
	})

	// The runnable's ticker is the fake clock's only waiter (the reconcilers only read the clock): once it
	// exists, every step by the interval fires it once.
	eventually(t, "the autoscaler's ticker on the fake clock", func() error {
		if !clk.HasWaiters() {
			return fmt.Errorf("not started")
		}
		return nil
	})
	decision := func(name string) string { return annotation(t, c, ns, name, autoscale.AnnotationReplicas) }
	scaledDownAt := func(name string) string { return annotation(t, c, ns, name, gatewayv1.AnnotationScaledDownAt) }
	startingDown := false
	// step moves the clock by d, waits for the round the step fires, and checks the two guarded deployments.
	step := func(d time.Duration) {
		t.Helper()
		clk.Step(d)
		select {
		case err := <-rounds:
			if err != nil {
				t.Fatalf("autoscaler round at %s: %v", clk.Now().Format(time.RFC3339), err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("no autoscaler round after a step of the clock to %s", clk.Now().Format(time.RFC3339))
		}
		expectNeverScaledDown(t, c, never)
		switch now, got := clk.Now(), decision(starting.Name); {
		case now.Before(startupEnds):
			if got == "0" || scaledDownAt(starting.Name) != "" {
				t.Fatalf("proc-starting scaled down %s before the end of its startup window", startupEnds.Sub(now))
			}
		case got != "0":
			t.Fatalf("proc-starting %s after its startup window ended: decision %q, want 0", now.Sub(startupEnds), got)
		default:
			startingDown = true
		}
	}
	tick := func() { t.Helper(); step(round) }
	// noDemand waits until neither process reports demand for md: no call in flight, no peak in either window.
	noDemand := func() {
		t.Helper()
		eventually(t, "no demand for proc-v1 at either process", func() error {
			if n := p.demand(t, md.Name); n != 0 {
				return fmt.Errorf("demand %d", n)
			}
			return nil
		})
	}
	tick()

	t.Log("40 calls held by the model, 20 through each process, at concurrencyTarget 10: 4 replicas")
	release := model.Hold()
	var calls sync.WaitGroup
	codes := make(chan int, 41)
	for i := range 40 {
		calls.Go(func() {
			code, err := p.call(i % 2)
			if err != nil {
				t.Errorf("call %d: %v", i, err)
			}
			codes <- code
		})
	}
	eventually(t, "40 calls in flight at the processes", func() error {
		if n := model.inProgress.Load(); n != 40 {
			return fmt.Errorf("%d at the model", n)
		}
		for i, u := range p.metricsURLs {
			var in int64
			for _, d := range readStats(t, u).Deployments {
				if d.DeploymentID == md.Name {
					in += d.InFlight
				}
			}
			if in != 20 {
				return fmt.Errorf("process %d has %d in flight", i, in)
			}
		}
		return nil
	})
	tick()
	if got := decision(md.Name); got != "4" {
		t.Fatalf("after a round with 40 calls in flight: decision %q, want 4", got)
	}
	eventually(t, "the Deployment of proc-v1 at 4 replicas", func() error { return expectReplicas(c, ns, wl, 4) })
	reportWorkload(t, c, ns, wl, 4)

	t.Log("the count stays up while the calls continue, past the scale-down delay")
	for start := clk.Now(); clk.Now().Sub(start) < delay+10*time.Second; {
		tick()
		if got := decision(md.Name); got != "4" {
			t.Fatalf("%s into 40 calls in flight: decision %q, want 4", clk.Now().Sub(start), got)
		}
	}
	lastCall := clk.Now()
	release()
	calls.Wait()
	noDemand()

	t.Log("the calls end: up to half the delay, the count stays")
	for clk.Now().Sub(lastCall) < delay/2 {
		tick()
		if got := decision(md.Name); got != "4" {
			t.Fatalf("%s after the last call: decision %q, want 4", clk.Now().Sub(lastCall), got)
		}
	}

	t.Log("one call half way through the delay restarts the timer")
	releaseOne := model.Hold()
	calls.Go(func() {
		code, err := p.call(1)
		if err != nil {
			t.Errorf("the call half way: %v", err)
		}
		codes <- code
	})
	eventually(t, "the call half way in flight at process 1", func() error {
		if n := p.demand(t, md.Name); n != 1 || model.inProgress.Load() != 1 {
			return fmt.Errorf("demand %d, %d at the model", n, model.inProgress.Load())
		}
		return nil
	})
	tick()
	restart := clk.Now()
	releaseOne()
	calls.Wait()
	close(codes)
	for code := range codes {
		if code != http.StatusOK {
			t.Errorf("a call answered %d, want 200", code)
		}
	}
	noDemand()
	if got := decision(md.Name); got != "4" {
		t.Fatalf("at the call half way: decision %q, want 4", got)
	}

	t.Log("just before the delay after the 40 calls the count stays; at it, it drops only to what the last call needed")
	for clk.Now().Sub(lastCall) < delay-round {
		tick()
		if got := decision(md.Name); got != "4" {
			t.Fatalf("%s after the 40 calls: decision %q, want 4", clk.Now().Sub(lastCall), got)
		}
	}
	if got := decision(md.Name); got != "4" {
		t.Fatalf("%s after the 40 calls, just before the delay: decision %q, want 4", clk.Now().Sub(lastCall), got)
	}
	tick()
	if clk.Now().Sub(lastCall) != delay {
		t.Fatalf("the clock is %s after the 40 calls, want %s", clk.Now().Sub(lastCall), delay)
	}
	if got := decision(md.Name); got != "1" {
		t.Fatalf("at the delay after the 40 calls, %s after the call half way: decision %q, want 1", clk.Now().Sub(restart), got)
	}
	if got := scaledDownAt(md.Name); got != "" {
		t.Fatalf("scaled to zero at %s, within the delay of the call half way", got)
	}
	eventually(t, "the Deployment of proc-v1 at 1 replica", func() error { return expectReplicas(c, ns, wl, 1) })

	t.Log("to zero exactly the delay after the last call")
	for clk.Now().Sub(restart) < delay-round {
		tick()
		if got := decision(md.Name); got != "1" {
			t.Fatalf("%s after the last call: decision %q, want 1", clk.Now().Sub(restart), got)
		}
	}
	tick()
	if got := decision(md.Name); got != "0" {
		t.Fatalf("%s after the last call: decision %q, want 0", clk.Now().Sub(restart), got)
	}
	if got, want := scaledDownAt(md.Name), clk.Now().UTC().Format(time.RFC3339Nano); got != want {
		t.Fatalf("%s is %q, want %q", gatewayv1.AnnotationScaledDownAt, got, want)
	}
	eventually(t, "the Deployment of proc-v1 at 0 replicas", func() error { return expectReplicas(c, ns, wl, 0) })
	if !startingDown {
		t.Fatalf("proc-starting's startup window (until %s) did not end during the test (clock at %s)",
			startupEnds.Format(time.RFC3339), clk.Now().Format(time.RFC3339))
	}

	t.Log("a day later, the deployment that was never ready still runs its replica")
	for range 24 {
		step(time.Hour)
	}
	if got := decision(md.Name); got != "0" {
		t.Fatalf("a day after scaling to zero: decision %q, want 0", got)
	}
}
