package discovery

import (
	"maps"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// addrs returns the addresses of s by port name.
func addrs(s *service) map[string][]string {
	out := map[string][]string{}
	for _, name := range slices.Sorted(maps.Keys(s.ports)) {
		out[name] = []string{}
		for _, e := range s.ports[name] {
			out[name] = append(out[name], e.addr)
		}
	}
	return out
}

func TestBuildMergesSlices(t *testing.T) {
	a := slice(testNS, "a", testSvc, discoveryv1.AddressTypeIPv4, []port{{name: "http", port: 80}, {name: "grpc", port: 90}},
		ep{ip: "10.0.0.2"}, ep{ip: "10.0.0.1"})
	// The controller moving 10.0.0.2 from a to b: it is in both for a while.
	b := slice(testNS, "b", testSvc, discoveryv1.AddressTypeIPv4, []port{{name: "http", port: 80}, {name: "grpc", port: 90}},
		ep{ip: "10.0.0.2"}, ep{ip: "10.0.0.3", ready: ptr.To(false)})
	// Ports that cannot be dialled over TCP are left out.
	c := slice(testNS, "c", testSvc, discoveryv1.AddressTypeIPv4, nil, ep{ip: "10.0.0.9"})
	c.Ports = []discoveryv1.EndpointPort{
		{Name: ptr.To("dns"), Port: ptr.To[int32](53), Protocol: ptr.To(corev1.ProtocolUDP)},
		{Name: ptr.To("all")},
	}
	six := slice(testNS, "six", testSvc, discoveryv1.AddressTypeIPv6, []port{{name: "http", port: 80}}, ep{ip: "fd00::1"})

	got := build(nil, []*discoveryv1.EndpointSlice{a, b, c, six})
	want := map[string][]string{
		"":     {"[fd00::1]:80"}, // the IPv6 slice's only port
		"grpc": {"10.0.0.1:90", "10.0.0.2:90"},
		"http": {"10.0.0.1:80", "10.0.0.2:80", "[fd00::1]:80"},
	}
	if diff := cmp.Diff(want, addrs(got)); diff != "" {
		t.Fatalf("build (-want +got):\n%s", diff)
	}

	kept := got.byAddr()["10.0.0.1:80"]
	kept.inflight.Add(3)
	next := build(got, []*discoveryv1.EndpointSlice{a})
	if e := next.byAddr()["10.0.0.1:80"]; e != kept || e.inflight.Load() != 3 {
		t.Fatal("a rebuild did not keep the endpoint and in-flight count of an address that stays")
	}
	if !next.equal(build(nil, []*discoveryv1.EndpointSlice{a})) || next.equal(got) {
		t.Fatal("equal does not compare the address sets")
	}
	if build(got, nil) != nil {
		t.Fatal("build of no slices is not nil")
	}
}
