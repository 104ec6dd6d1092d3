package gatewayd_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/test/kubetest"
)

// Service deployments: a model deployment of kind "service" is called at a ready address of its Service's
// EndpointSlices, which gatewayd watches itself (gatewayd/discovery). These tests run real model servers and the
// real envtest API server. envtest runs no kube-controller-manager, so no EndpointSlice controller turns a
// Service and its pods into slices: the tests write the slices as that controller would (labelled
// kubernetes.io/service-name), and need no Service object at all. The API server refuses loopback addresses in
// an EndpointSlice, so the model servers listen on a non-loopback address of this host (the test is skipped when
// the host has none).

const (
	svcName     = "sentiment-svc"
	svcModel    = "sentiment"
	svcPort     = "http"
	svcPredict  = "/models/" + svcModel + "/production/predict"
	pollTimeout = 30 * time.Second
)

// svcServer is a real model server on the host's non-loopback address. /predict echoes the body and its
// Content-Type back after holding the call for delay, and counts the call in hits.
type svcServer struct {
	*httptest.Server
	name string
	addr netip.AddrPort
	hits atomic.Int64
}

func newSvcServer(t *testing.T, ip netip.Addr, name string, delay time.Duration) *svcServer {
	t.Helper()
	l, err := net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		t.Fatalf("failed to listen on %s: %v", ip, err)
	}
	s := &svcServer{name: name, addr: netip.MustParseAddrPort(l.Addr().String())}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/predict" {
			http.NotFound(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		s.hits.Add(1)
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
		_, _ = w.Write(body)
	}))
	s.Listener = l
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// serviceFixture is a gatewayd whose model "sentiment" has its production environment on a service deployment
// behind sentiment-svc, port "http", and a WORKSPACE_INVOKE key.
type serviceFixture struct {
	*fixture
	auth   string
	client *http.Client
}

// A call that finds no ready address is held for the deployment's startup timeout, 1 s here, then answers 503.
func newServiceFixture(t *testing.T) *serviceFixture {
	return newServiceFixtureWith(t, 1, 0)
}

// newServiceFixtureWith is newServiceFixture with the deployment's startupTimeoutSeconds and gatewayd's hold
// timeout (its default when zero).
func newServiceFixtureWith(t *testing.T, startupTimeoutSeconds int32, holdTimeout time.Duration) *serviceFixture {
	return newServiceFixtureOpts(t, startupTimeoutSeconds, fixtureOpts{holdTimeout: holdTimeout})
}

// newServiceFixtureOpts is newServiceFixtureWith with more of gatewayd's options.
func newServiceFixtureOpts(t *testing.T, startupTimeoutSeconds int32, o fixtureOpts) *serviceFixture {
	t.Helper()
	key, rec := gatewaytest.NewWorkspaceKey("invoke", "WORKSPACE_INVOKE")
	o.mode, o.workspace = "INDEPENDENT", []snapshot.WorkspaceAPIKey{rec}
	f := newFixture(t, o)
	f.snap.Models = []snapshot.ServedModel{{ID: svcModel, Environments: []snapshot.EnvironmentRoute{{Name: "production", Deployment: "svc"}}}}
	// Ready stays false: a service deployment is served by the ready addresses gatewayd watches, whatever the
	// manager last saw.
	f.snap.Deployments = []snapshot.Deployment{{ID: "svc", ModelID: svcModel, Kind: snapshot.DeploymentService,
		Service: svcName, PortName: svcPort, PredictPath: "/predict", Active: true, StartupTimeoutSeconds: startupTimeoutSeconds}}
	f.publish()
	// Enough idle connections to gatewayd for the concurrent callers, so they do not churn through ports.
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return &serviceFixture{fixture: f, auth: "Bearer " + key, client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// slice writes the EndpointSlice the EndpointSlice controller would write for one pod of sentiment-svc served by
// s: one endpoint, ready as given, on the port named "http".
func (f *serviceFixture) slice(s *svcServer, ready bool) *discoveryv1.EndpointSlice {
	f.t.Helper()
	return f.sliceOf(svcName, s, ready)
}

// sliceOf is slice for the Service named service.
func (f *serviceFixture) sliceOf(service string, s *svcServer, ready bool) *discoveryv1.EndpointSlice {
	f.t.Helper()
	family := discoveryv1.AddressTypeIPv4
	if s.addr.Addr().Is6() {
		family = discoveryv1.AddressTypeIPv6
	}
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: service + "-" + s.name, Namespace: f.ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: service,
			discoveryv1.LabelManagedBy:   "endpointslice-controller.k8s.io",
		}},
		AddressType: family,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(svcPort), Port: ptr.To(int32(s.addr.Port())), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{s.addr.Addr().String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(ready), Terminating: ptr.To(false)}}},
	}
	out, err := cs.DiscoveryV1().EndpointSlices(f.ns).Create(context.Background(), sl, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatalf("failed to create EndpointSlice %s: %v", sl.Name, err)
	}
	return out
}

