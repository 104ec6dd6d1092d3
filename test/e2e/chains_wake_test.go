package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/test/kubetest"
	"github.com/modelgate/modelgate/test/testutil"
)

// TestChainWakesAsAWhole follows a chain deployment of two container chainlets through a promotion that scales
// it to zero and a call that brings it back, over gatewayd's real socket with the manager running: the call is
// held for the entrypoint, gatewayd asks the manager to wake the entrypoint, and the manager wakes the other
// chainlet with it (chainlets call each other past gatewayd, so nothing else would). No kubelet runs here: the
// test reports the workloads' replicas and publishes the entrypoint's EndpointSlice, pointing at a real server
// on a non-loopback address of this host.
func TestChainWakesAsAWhole(t *testing.T) {
	s := theStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	front := frontServer(t)
	id := fmt.Sprintf("wake-%d", time.Now().UnixNano()%1e6)
	v1, v2 := id+"-v1", id+"-v2"
	must(s.Client.Create(ctx, &gatewayv1.ChainDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: v1},
		Spec: gatewayv1.ChainDeploymentSpec{ChainID: id, Entrypoint: "front", Chainlets: []gatewayv1.Chainlet{
			{Name: "front", Source: gatewayv1.DeploymentSource{Container: &gatewayv1.ContainerSource{Image: "registry.example/front:1", Port: int32(front.Port())}}},
			{Name: "back", Source: gatewayv1.DeploymentSource{Container: &gatewayv1.ContainerSource{Image: "registry.example/back:1", Port: 9001}}},
		}},
	}))
	must(s.Client.Create(ctx, &gatewayv1.ChainDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: v2},
		Spec: gatewayv1.ChainDeploymentSpec{ChainID: id, Entrypoint: "front", Chainlets: []gatewayv1.Chainlet{
			{Name: "front", Source: gatewayv1.DeploymentSource{URL: s.ModelURL}},
		}},
	}))
	must(s.Client.Create(ctx, &gatewayv1.Chain{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: id},
		Spec:       gatewayv1.ChainSpec{Environments: []gatewayv1.ChainEnvironment{{Name: "production", Deployment: v1}}},
	}))
	frontWL, backWL := "md-"+v1+"-front", "md-"+v1+"-back"

	// The kubelet's part: each workload runs the replicas the manager asks for, all ready; the entrypoint's ready
	// pod is the real server.
	runAsAsked := func(name string) int32 {
		t.Helper()
		d := &appsv1.Deployment{}
		if err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: name}, d); err != nil {
			return -1
		}
		n := ptr.Deref(d.Spec.Replicas, 1)
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
		if err := s.Client.Status().Update(ctx, d); err != nil {
			return -1
		}
		return n
	}
	waitFor(t, time.Minute, "both chainlet workloads to run one replica", func() bool {
		return runAsAsked(frontWL) == 1 && runAsAsked(backWL) == 1
	})
	waitFor(t, time.Minute, "the chain deployment to be ACTIVE", func() bool {
		cd := &gatewayv1.ChainDeployment{}
		return s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: v1}, cd) == nil && cd.Status.Status == gatewayv1.StatusActive
	})
	base := s.GatewayURL + "/chains/" + id
	var r response

	// Promote v2: v1 serves nothing, so promote scales every chainlet of it down, past the floor of one replica
	// that keeps "back" up while v1 serves.
	waitFor(t, time.Minute, "v2 to be promoted", func() bool {
		r = admin(t, s, http.MethodPost, "/v1/chains/"+id+"/environments/production/promote", map[string]any{"deployment_id": v2})
		return r.code == http.StatusOK
	})
	waitFor(t, time.Minute, "both chainlets of v1 to be scaled to zero", func() bool {
		return runAsAsked(frontWL) == 0 && runAsAsked(backWL) == 0
	})
	// A call to v1 by id is held for its entrypoint, which has no ready address (its EndpointSlice is published
	// only once it runs again, below); the wake it asks for reaches "back" too.
	held := make(chan response, 1)
	go func() {
		held <- heldCall(base+"/deployment/"+v1+"/run_remote", "Bearer "+s.APIKey, `{"text": "wake up"}`)
	}()
	waitFor(t, time.Minute, "the manager to wake both chainlets of v1", func() bool {
		if runAsAsked(frontWL) == 1 && runAsAsked(backWL) == 1 {
			return true
		}
		select {
		case r = <-held:
			t.Fatalf("the call was answered before the entrypoint was ready: %s", r)
		default:
		}
		return false
	})
	select {
	case r = <-held:
		t.Fatalf("the call was answered before the entrypoint was ready: %s", r)
	default:
	}
	entry, inner := &gatewayv1.ModelDeployment{}, &gatewayv1.ModelDeployment{}
	must(s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: v1 + "-front"}, entry))
	must(s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: v1 + "-back"}, inner))
	if w := entry.Annotations[gatewayv1.AnnotationWakeRequestedAt]; w == "" || inner.Annotations[gatewayv1.AnnotationWakeRequestedAt] != w {
		t.Fatalf("wake-requested-at: entrypoint %q, other chainlet %q; want the entrypoint's copied", w, inner.Annotations[gatewayv1.AnnotationWakeRequestedAt])
	}

	// The EndpointSlice controller would publish the entrypoint's server as its Service's one ready endpoint.
	sl := testutil.EndpointSlice(s.Namespace, frontWL+"-x", frontWL, gatewayv1.ModelPortName, int32(front.Port()),
		testutil.Endpoint{Addr: front.Addr().String(), Ready: true})
	if err := s.Client.Create(ctx, sl); err != nil {
		t.Fatalf("failed to create EndpointSlice %s: %v", sl.Name, err)
	}
	select {
	case r = <-held:
	case <-ctx.Done():
		t.Fatal("the held call was not answered once the entrypoint was ready")
	}
	expect(t, r, http.StatusOK, "")
	if r.body["front"] != "wake up" {
		t.Fatalf("held run_remote = %s, want the entrypoint's answer", r)
	}
}

// frontServer is an entrypoint on a non-loopback address of this host (the API server refuses loopback ones in
// an EndpointSlice): it echoes the text it gets as {"front": text}.
func frontServer(t *testing.T) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(kubetest.EndpointAddress(t), 0).String())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Text string `json:"text"`
		}
		if r.URL.Path != "/predict" || json.NewDecoder(r.Body).Decode(&in) != nil {
			w.WriteHeader(http.StatusOK) // /health
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"front": %q}`, in.Text)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return netip.MustParseAddrPort(ln.Addr().String())
}

// heldCall is send for a goroutine other than the test's: a failure is an answer with code 0 and the error as
// its body, for the test to report.
func heldCall(url, authorization, body string) response {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return response{raw: []byte(err.Error())}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", authorization)
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		return response{raw: []byte(err.Error())}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{raw: []byte(err.Error())}
	}
	r := response{code: resp.StatusCode, header: resp.Header, raw: raw}
	_ = json.Unmarshal(raw, &r.body)
	return r
}
