package gatewayd_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/gatewayd"
	"github.com/modelgate/modelgate/gatewayd/gatewaytest"
	"github.com/modelgate/modelgate/test/kubetest"
	"github.com/modelgate/modelgate/test/testutil"
)

// BenchmarkColdStartHold measures what gatewayd adds to a cold start: from the moment the test marks the
// model server's address ready (it writes the EndpointSlice, as the EndpointSlice controller would once the pod
// is ready) to the held call's answer. That span is the API server's write and watch fan-out, gatewayd's
// EndpointSlice informer, the held call waking, and the forward of its (held) body to a model server that
// answers at once. Each iteration first removes the slice and waits until the calls are held: one call, or 50 at
// once (then the span ends at the last answer). It reports p50-ms and p99-ms over the iterations, and the API
// write's own p50 (write-p50-ms); run it with -benchtime 100x for a p99 worth reading.
func BenchmarkColdStartHold(b *testing.B) {
	kube.Start(b)
	ip := kubetest.EndpointAddress(b)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	ns, err := gatewaytest.CreateNamespace(ctx, cs, "bench")
	if err != nil {
		b.Fatal(err)
	}
	l, err := net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		b.Fatal(err)
	}
	server := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_, _ = w.Write(body)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = server.Serve(l) }()
	b.Cleanup(func() { _ = server.Close() })
	port := netip.MustParseAddrPort(l.Addr().String()).Port()

	key, rec := gatewaytest.NewWorkspaceKey("invoke", "WORKSPACE_INVOKE")
	s := gatewaytest.Snapshot(ns, "INDEPENDENT", nil)
	s.WorkspaceAPIKeys = []snapshot.WorkspaceAPIKey{rec}
	s.Models = []snapshot.ServedModel{{ID: svcModel, Environments: []snapshot.EnvironmentRoute{{Name: "production", Deployment: "svc"}}}}
	s.Deployments = []snapshot.Deployment{{ID: "svc", ModelID: svcModel, Kind: snapshot.DeploymentService,
		Service: svcName, PortName: svcPort, PredictPath: "/predict", Active: true, StartupTimeoutSeconds: 600}}
	if err := gatewaytest.Publish(ctx, cs, s, 1, 0); err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	gw, err := gatewayd.New(gatewayd.Options{RESTConfig: cfg, Namespaces: []string{ns}, Registry: reg})
	if err != nil {
		b.Fatal(err)
	}
	url, err := gatewaytest.Serve(ctx, gw)
	if err != nil {
		b.Fatal(err)
	}
	if err := gatewaytest.WaitReady(gw, 30*time.Second); err != nil {
		b.Fatal(err)
	}
	held := func() float64 {
		families, _ := reg.Gather()
		for _, f := range families {
			if f.GetName() == "modelgate_model_held_calls" {
				for _, m := range f.GetMetric() {
					return m.GetGauge().GetValue()
				}
			}
		}
		return 0
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: svcName + "-bench", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: svcName}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(svcPort), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip.String()}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
	if ip.Is6() {
		slice.AddressType = discoveryv1.AddressTypeIPv6
	}
	type answer struct {
		status int
		body   string
	}
	call := func(body string) answer {
		req, _ := http.NewRequest(http.MethodPost, url+svcPredict, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return answer{}
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, string(got)}
	}

	for _, calls := range []int{1, 50} {
		b.Run(fmt.Sprintf("held=%d", calls), func(b *testing.B) {
			var spans, writes []time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				// Calls held for a deployment with no ready address. A probe goes first: a stale address (the
				// watch has not seen the last delete yet) serves it at once, and it is sent again; once it is held,
				// the watch has seen the delete and every other call is held too.
				answered := make(chan answer, calls)
				bodies := map[string]bool{}
				send := func(c int) {
					body := fmt.Sprintf(`{"i":%d,"c":%d}`, i, c)
					bodies[body] = true
					go func() { answered <- call(body) }()
				}
				waitHeld := func(n int) bool {
					deadline := time.Now().Add(30 * time.Second)
					for held() < float64(n) && len(answered) == 0 && time.Now().Before(deadline) {
						time.Sleep(time.Millisecond)
					}
					return held() >= float64(n)
				}
				for send(0); !waitHeld(1); send(0) {
					<-answered
				}
				for c := 1; c < calls; c++ {
					send(c)
				}
				if !waitHeld(calls) {
					b.Fatalf("%v calls held, want %d", held(), calls)
				}
				b.StartTimer()
				start := time.Now()
				if _, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
				written := time.Since(start)
				for range calls {
					if a := <-answered; a.status != http.StatusOK || !bodies[a.body] {
						b.Fatalf("held call: %d %q, want 200 with its body", a.status, a.body)
					}
				}
				span := time.Since(start)
				b.StopTimer()
				spans, writes = append(spans, span), append(writes, written)
				if err := cs.DiscoveryV1().EndpointSlices(ns).Delete(ctx, slice.Name, metav1.DeleteOptions{}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			b.ReportMetric(testutil.Millis(testutil.Percentile(spans, 0.5)), "p50-ms")
			b.ReportMetric(testutil.Millis(testutil.Percentile(spans, 0.99)), "p99-ms")
			b.ReportMetric(testutil.Millis(testutil.Percentile(writes, 0.5)), "write-p50-ms")
		})
	}
}
