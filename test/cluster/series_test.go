package cluster_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/test/cluster"
	"github.com/modelgate/modelgate/test/testutil"
)

// The figures on real pods (docs/benchmarks.md, "The real cluster"): a pool of container deployments, each woken
// from zero once, so that the series is not held up by a deployment's startup window; the predict overhead
// through gatewayd against calling the pod directly; and async enqueue to dispatch on an idle ACTIVE model.
const (
	wakeModel = "wakes"
	// wakes is the pool's size, and the series' length.
	wakes = 10
)

func wakeDeployment(i int) string { return fmt.Sprintf("wake-%d", i) }

// wakePhases is one wake from zero, each instant as this client first saw it: the call sent, the Deployment's
// replicas raised, the pod bound to the node, its container running, the pod Ready, a ready address in the
// Service's EndpointSlice, and the answer.
type wakePhases struct {
	sent, scaled, scheduled, started, ready, address, answered time.Time
}

// phase is one step of a wake: its name and how long it took in a wake.
type phase struct {
	name string
	of   func(w wakePhases) time.Duration
}

var wakeSteps = []phase{
	{"call sent → replicas raised", func(w wakePhases) time.Duration { return w.scaled.Sub(w.sent) }},
	{"replicas raised → pod scheduled", func(w wakePhases) time.Duration { return w.scheduled.Sub(w.scaled) }},
	{"pod scheduled → container started", func(w wakePhases) time.Duration { return w.started.Sub(w.scheduled) }},
	{"container started → pod Ready", func(w wakePhases) time.Duration { return w.ready.Sub(w.started) }},
	{"pod Ready → address ready in the EndpointSlice", func(w wakePhases) time.Duration { return w.address.Sub(w.ready) }},
	{"address ready → answer (gatewayd's share)", func(w wakePhases) time.Duration { return w.answered.Sub(w.address) }},
	{"call sent → answer (the whole cold start)", func(w wakePhases) time.Duration { return w.answered.Sub(w.sent) }},
}

// wakeWatch records, per deployment of the pool, the first time this client sees each step of a wake, from
// watches on the pool's Deployments, pods and EndpointSlices. Only deployments armed by arm are recorded, so
// what happened before a wake (the first deploy, the scale-down) is left out.
type wakeWatch struct {
	mu     sync.Mutex
	armed  map[string]*wakePhases
	stopFn []func()
}