// call makes one predict call with body and returns the status, the body and the headers.
func (f *serviceFixture) call(body []byte) (int, []byte, http.Header) {
	req, _ := http.NewRequest(http.MethodPost, f.url+svcPredict, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Authorization", f.auth)
	resp, err := f.client.Do(req)
	if err != nil {
		f.t.Errorf("predict: %v", err)
		return 0, nil, nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Errorf("predict: reading the answer: %v", err)
	}
	gatewaytest.WantStringDetail(f.t, "POST "+svcPredict, resp.StatusCode, b)
	return resp.StatusCode, b, resp.Header
}

// poll calls cond until it holds, failing the test after pollTimeout.
func (f *serviceFixture) poll(what string, cond func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(pollTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			f.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPredictServiceDeployment: calls to a service deployment reach every ready address of its Service's
// EndpointSlices with bodies unchanged, leave an address once it is not ready, and answer 503 model_not_ready
// with Retry-After once no slice is left (after a hold of the deployment's 1 s startup timeout).
func TestPredictServiceDeployment(t *testing.T) {
	ip := kubetest.EndpointAddress(t)
	f := newServiceFixture(t)
	one, two := newSvcServer(t, ip, "one", 0), newSvcServer(t, ip, "two", 0)

	// No slice yet: not ready.
	status, body, h := f.call([]byte("x"))
	wantNotReady(t, "before any slice", status, body, h)

	// Both servers listen on the one host address on different ports, and a slice has one port list, so each
	// gets a slice of its own, with the same port name.
	sliceOne, sliceTwo := f.slice(one, true), f.slice(two, true)
	f.poll("the watch to see both slices", func() bool {
		f.call([]byte("x"))
		return one.hits.Load() > 0 && two.hits.Load() > 0
	})

	one.hits.Store(0)
	two.hits.Store(0)
	const calls = 50
	for i := range calls {
		payload := make([]byte, 1024+i*97)
		_, _ = rand.Read(payload)
		status, got, h := f.call(payload)
		if status != http.StatusOK || !bytes.Equal(got, payload) || h.Get("Content-Type") != "application/octet-stream" {
			t.Fatalf("call %d: status %d, %d bytes back (want %d identical), content type %q: %.200s",
				i, status, len(got), len(payload), h.Get("Content-Type"), got)
		}
	}
	if n1, n2 := one.hits.Load(), two.hits.Load(); n1 == 0 || n2 == 0 || n1+n2 != calls {
		t.Fatalf("hits one=%d two=%d over %d calls, want both > 0 and %d in all", n1, n2, calls, calls)
	}
	t.Logf("%d sequential calls: one=%d two=%d", calls, one.hits.Load(), two.hits.Load())

	// Server one's pod stops being ready: the controller updates its slice.
	sliceOne.Endpoints[0].Conditions.Ready = ptr.To(false)
	sliceOne.Endpoints[0].Conditions.Serving = ptr.To(false)
	if _, err := cs.DiscoveryV1().EndpointSlices(f.ns).Update(context.Background(), sliceOne, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Until the watch catches up a call may still go to one; wait for 20 calls in a row to go to two. (gatewayd
	// relays no header of the model's but Content-Type, so the servers' hit counts tell who answered.)
	f.poll("every call to go to server two", func() bool {
		before := one.hits.Load()
		for range 20 {
			if status, _, _ := f.call([]byte("x")); status != http.StatusOK || one.hits.Load() != before {
				return false
			}
		}
		return true
	})
	one.hits.Store(0)
	two.hits.Store(0)
	for i := range calls {
		payload := []byte(`{"text":"after"}`)
		if status, got, _ := f.call(payload); status != http.StatusOK || !bytes.Equal(got, payload) || one.hits.Load() != 0 {
			t.Fatalf("call %d after one went not ready: status %d, one's hits %d: %s", i, status, one.hits.Load(), got)
		}
	}
	if n1, n2 := one.hits.Load(), two.hits.Load(); n1 != 0 || n2 != calls {
		t.Fatalf("after one went not ready: hits one=%d two=%d, want 0 and %d", n1, n2, calls)
	}

	// Both slices go (the Service is deleted, or scaled to nothing): not ready, with Retry-After.
	for _, sl := range []*discoveryv1.EndpointSlice{sliceOne, sliceTwo} {
		if err := cs.DiscoveryV1().EndpointSlices(f.ns).Delete(context.Background(), sl.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.poll("calls to answer 503", func() bool {
		status, _, _ := f.call([]byte("x"))
		return status == http.StatusServiceUnavailable
	})
	two.hits.Store(0)
	status, body, h = f.call([]byte("x"))
	wantNotReady(t, "after deleting both slices", status, body, h)
	if n1, n2 := one.hits.Load(), two.hits.Load(); n1 != 0 || n2 != 0 {
		t.Fatalf("a server was called after both slices were deleted: one=%d two=%d", n1, n2)
	}
}

// wantNotReady checks a 503 model_not_ready answer with Retry-After.
func wantNotReady(t *testing.T, when string, status int, body []byte, h http.Header) {
	t.Helper()
	var env struct {
		Error     string `json:"error"`
		ErrorCode string `json:"error_code"`
	}
	if err := json.Unmarshal(body, &env); err != nil || status != http.StatusServiceUnavailable || env.ErrorCode != "model_not_ready" || env.Error == "" {
		t.Fatalf("%s: %d %s, want 503 model_not_ready", when, status, body)
	}
	if h.Get("Retry-After") == "" {
		t.Fatalf("%s: 503 without Retry-After", when)
	}
}

// TestPredictServicePowerOfTwoChoices: with one slow and one fast address, concurrent calls go mostly to the fast
// one, because Pick keeps the address with fewer calls in flight and the slow one holds its calls. With two
// addresses, power of two choices compares both on every call, so the slow one gets a call only when it has no
// more in flight than the fast one. This asserts that behaviour (a ratio of calls), not a latency threshold.
func TestPredictServicePowerOfTwoChoices(t *testing.T) {
	ip := kubetest.EndpointAddress(t)
	f := newServiceFixture(t)
	slow, fast := newSvcServer(t, ip, "slow", 200*time.Millisecond), newSvcServer(t, ip, "fast", 0)
	f.slice(slow, true)
	f.slice(fast, true)
	f.poll("the watch to see both slices", func() bool {
		f.call([]byte("x"))
		return slow.hits.Load() > 0 && fast.hits.Load() > 0
	})
	// Let any call still held by the slow server end before counting.
	time.Sleep(300 * time.Millisecond)
	slow.hits.Store(0)
	fast.hits.Store(0)

	const callers = 16
	stop := time.Now().Add(time.Second)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			payload := []byte(`{"text":"load"}`)
			for time.Now().Before(stop) {
				if status, got, _ := f.call(payload); status != http.StatusOK || !bytes.Equal(got, payload) {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	ns, nf := slow.hits.Load(), fast.hits.Load()
	t.Logf("%d callers for 1s: fast=%d slow=%d", callers, nf, ns)
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d calls failed under load", n)
	}
	if ns == 0 {
		t.Errorf("the slow server got no call: both addresses should be in use")
	}
	if nf <= 2*ns {
		t.Fatalf("fast=%d slow=%d: want fast > 2*slow, as power of two choices on in-flight calls sends calls away from the slow address", nf, ns)
	}
}
