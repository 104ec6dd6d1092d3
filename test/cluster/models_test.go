package cluster_test

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/test/cluster"
	"github.com/modelgate/modelgate/test/stack"
)

// The container model of the README tour, on real pods: the demo model server's image run by the manager as a
// Deployment and a Service, reached through the EndpointSlices the real EndpointSlice controller writes.
const (
	containerModel      = "demo-container"
	containerDeployment = "demo-container-v1"
	// containerIdle is the deployment's scaleDownDelaySeconds: short, so the suite sees it scale to zero.
	containerIdle = 10
)

// containerModelLife walks a container model's whole life: deploy (DEPLOYING, then ACTIVE with a Ready pod),
// predict, the pod's own lines in the logs route, scale to zero when idle, a wake by concurrent calls that are
// all held and answered, scale-out under load to two Ready pods that both serve calls, and deactivate.
func (tr *tour) containerModelLife(t *testing.T) {
	ns := cluster.WorkspaceNamespace
	md := &gatewayv1.ModelDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: containerDeployment, Namespace: ns},
		Spec: gatewayv1.ModelDeploymentSpec{
			ModelID: containerModel,
			Source: gatewayv1.DeploymentSource{Container: &gatewayv1.ContainerSource{
				Image: cluster.DemoModelImage,
				Args:  []string{"--name=" + containerDeployment},
				Port:  8080,
			}},
			Autoscaling: &gatewayv1.Autoscaling{
				MinReplica: ptr.To[int32](0), MaxReplica: ptr.To[int32](2),
				ConcurrencyTarget: ptr.To[int32](2), ScaleDownDelaySeconds: ptr.To[int32](containerIdle),
			},
			StartupTimeoutSeconds: 120,
		},
	}
	model := &gatewayv1.Model{
		ObjectMeta: metav1.ObjectMeta{Name: containerModel, Namespace: ns},
		Spec: gatewayv1.ModelSpec{Environments: []gatewayv1.ModelEnvironment{
			{Name: gatewayv1.EnvironmentProduction, Deployment: containerDeployment}}},
	}
	for _, o := range []client.Object{md, model} {
		if err := tr.p.Client.Create(tr.ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	base := "/models/" + containerModel + "/production/predict"
	depPath := "/v1/models/" + containerModel + "/deployments/" + containerDeployment

	// Deploy: DEPLOYING while the pod starts, then ACTIVE once the manager sees it Ready.
	tr.waitStatus(t, depPath, 3*time.Minute, "ACTIVE")
	pods := tr.readyPods(t)
	if len(pods) != 1 {
		t.Fatalf("ACTIVE with %d Ready pods, want 1", len(pods))
	}

	// Predict through gatewayd's Service, to the pod's address from the EndpointSlice.
	r := tr.admin(t, http.MethodPost, base, map[string]any{"text": "I love it"})
	if r.code != http.StatusOK || r.body["deployment"] != containerDeployment || r.body["label"] != "positive" {
		t.Fatalf("predict: %s", r)
	}

	// The logs route reads the pod's own lines (pods/log), named by the pod.
	eventually(t, 30*time.Second, "the pod's lines in the logs route", func() error {
		l := tr.admin(t, http.MethodPost, depPath+"/logs", map[string]any{"search_pattern": "Serving the demo model"})
		if l.code != http.StatusOK || !strings.Contains(string(l.raw), pods[0]) {
			return fmt.Errorf("%s", l)
		}
		return nil
	})

	// Idle: scaled to zero after scaleDownDelaySeconds, its pod gone.
	tr.waitStatus(t, depPath, 2*time.Minute, "SCALED_TO_ZERO")
	eventually(t, time.Minute, "no pod left", func() error {
		if p := tr.pods(t); len(p) > 0 {
			return fmt.Errorf("pods %v", p)
		}
		return nil
	})

	// Wake: calls arriving at zero are held while a pod starts, and every one is answered. gatewayd's share is the
	// last answer's arrival after this client saw the pod's address turn ready in the Service's EndpointSlice (the
	// demo model answers at once): an upper bound, since it includes the watch's delivery to gatewayd.
	const held = 4
	readySeen := tr.watchReadyAddress(t)
	start := time.Now()
	answers := tr.concurrentPredicts(t, base, held, map[string]any{"text": "held"})
	answered := time.Now()
	for i, a := range answers {
		if a.code != http.StatusOK || a.body["deployment"] != containerDeployment {
			t.Fatalf("held call %d: %s", i, a)
		}
	}
	var seen time.Time
	select {
	case seen = <-readySeen:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch never saw a ready address")
	}
	t.Logf("figure: %d calls held at zero replicas, all answered; wake to last answer %s, of which after the ready address was seen %s",
		held, answered.Sub(start).Round(time.Millisecond), answered.Sub(seen).Round(time.Millisecond))

	// Scale out: more calls in flight than concurrencyTarget for one replica brings a second Ready pod, and
	// gatewayd spreads calls over both.
	served := map[string]bool{}
	eventually(t, 3*time.Minute, "two Ready pods serving calls", func() error {
		for _, a := range tr.concurrentPredicts(t, base, 8, map[string]any{"text": "load", "delay_ms": 1500, "report_host": true}) {
			if a.code != http.StatusOK {
				return fmt.Errorf("a call under load: %s", a)
			}
			host, _ := a.body["host"].(string)
			served[host] = true
		}
		if n := len(tr.readyPods(t)); n < 2 || len(served) < 2 {
			return fmt.Errorf("%d Ready pods, calls served by %v", n, served)
		}
		return nil
	})

	// A fault: every pod killed while calls are in flight. Each of those calls ends at once with 502
	// model_unavailable (never a hang, never a 2xx), and the next calls reach the replacements.
	inflight := make(chan []answer, 1)
	go func() {
		inflight <- tr.concurrentPredicts(t, base, 2, map[string]any{"text": "cut", "delay_ms": 20000})
	}()
	time.Sleep(2 * time.Second) // the calls reach the pods
	killed := time.Now()
	victims := tr.readyPods(t)
	for _, name := range victims {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		if err := tr.p.Client.Delete(tr.ctx, pod, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	}
	var cut []answer
	select {
	case cut = <-inflight:
	case <-time.After(time.Minute):
		t.Fatal("calls in flight to killed pods did not end within a minute")
	}
	for i, a := range cut {
		if a.code != http.StatusBadGateway || a.body["error_code"] != "model_unavailable" {
			t.Fatalf("in-flight call %d to a killed pod: %s, want 502 model_unavailable", i, a)
		}
	}
	t.Logf("calls in flight to killed pods ended %s after the kill: %d %s", time.Since(killed).Round(time.Millisecond), cut[0].code, cut[0].raw)
	eventually(t, 2*time.Minute, "a call answered by a replacement pod", func() error {
		a := tr.admin(t, http.MethodPost, base, map[string]any{"text": "after", "report_host": true})
		if a.code != http.StatusOK {
			return fmt.Errorf("%s", a)
		}
		if host, _ := a.body["host"].(string); slices.Contains(victims, host) {
			return fmt.Errorf("answered by %s, a killed pod", host)
		}
		return nil
	})

	// Deactivate: no replicas, and the routes answer 404 model_does_not_exist.
	d := tr.admin(t, http.MethodPost, depPath+"/deactivate", nil)
	if d.code != http.StatusOK || d.body["success"] != true {
		t.Fatalf("deactivate: %s", d)
	}
	tr.waitStatus(t, depPath, time.Minute, "INACTIVE")
	eventually(t, time.Minute, "the Deployment at 0 replicas", func() error {
		dep := &appsv1.Deployment{}
		if err := tr.p.Client.Get(tr.ctx, client.ObjectKey{Namespace: ns, Name: "md-" + containerDeployment}, dep); err != nil {
			return err
		}
		if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 0 {
			return fmt.Errorf("replicas %v", dep.Spec.Replicas)
		}
		return nil
	})
	eventually(t, 30*time.Second, "predict refused once inactive", func() error {
		p := tr.admin(t, http.MethodPost, base, map[string]any{"text": "late"})
		if p.code != http.StatusNotFound || p.body["error_code"] != "model_does_not_exist" {
			return fmt.Errorf("%s", p)
		}
		return nil
	})
}

// waitStatus polls the deployment's REST status until it is want.
func (tr *tour) waitStatus(t *testing.T, path string, timeout time.Duration, want string) {
	t.Helper()
	var seen []string
	eventually(t, timeout, "status "+want, func() error {
		r := tr.admin(t, http.MethodGet, path, nil)
		s, _ := r.body["status"].(string)
		if len(seen) == 0 || seen[len(seen)-1] != s {
			seen = append(seen, s)
		}
		if s != want {
			return fmt.Errorf("status went %v: %s", seen, r)
		}
		return nil
	})
	t.Logf("%s: status went %s", path, strings.Join(seen, " → "))
}

// pods lists the deployment's pods that are not being deleted.
func (tr *tour) pods(t *testing.T) []corev1.Pod {
	t.Helper()
	list := &corev1.PodList{}
	if err := tr.p.Client.List(tr.ctx, list, client.InNamespace(cluster.WorkspaceNamespace),
		client.MatchingLabels{"gateway.modelgate.io/deployment": containerDeployment}); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// readyPods names the deployment's Ready pods.
func (tr *tour) readyPods(t *testing.T) []string {
	t.Helper()
	var names []string
	for _, p := range tr.pods(t) {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				names = append(names, p.Name)
			}
		}
	}
	return names
}

// concurrentPredicts sends n predict calls at once and answers them in order.
func (tr *tour) concurrentPredicts(t *testing.T, path string, n int, body map[string]any) []answer {
	t.Helper()
	out := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { out[i], _ = tr.do(http.MethodPost, path, "Bearer "+tr.p.APIKey, body, nil) })
	}
	wg.Wait()
	return out
}