func (tr *tour) watchWakes(t *testing.T) *wakeWatch {
	t.Helper()
	ww := &wakeWatch{armed: map[string]*wakePhases{}}
	ns := cluster.WorkspaceNamespace
	selector := metav1.ListOptions{LabelSelector: gatewayv1.LabelModel + "=" + wakeModel}
	deps, err := tr.c.Kube.AppsV1().Deployments(ns).Watch(tr.ctx, selector)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := tr.c.Kube.CoreV1().Pods(ns).Watch(tr.ctx, selector)
	if err != nil {
		t.Fatal(err)
	}
	slices, err := tr.c.Kube.DiscoveryV1().EndpointSlices(ns).Watch(tr.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []watch.Interface{deps, pods, slices} {
		ww.stopFn = append(ww.stopFn, w.Stop)
		go func() {
			for ev := range w.ResultChan() {
				ww.observe(ev.Object, time.Now())
			}
		}()
	}
	t.Cleanup(ww.stop)
	return ww
}

func (ww *wakeWatch) stop() {
	for _, f := range ww.stopFn {
		f()
	}
}

// arm starts recording the wake of deployment, sent now.
func (ww *wakeWatch) arm(deployment string, sent time.Time) {
	ww.mu.Lock()
	defer ww.mu.Unlock()
	ww.armed[deployment] = &wakePhases{sent: sent}
}

func (ww *wakeWatch) observe(o any, now time.Time) {
	ww.mu.Lock()
	defer ww.mu.Unlock()
	first := func(at *time.Time, happened bool) {
		if happened && at.IsZero() {
			*at = now
		}
	}
	switch o := o.(type) {
	case *appsv1.Deployment:
		if w := ww.armed[strings.TrimPrefix(o.Name, "md-")]; w != nil {
			first(&w.scaled, o.Spec.Replicas != nil && *o.Spec.Replicas > 0)
		}
	case *corev1.Pod:
		w := ww.armed[o.Labels["gateway.modelgate.io/deployment"]]
		if w == nil || o.DeletionTimestamp != nil {
			return
		}
		first(&w.scheduled, o.Spec.NodeName != "")
		for _, c := range o.Status.ContainerStatuses {
			first(&w.started, c.State.Running != nil)
		}
		for _, c := range o.Status.Conditions {
			first(&w.ready, c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
		}
	case *discoveryv1.EndpointSlice:
		w := ww.armed[strings.TrimPrefix(o.Labels[discoveryv1.LabelServiceName], "md-")]
		if w == nil {
			return
		}
		for _, e := range o.Endpoints {
			first(&w.address, e.Conditions.Ready != nil && *e.Conditions.Ready)
		}
	}
}

// phases answers the recorded wake of deployment, answered at answered.
func (ww *wakeWatch) phases(deployment string, answered time.Time) (wakePhases, error) {
	ww.mu.Lock()
	defer ww.mu.Unlock()
	w := ww.armed[deployment]
	if w == nil {
		return wakePhases{}, fmt.Errorf("%s was never armed", deployment)
	}
	w.answered = answered
	for name, at := range map[string]time.Time{"replicas raised": w.scaled, "scheduled": w.scheduled,
		"started": w.started, "Ready": w.ready, "ready address": w.address} {
		if at.IsZero() {
			return *w, fmt.Errorf("the watches never saw %s's pod %s", deployment, name)
		}
	}
	return *w, nil
}

// figuresOnRealPods runs the three series and logs their figures.
func (tr *tour) figuresOnRealPods(t *testing.T) {
	awake := tr.wakeSeries(t)
	tr.overheadAgainstThePod(t, awake)
	tr.asyncDispatch(t)
}

// wakeSeries deploys the pool, lets every deployment scale to zero, then wakes each in turn with one call, and
// logs each step's p50 and p99 over the wakes. It answers the last deployment woken, which is awake.
func (tr *tour) wakeSeries(t *testing.T) string {
	ns := cluster.WorkspaceNamespace
	model := &gatewayv1.Model{ObjectMeta: metav1.ObjectMeta{Name: wakeModel, Namespace: ns},
		Spec: gatewayv1.ModelSpec{Environments: []gatewayv1.ModelEnvironment{
			{Name: gatewayv1.EnvironmentProduction, Deployment: wakeDeployment(0)}}}}
	objects := []client.Object{model}
	for i := range wakes {
		objects = append(objects, &gatewayv1.ModelDeployment{
			ObjectMeta: metav1.ObjectMeta{Name: wakeDeployment(i), Namespace: ns},
			Spec: gatewayv1.ModelDeploymentSpec{
				ModelID: wakeModel,
				Source: gatewayv1.DeploymentSource{Container: &gatewayv1.ContainerSource{
					Image: cluster.DemoModelImage, Args: []string{"--name=" + wakeDeployment(i)}, Port: 8080}},
				Autoscaling: &gatewayv1.Autoscaling{
					MinReplica: ptr.To[int32](0), MaxReplica: ptr.To[int32](1),
					ConcurrencyTarget: ptr.To[int32](4), ScaleDownDelaySeconds: ptr.To[int32](containerIdle),
				},
				StartupTimeoutSeconds: 120,
			},
		})
	}
	tr.createAll(t, objects...)
	for i := range wakes {
		tr.waitStatus(t, "/v1/models/"+wakeModel+"/deployments/"+wakeDeployment(i), 4*time.Minute, "ACTIVE")
	}
	for i := range wakes {
		tr.waitStatus(t, "/v1/models/"+wakeModel+"/deployments/"+wakeDeployment(i), 3*time.Minute, "SCALED_TO_ZERO")
	}
	eventually(t, 2*time.Minute, "no pod of the pool left", func() error {
		list := &corev1.PodList{}
		if err := tr.p.Client.List(tr.ctx, list, client.InNamespace(ns), client.MatchingLabels{gatewayv1.LabelModel: wakeModel}); err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("%d pods left", len(list.Items))
		}
		return nil
	})

	ww := tr.watchWakes(t)
	series := make([]wakePhases, 0, wakes)
	for i := range wakes {
		dep := wakeDeployment(i)
		sent := time.Now()
		ww.arm(dep, sent)
		a := tr.admin(t, http.MethodPost, "/models/"+wakeModel+"/deployment/"+dep+"/predict", map[string]any{"text": "wake"})
		answered := time.Now()
		if a.code != http.StatusOK || a.body["deployment"] != dep {
			t.Fatalf("the call that woke %s: %s", dep, a)
		}
		var w wakePhases
		eventually(t, 10*time.Second, "every step of "+dep+"'s wake seen", func() (err error) {
			w, err = ww.phases(dep, answered)
			return err
		})
		series = append(series, w)
	}
	ww.stop()
	var lines []string
	for _, step := range wakeSteps {
		ds := make([]time.Duration, len(series))
		for i, w := range series {
			ds[i] = step.of(w)
		}
		lines = append(lines, fmt.Sprintf("  %-48s p50 %8s  p99 %8s", step.name,
			testutil.Percentile(ds, .5).Round(time.Millisecond), testutil.Percentile(ds, .99).Round(time.Millisecond)))
	}
	t.Logf("figure: a cold start split, over %d wakes from zero (one call each):\n%s", len(series), strings.Join(lines, "\n"))
	return wakeDeployment(wakes - 1)
}

// overheadAgainstThePod calls the awake deployment's pod directly and through gatewayd, alternating, one call at
// a time, and logs both latencies and their ratio.
func (tr *tour) overheadAgainstThePod(t *testing.T, deployment string) {
	list := &corev1.PodList{}
	if err := tr.p.Client.List(tr.ctx, list, client.InNamespace(cluster.WorkspaceNamespace),
		client.MatchingLabels{"gateway.modelgate.io/deployment": deployment}); err != nil || len(list.Items) != 1 || list.Items[0].Status.PodIP == "" {
		t.Fatalf("the pod of %s: %v (%d pods)", deployment, err, len(list.Items))
	}
	direct := "http://" + net.JoinHostPort(list.Items[0].Status.PodIP, "8080") + "/predict"
	through := tr.p.GatewayURL + "/models/" + wakeModel + "/deployment/" + deployment + "/predict"
	body := `{"text":"I love it"}`
	call := func(url string) time.Duration {
		req, _ := http.NewRequestWithContext(tr.ctx, http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tr.p.APIKey)
		start := time.Now()
		resp, err := tr.p.HTTP.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		a := answer{code: resp.StatusCode}
		a.raw, _ = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		took := time.Since(start)
		if a.code != http.StatusOK || !strings.Contains(string(a.raw), "positive") {
			t.Fatalf("%s: %s", url, a)
		}
		return took
	}
	call(direct) // the first call of each opens its connection
	call(through)
	const n = 300
	var d, g []time.Duration
	for range n {
		d = append(d, call(direct))
		g = append(g, call(through))
	}
	dp50, gp50 := testutil.Percentile(d, .5), testutil.Percentile(g, .5)
	dp99, gp99 := testutil.Percentile(d, .99), testutil.Percentile(g, .99)
	t.Logf("figure: predict on a real pod, %d calls each, one at a time, alternating: directly p50 %s p99 %s; through gatewayd's Service p50 %s p99 %s; ratio p50 %.2f, added p50 %s",
		n, dp50.Round(time.Microsecond), dp99.Round(time.Microsecond), gp50.Round(time.Microsecond), gp99.Round(time.Microsecond),
		float64(gp50)/float64(dp50), (gp50 - dp50).Round(time.Microsecond))
}

// asyncDispatch queues async requests one at a time on an idle ACTIVE url model whose upstream is this client,
// and logs the time from sending async_predict to the model receiving the request.
func (tr *tour) asyncDispatch(t *testing.T) {
	type arrival struct {
		id string
		at time.Time
	}
	arrived := make(chan arrival, 16)
	tr.serveURLModel(t, "dispatch", func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/predict" {
				arrived <- arrival{r.Header.Get("X-Request-Id"), time.Now()}
			}
			next.ServeHTTP(w, r)
		})
	})
	eventually(t, time.Minute, "the model's predict route served", func() error {
		if a := tr.admin(t, http.MethodPost, "/models/dispatch/production/predict", map[string]any{"text": "ready"}); a.code != http.StatusOK {
			return fmt.Errorf("%s", a)
		}
		<-arrived
		return nil
	})

	const n = 100
	var ds []time.Duration
	for range n {
		sent := time.Now()
		a := tr.admin(t, http.MethodPost, "/models/dispatch/production/async_predict", map[string]any{"model_input": map[string]any{"text": "queued"}})
		if a.code != http.StatusCreated {
			t.Fatalf("async_predict: %s", a)
		}
		id, _ := a.body["request_id"].(string)
		select {
		case got := <-arrived:
			if got.id != id {
				t.Fatalf("the model received request %q, want %q", got.id, id)
			}
			ds = append(ds, got.at.Sub(sent))
		case <-time.After(30 * time.Second):
			t.Fatalf("async request %s never reached the model", id)
		}
	}
	t.Logf("figure: async on an idle ACTIVE model, %d requests one at a time: async_predict sent → the model receives it p50 %s p99 %s",
		n, testutil.Percentile(ds, .5).Round(time.Microsecond), testutil.Percentile(ds, .99).Round(time.Microsecond))
}
