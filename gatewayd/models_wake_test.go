package gatewayd_test

import (
	"bytes"
	"context"
	"encoding/json"
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelgate/modelgate/api/snapshot"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/test/kubetest"
)

// Scale from zero (issue 16, gatewayd's half): a call to a service deployment with no ready address asks for a
// wake, one patch of gateway.modelgate.io/wake-requested-at on the ModelDeployment however many calls wait, and
// is held until an address is ready. No manager runs here, so the tests play its part and that of the
// controller-manager and kubelet: once the wake is asked they scale the workload, write its Deployment status and
// write the EndpointSlice of its ready pod (a real model server on a non-loopback host address), and say so
// where they do.

const workloadName = "sentiment-server"

// crClient is a client for the custom resources and Deployments the wake tests write as the user and the manager.
func crClient(t *testing.T) client.WithWatch {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, gatewayv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// wakeObjects creates what the user runs for the service deployment "svc": a Deployment of the model server at
// zero replicas (scaled to zero) and the ModelDeployment that routes to its Service and names it as the scale
// target. It returns a watch of the ModelDeployment's changes from then on.
func (f *serviceFixture) wakeObjects(c client.WithWatch) watch.Interface {
	f.t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": workloadName}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: workloadName}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To(int32(0)), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "server", Image: "registry.example/sentiment:1"}}}},
	}}
	md := &gatewayv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "svc"}, Spec: gatewayv1.ModelDeploymentSpec{
		ModelID: svcModel, Source: gatewayv1.DeploymentSource{Service: &gatewayv1.ServiceSource{Name: svcName, Port: 8080,
			ScaleTargetRef: &gatewayv1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: workloadName}}}}}
	for _, obj := range []client.Object{dep, md} {
		if err := c.Create(ctx, obj); err != nil {
			f.t.Fatalf("failed to create %T %s: %v", obj, obj.GetName(), err)
		}
	}
	w, err := c.Watch(ctx, &gatewayv1.ModelDeploymentList{}, client.InNamespace(f.ns),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: md.ResourceVersion}})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(w.Stop)
	return w
}

// startWorkload does what the manager, the controller-manager and the kubelet would do once a wake is asked: scale
// the workload to one replica, report that replica ready in the Deployment's status, and publish the ready pod
// (the real server s) in the Service's EndpointSlice.
func (f *serviceFixture) startWorkload(c client.Client, s *svcServer) {
	f.t.Helper()
	ctx := context.Background()
	dep := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: workloadName}, dep); err != nil {
		f.t.Fatal(err)
	}
	dep.Spec.Replicas = ptr.To(int32(1)) // the manager, through the scale target
	if err := c.Update(ctx, dep); err != nil {
		f.t.Fatal(err)
	}
	// The controller-manager's Deployment controller and the kubelet: one replica, ready.
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
	if err := c.Status().Update(ctx, dep); err != nil {
		f.t.Fatal(err)
	}
	f.slice(s, true) // the EndpointSlice controller
}

// modifications counts the MODIFIED events of w until it has been quiet for a second.
func modifications(w watch.Interface) int {
	n := 0
	for {
		select {
		case ev := <-w.ResultChan():
			if ev.Type == watch.Modified {
				n++
			}
		case <-time.After(time.Second):
			return n
		}
	}
}

func (f *serviceFixture) series(name string, labels ...string) string {
	out := name + "{model=\"" + svcModel + "\""
	for i := 0; i+1 < len(labels); i += 2 {
		out += "," + labels[i] + "=\"" + labels[i+1] + "\""
	}
	return out + ",workspace=\"" + f.ns + "\"}"
}