// watchReadyAddress reports when this client first sees a ready address in the container deployment's Service's
// EndpointSlices. The deployment must have none when it is called.
func (tr *tour) watchReadyAddress(t *testing.T) <-chan time.Time {
	t.Helper()
	w, err := tr.c.Kube.DiscoveryV1().EndpointSlices(cluster.WorkspaceNamespace).Watch(tr.ctx,
		metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=md-" + containerDeployment})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	seen := make(chan time.Time, 1)
	go func() {
		for ev := range w.ResultChan() {
			es, ok := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok {
				continue
			}
			for _, e := range es.Endpoints {
				if e.Conditions.Ready != nil && *e.Conditions.Ready {
					seen <- time.Now()
					return
				}
			}
		}
	}()
	return seen
}

// promotedStaysDown promotes a second deployment into production and watches the replaced one, whose
// minReplica is 1: it is scaled to zero and stays there, pod and all, until a call to it wakes it
// (docs/decisions.md, "A deployment scaled to zero stays there until a call").
func (tr *tour) promotedStaysDown(t *testing.T) {
	ns := cluster.WorkspaceNamespace
	deployment := func(name string, minReplica int32) *gatewayv1.ModelDeployment {
		return &gatewayv1.ModelDeployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: gatewayv1.ModelDeploymentSpec{
				ModelID: "promoted",
				Source: gatewayv1.DeploymentSource{Container: &gatewayv1.ContainerSource{
					Image: cluster.DemoModelImage, Args: []string{"--name=" + name}, Port: 8080}},
				Autoscaling: &gatewayv1.Autoscaling{
					MinReplica: ptr.To(minReplica), MaxReplica: ptr.To[int32](1), ScaleDownDelaySeconds: ptr.To[int32](containerIdle),
				},
				StartupTimeoutSeconds: 120,
			},
		}
	}
	// The Model first: it may name a deployment not created yet, and it must go before the one it serves.
	objects := []client.Object{
		&gatewayv1.Model{ObjectMeta: metav1.ObjectMeta{Name: "promoted", Namespace: ns},
			Spec: gatewayv1.ModelSpec{Environments: []gatewayv1.ModelEnvironment{
				{Name: gatewayv1.EnvironmentProduction, Deployment: "promoted-v1"}}}},
		deployment("promoted-v1", 1), deployment("promoted-v2", 1),
	}
	tr.createAll(t, objects...)
	v1 := "/v1/models/promoted/deployments/promoted-v1"
	tr.waitStatus(t, v1, 3*time.Minute, "ACTIVE")
	tr.waitStatus(t, "/v1/models/promoted/deployments/promoted-v2", 3*time.Minute, "ACTIVE")
	// A call just before the promotion, so gatewayd's reported peak still holds it when the scale-down lands.
	if a := tr.admin(t, http.MethodPost, "/models/promoted/production/predict", map[string]any{"text": "before"}); a.code != http.StatusOK || a.body["deployment"] != "promoted-v1" {
		t.Fatalf("predict before the promotion: %s", a)
	}
	if r := tr.admin(t, http.MethodPost, "/v1/models/promoted/environments/production/promote", map[string]any{"deployment_id": "promoted-v2"}); r.code != http.StatusOK {
		t.Fatalf("promote: %s", r)
	}
	tr.waitStatus(t, v1, 2*time.Minute, "SCALED_TO_ZERO")
	workload := func() (int32, error) {
		dep := &appsv1.Deployment{}
		if err := tr.p.Client.Get(tr.ctx, client.ObjectKey{Namespace: ns, Name: "md-promoted-v1"}, dep); err != nil {
			return 0, err
		}
		return ptr.Deref(dep.Spec.Replicas, 1), nil
	}
	// Held for ten autoscaler rounds: minReplica 1 and the call before the promotion must not bring it back.
	for range 20 {
		time.Sleep(time.Second)
		if n, err := workload(); err != nil || n != 0 {
			t.Fatalf("the replaced deployment's Deployment: %d replicas, %v; want 0 until a call", n, err)
		}
	}
	if r := tr.admin(t, http.MethodGet, v1, nil); r.body["status"] != "SCALED_TO_ZERO" {
		t.Fatalf("the replaced deployment 20 s after the promotion: %s", r)
	}
	// A call to it wakes it, and is answered.
	if a := tr.admin(t, http.MethodPost, "/models/promoted/deployment/promoted-v1/predict", map[string]any{"text": "wake"}); a.code != http.StatusOK || a.body["deployment"] != "promoted-v1" {
		t.Fatalf("a call to the replaced deployment: %s", a)
	}
}

