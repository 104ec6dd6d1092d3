package autoscale

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/modelgate/modelgate/api/stats"
)

func TestAddresses(t *testing.T) {
	slice := func(typ discoveryv1.AddressType, port string, number int32, eps ...discoveryv1.Endpoint) discoveryv1.EndpointSlice {
		return discoveryv1.EndpointSlice{AddressType: typ, Endpoints: eps,
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)},
				{Name: ptr.To(port), Port: ptr.To(number), Protocol: ptr.To(corev1.ProtocolTCP)}}}
	}
	ep := func(addr string, ready *bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
	}
	got := Addresses([]discoveryv1.EndpointSlice{
		slice(discoveryv1.AddressTypeIPv4, stats.PortName, 9090, ep("10.0.0.1", ptr.To(true)), ep("10.0.0.2", nil), ep("10.0.0.3", ptr.To(false))),
		// The same endpoint in a second slice while it moves: read once.
		slice(discoveryv1.AddressTypeIPv4, stats.PortName, 9090, ep("10.0.0.1", ptr.To(true))),
		slice(discoveryv1.AddressTypeIPv6, stats.PortName, 9090, ep("fd00::4", ptr.To(true))),
		// No metrics port, or not an IP: not a replica to read.
		slice(discoveryv1.AddressTypeIPv4, "other", 9090, ep("10.0.0.5", ptr.To(true))),
		slice(discoveryv1.AddressTypeFQDN, stats.PortName, 9090, ep("gatewayd.example", ptr.To(true))),
	})
	want := []string{"10.0.0.1:9090", "10.0.0.2:9090", "[fd00::4]:9090"}
	if !slices.Equal(got, want) {
		t.Fatalf("Addresses = %v, want %v", got, want)
	}
}

// serve answers handler on a real loopback socket until the test ends.
func serve(t *testing.T, handler http.HandlerFunc) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// TestDemandOf: the demand of every replica that answers is summed (the peak, when above in-flight), and a
// replica that fails, hangs or answers garbage makes the counts incomplete.
func TestDemandOf(t *testing.T) {
	body := func(s string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != stats.Path {
				http.NotFound(w, r)
				return
			}
			_, _ = io.WriteString(w, s)
		}
	}
	// The manager's own client (no redirects followed), with a shorter timeout so the hang costs less.
	a := &Autoscaler{}
	a.defaults()
	a.HTTP.Timeout = 200 * time.Millisecond
	good1 := serve(t, body(`{"window_seconds":2,"deployments":[{"namespace":"ws","deployment_id":"d","in_flight":7,"peak":9},{"namespace":"ws","deployment_id":"e","in_flight":1,"peak":1}]}`))
	good2 := serve(t, body(`{"window_seconds":2,"deployments":[{"namespace":"ws","deployment_id":"d","in_flight":5,"peak":5}]}`))
	ctx := context.Background()
	demand, complete := a.demandOf(ctx, []string{good1, good2})
	if !complete || demand[types.NamespacedName{Namespace: "ws", Name: "d"}] != 14 || demand[types.NamespacedName{Namespace: "ws", Name: "e"}] != 1 {
		t.Fatalf("two answering replicas: demand %v, complete %v; want d 14, e 1, complete", demand, complete)
	}
	release := make(chan struct{})
	defer close(release)
	for name, bad := range map[string]string{
		"500":     serve(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) }),
		"garbage": serve(t, body(`{"deployments":`)),
		"hangs": serve(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}),
		"redirect": serve(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://"+good1+stats.Path, http.StatusFound)
		}),
	} {
		demand, complete := a.demandOf(ctx, []string{good1, bad})
		if complete || demand[types.NamespacedName{Namespace: "ws", Name: "d"}] != 9 {
			t.Errorf("%s: demand %v, complete %v; want d 9 from the good replica, incomplete", name, demand, complete)
		}
	}
	if !strings.HasPrefix(stats.Path, "/internal/") {
		t.Fatalf("stats.Path %q must stay off the public routes", stats.Path)
	}
}