// waitMetricEquals waits until a series reads want.
func (f *fixture) waitMetricEquals(series string, want float64) {
	f.t.Helper()
	deadline := time.Now().Add(pollTimeout)
	for f.metric(series) != want {
		if time.Now().After(deadline) {
			f.t.Fatalf("%s = %v, want %v", series, f.metric(series), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWakeHoldsCallsUntilReady: 50 calls to a deployment scaled to zero ask for one wake between them and are
// held; once the workload runs, every one of them is answered with its own body, including bodies that were
// still streaming (chunked) while the call was held and whose end is sent only after the address is ready.
func TestWakeHoldsCallsUntilReady(t *testing.T) {
	ip := kubetest.EndpointAddress(t)
	f := newServiceFixtureWith(t, 600, time.Minute)
	c := crClient(t)
	changes := f.wakeObjects(c)
	server := newSvcServer(t, ip, "one", 0)
	held := f.series("modelgate_model_held_calls")
	wakes := f.series("modelgate_model_wake_requests_total", "result", "ok")

	const calls, streamed = 50, 10
	type answer struct {
		status int
		body   []byte
	}
	answers := make([]answer, calls)
	bodies := make([][]byte, calls)
	tails := make([]*io.PipeWriter, streamed)
	var wg sync.WaitGroup
	// A failing test leaves no call behind to report after it ended.
	callCtx, cancelCalls := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancelCalls()
		for _, pw := range tails {
			_ = pw.CloseWithError(context.Canceled) // a transport waits for its body writer to end
		}
		wg.Wait()
	})
	for i := range calls {
		bodies[i] = []byte(fmt.Sprintf(`{"call":%d,"text":"%s"}`, i, bytes.Repeat([]byte{'a' + byte(i%26)}, 100+i*37)))
		var body io.Reader = bytes.NewReader(bodies[i])
		if i < streamed {
			// No Content-Length: the client sends the body chunked, its first half now and the rest later.
			pr, pw := io.Pipe()
			tails[i] = pw
			half := len(bodies[i]) / 2
			go func() { _, _ = pw.Write(bodies[i][:half]) }()
			body = io.NopCloser(pr)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(callCtx, http.MethodPost, f.url+svcPredict, body)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", f.auth)
			resp, err := (&http.Client{Transport: f.client.Transport, Timeout: 2 * time.Minute}).Do(req)
			if err != nil {
				if callCtx.Err() == nil {
					t.Errorf("call %d: %v", i, err)
				}
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			answers[i] = answer{resp.StatusCode, b}
		}()
	}

	f.waitMetricEquals(held, calls)
	f.waitMetricEquals(wakes, 1)
	// Every call waits, and one wake was asked for all of them: read back from the API, and counted.
	md := &gatewayv1.ModelDeployment{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "svc"}, md); err != nil {
		t.Fatal(err)
	}
	at, err := time.Parse(time.RFC3339Nano, md.Annotations[gatewayv1.AnnotationWakeRequestedAt])
	if err != nil || at.Location() != time.UTC {
		t.Fatalf("wake annotation %q: want an RFC 3339 UTC time (%v)", md.Annotations[gatewayv1.AnnotationWakeRequestedAt], err)
	}
	if n := modifications(changes); n != 1 {
		t.Fatalf("%d calls held changed the ModelDeployment %d times, want 1 (one wake)", calls, n)
	}
	if n := f.metric(wakes); n != 1 {
		t.Fatalf("%s = %v with %d calls held, want 1", wakes, n, calls)
	}
	if server.hits.Load() != 0 {
		t.Fatal("the model server was called before it was published ready")
	}

	f.startWorkload(c, server)
	for i, pw := range tails {
		half := len(bodies[i]) / 2
		_, _ = pw.Write(bodies[i][half:])
		_ = pw.Close()
	}
	wg.Wait()
	for i, a := range answers {
		if a.status != http.StatusOK || !bytes.Equal(a.body, bodies[i]) {
			t.Errorf("call %d: %d %.120s; want 200 with its own body back", i, a.status, a.body)
		}
	}
	if n := server.hits.Load(); n != calls {
		t.Fatalf("model server hits = %d, want %d", n, calls)
	}
	f.waitMetricEquals(held, 0)
	if n := f.metric(wakes); n != 1 {
		t.Fatalf("%s = %v after the start, want still 1", wakes, n)
	}
	f.waitMetricEquals(f.series("modelgate_cold_start_seconds_count"), 1)
	if n := modifications(changes); n != 0 {
		t.Fatalf("the ModelDeployment changed %d more times after the start, want 0", n)
	}
}

// TestWakeHoldTimesOut: with no ready address within the hold timeout (the flag, shorter than the deployment's
// startup timeout here), the call answers 503 model_not_ready with Retry-After, and is no longer held.
func TestWakeHoldTimesOut(t *testing.T) {
	f := newServiceFixtureWith(t, 600, time.Second)
	f.wakeObjects(crClient(t))
	status, body, h := f.call([]byte(`{"text":"anyone?"}`))
	wantNotReady(t, "after the hold timeout", status, body, h)
	if n := f.metric(f.series("modelgate_model_held_calls")); n != 0 {
		t.Fatalf("held calls after the timeout = %v, want 0", n)
	}
	if n := f.metric(f.series("modelgate_model_wake_requests_total", "result", "ok")); n != 1 {
		t.Fatalf("wake requests = %v, want 1", n)
	}
}

// TestWakeHeldClientLeaves: a held client that disconnects is released at once and its call is never forwarded,
// even once the model is up; and it costs no further wake.
func TestWakeHeldClientLeaves(t *testing.T) {
	ip := kubetest.EndpointAddress(t)
	f := newServiceFixtureWith(t, 600, time.Minute)
	c := crClient(t)
	f.wakeObjects(c)
	server := newSvcServer(t, ip, "one", 0)
	held := f.series("modelgate_model_held_calls")

	// Raw connections, so that leaving is what a client's leaving is: its socket closes. One sends its whole
	// body; the other streams a chunked body it never finishes.
	host := strings.TrimPrefix(f.url, "http://")
	head := "POST " + svcPredict + " HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: " + f.auth + "\r\nContent-Type: application/json\r\n"
	for _, request := range []string{
		head + "Content-Length: 18\r\n\r\n" + `{"text":"leaving"}`,
		head + "Transfer-Encoding: chunked\r\n\r\n8\r\n" + `{"text":` + "\r\n",
	} {
		conn, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write([]byte(request)); err != nil {
			t.Fatal(err)
		}
		f.waitMetricEquals(held, 1)
		_ = conn.Close()
		// Released at once, not at the hold timeout (a minute): the gauge drops within the poll timeout.
		f.waitMetricEquals(held, 0)
	}

	f.startWorkload(c, server)
	f.poll("a new call to be served", func() bool {
		status, got, _ := f.call([]byte(`{"text":"staying"}`))
		return status == http.StatusOK && string(got) == `{"text":"staying"}`
	})
	if n := server.hits.Load(); n != 1 {
		t.Fatalf("model server hits = %d, want 1 (only the call that stayed; never the ones that left)", n)
	}
	if n := f.metric(f.series("modelgate_model_wake_requests_total", "result", "ok")); n != 1 {
		t.Fatalf("wake requests = %v, want 1: the clients that left cost no second wake", n)
	}
}

// TestWakeHeldCallFollowsPromotion: a call held for production's deployment (scaled to zero) moves when
// production is promoted to another deployment while it waits: it asks a wake of the new deployment, counts as
// its demand (no longer the old one's), and is answered by the new deployment's server once that is ready. The
// old deployment's server is never called.
func TestWakeHeldCallFollowsPromotion(t *testing.T) {
	ip := kubetest.EndpointAddress(t)
	f := newServiceFixtureWith(t, 600, time.Minute)
	c := crClient(t)
	f.wakeObjects(c)
	old, promoted := newSvcServer(t, ip, "one", 0), newSvcServer(t, ip, "two", 0)
	const v2, v2Service = "svc2", "sentiment-v2"
	if err := c.Create(context.Background(), &gatewayv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: v2},
		Spec: gatewayv1.ModelDeploymentSpec{ModelID: svcModel, Source: gatewayv1.DeploymentSource{
			Service: &gatewayv1.ServiceSource{Name: v2Service, Port: 8080}}}}); err != nil {
		t.Fatal(err)
	}
	held := f.series("modelgate_model_held_calls")

	type answer struct {
		status int
		body   []byte
	}
	answered := make(chan answer, 1)
	// A failing test leaves no call behind to report after it ended.
	callCtx, cancelCall := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancelCall(); wg.Wait() })
	wg.Go(func() {
		req, _ := http.NewRequestWithContext(callCtx, http.MethodPost, f.url+svcPredict, strings.NewReader(`{"text":"promoted while held"}`))
		req.Header.Set("Authorization", f.auth)
		resp, err := f.client.Do(req)
		if err != nil {
			answered <- answer{0, []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		answered <- answer{resp.StatusCode, body}
	})
	f.waitMetricEquals(held, 1)
	f.poll("the held call counted for svc", func() bool { return f.inFlight("svc") == 1 })

	// Production moves to svc2, which has no ready address either.
	f.snap.Deployments = append(f.snap.Deployments, snapshot.Deployment{ID: v2, ModelID: svcModel, Kind: snapshot.DeploymentService,
		Service: v2Service, PortName: svcPort, PredictPath: "/predict", Active: true, StartupTimeoutSeconds: 600})
	f.snap.Models[0].Environments[0].Deployment = v2
	f.publish()
	f.poll("the held call counted for svc2 instead of svc", func() bool { return f.inFlight(v2) == 1 && f.inFlight("svc") == 0 })
	f.poll("a wake asked for svc2", func() bool {
		md := &gatewayv1.ModelDeployment{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: v2}, md); err != nil {
			t.Fatal(err)
		}
		return md.Annotations[gatewayv1.AnnotationWakeRequestedAt] != ""
	})
	if n := f.metric(held); n != 1 {
		t.Fatalf("%s = %v after the promotion, want 1: the call waits for svc2", held, n)
	}

	// svc's server comes up first (a call that names svc is served): the held call no longer waits for it.
	f.slice(old, true)
	f.poll("a call to deployment svc served", func() bool {
		req, _ := http.NewRequest(http.MethodPost, f.url+"/models/"+svcModel+"/deployment/svc/predict", strings.NewReader(`{"text":"svc"}`))
		req.Header.Set("Authorization", f.auth)
		resp, err := f.client.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if n := f.metric(held); n != 1 {
		t.Fatalf("%s = %v once svc is ready, want 1: the call waits for svc2", held, n)
	}
	f.sliceOf(v2Service, promoted, true)
	a := <-answered
	if a.status != http.StatusOK || string(a.body) != `{"text":"promoted while held"}` {
		t.Fatalf("the held call answered %d %.120s; want 200 with its body back", a.status, a.body)
	}
	if n := promoted.hits.Load(); n != 1 {
		t.Fatalf("svc2's server hits = %d, want 1", n)
	}
	if n := old.hits.Load(); n != 1 {
		t.Fatalf("svc's server hits = %d, want 1 (the call that named svc): the held call moved to svc2", n)
	}
	f.waitMetricEquals(held, 0)
}

// TestWakeRoutes: the wake routes answer 202 {} and ask for one wake between them (read back from the API);
// whoever may not invoke the model may not wake it either; a url deployment's wake is a no-op.
func TestWakeRoutes(t *testing.T) {
	f := newServiceFixtureWith(t, 600, time.Minute)
	c := crClient(t)
	changes := f.wakeObjects(c)
	wake := func(path, auth string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, f.url+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := f.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/models/sentiment/production/wake", "/models/sentiment/environments/production/wake", "/models/sentiment/deployment/svc/wake"} {
		if status, body := wake(path, f.auth); status != http.StatusAccepted || body != "{}" {
			t.Fatalf("POST %s: %d %s, want 202 {}", path, status, body)
		}
	}
	md := &gatewayv1.ModelDeployment{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "svc"}, md); err != nil {
		t.Fatal(err)
	}
	if _, err := time.Parse(time.RFC3339Nano, md.Annotations[gatewayv1.AnnotationWakeRequestedAt]); err != nil {
		t.Fatalf("wake annotation after the wake routes: %q (%v)", md.Annotations[gatewayv1.AnnotationWakeRequestedAt], err)
	}
	if n := modifications(changes); n != 1 {
		t.Fatalf("three wakes changed the ModelDeployment %d times, want 1", n)
	}
	for _, tc := range []struct {
		path, auth string
		status     int
	}{
		{"/models/sentiment/production/wake", "", http.StatusUnauthorized},
		{"/models/nope/production/wake", f.auth, http.StatusNotFound},
		{"/models/sentiment/deployment/other/wake", f.auth, http.StatusNotFound},
		{"/models/sentiment/development/wake", f.auth, http.StatusNotFound}, // no development deployment
	} {
		if status, body := wake(tc.path, tc.auth); status != tc.status {
			t.Errorf("POST %s: %d %s, want %d", tc.path, status, body, tc.status)
		}
	}
}

// TestWakeRouteURLDeployment: a url deployment has no replicas to start; its wake answers 202 and patches
// nothing; a key scoped to another model is refused as predict refuses it.
func TestWakeRouteURLDeployment(t *testing.T) {
	f := newModelFixture(t, 0)
	for _, tc := range []struct {
		key    string
		status int
	}{{"invoke", http.StatusAccepted}, {"invoke-other-model", http.StatusForbidden}} {
		r := f.post("/models/sentiment/production/wake", "Bearer "+f.keys[tc.key], nil)
		if r.status != tc.status {
			t.Errorf("wake as %s: %d %s, want %d", tc.key, r.status, r.body, tc.status)
		}
	}
	if n := f.metric(`modelgate_model_wake_requests_total{model="sentiment",result="ok",workspace="` + f.ns + `"}`); n != 0 {
		t.Fatalf("wake requests for a url deployment = %v, want 0", n)
	}
}

// TestAsyncRequestWakesDeployment: a queued async request for a deployment scaled to zero asks for a wake
// (docs/decisions.md "Async inference"), as a held sync call does; once the workload runs, the
// request is dispatched and succeeds with the model's answer.
func TestAsyncRequestWakesDeployment(t *testing.T) {
	ip := kubetest.EndpointAddress(t)
	f := newServiceFixtureOpts(t, 600, fixtureOpts{async: true})
	c := crClient(t)
	changes := f.wakeObjects(c)
	server := newSvcServer(t, ip, "one", 0)

	req, _ := http.NewRequest(http.MethodPost, f.url+"/models/"+svcModel+"/production/async_predict",
		strings.NewReader(`{"model_input":{"text":"wake up"}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", f.auth)
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var accepted struct {
		RequestID string `json:"request_id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&accepted)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || err != nil || accepted.RequestID == "" {
		t.Fatalf("async_predict = %d (%v), request %q; want 201 with a request_id", resp.StatusCode, err, accepted.RequestID)
	}

	// The queue's sweep sees a queued request and no ready address, and asks for a wake: read back from the API.
	f.poll("the wake annotation", func() bool {
		md := &gatewayv1.ModelDeployment{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "svc"}, md); err != nil {
			t.Fatal(err)
		}
		return md.Annotations[gatewayv1.AnnotationWakeRequestedAt] != ""
	})
	if server.hits.Load() != 0 {
		t.Fatalf("the model was called %d times before it was ready", server.hits.Load())
	}
	if n := modifications(changes); n != 1 {
		t.Fatalf("the ModelDeployment changed %d times while the request waited, want 1 (one wake)", n)
	}

	f.startWorkload(c, server)
	var status struct {
		Status string          `json:"status"`
		Output json.RawMessage `json:"model_output"`
	}
	f.poll("the request to succeed", func() bool {
		req, _ := http.NewRequest(http.MethodGet, f.url+"/models/"+svcModel+"/async_request/"+accepted.RequestID, nil)
		req.Header.Set("Authorization", f.auth)
		resp, err := f.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_ = json.NewDecoder(resp.Body).Decode(&status)
		return status.Status == "SUCCEEDED"
	})
	if server.hits.Load() != 1 {
		t.Fatalf("the model was called %d times, want 1", server.hits.Load())
	}
}