// createAll creates objects in order, and deletes them in the same order when the test ends.
func (tr *tour) createAll(t *testing.T, objects ...client.Object) {
	t.Helper()
	for _, o := range objects {
		if err := tr.p.Client.Create(tr.ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, o := range objects {
			_ = tr.p.Client.Delete(tr.ctx, o)
		}
	})
}

// serveURLModel serves the demo model on ClientIP through wrap, which sees every request the model server gets,
// and registers it as model's url deployment <model>-v1 and production environment; it is ACTIVE on return.
func (tr *tour) serveURLModel(t *testing.T, model string, wrap func(next http.Handler) http.Handler) {
	t.Helper()
	ln, err := tr.c.Netns.Listen("tcp", net.JoinHostPort(cluster.ClientIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	deployment := model + "-v1"
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: wrap(stack.NewDemoModel(deployment))}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	ns := cluster.WorkspaceNamespace
	tr.createAll(t,
		&gatewayv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Name: deployment, Namespace: ns},
			Spec: gatewayv1.ModelDeploymentSpec{ModelID: model, Source: gatewayv1.DeploymentSource{URL: "http://" + ln.Addr().String()}}},
		&gatewayv1.Model{ObjectMeta: metav1.ObjectMeta{Name: model, Namespace: ns},
			Spec: gatewayv1.ModelSpec{Environments: []gatewayv1.ModelEnvironment{{Name: gatewayv1.EnvironmentProduction, Deployment: deployment}}}})
	tr.waitStatus(t, "/v1/models/"+model+"/deployments/"+deployment, 2*time.Minute, "ACTIVE")
}
