// Package testutil holds the small helpers that tests and benchmarks across the module share: the process's CPU
// time, the one percentile of the benchmarks' figures, JSON equality of golden files, a free loopback port, and the EndpointSlice the
// EndpointSlice controller would write. It imports nothing of the module, so any package's tests can use it.
package testutil

import (
	"encoding/json"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// ProcessCPU is the CPU time this process has used, user and system, all threads (the collector's included): the
// figure to compare on a machine shared with other work, where wall time follows the load.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Percentile is the nearest-rank percentile q (0..1) of ds, which it sorts; 0 for none. Every figure of
// docs/benchmarks.md is read with it.
func Percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(q*float64(len(ds))+0.5) - 1
	return ds[max(0, min(i, len(ds)-1))]
}

// JSONEqual reports whether a and b are JSON documents of the same value, whatever their spacing and member
// order: how a golden test compares a translated body with the documented one.
func JSONEqual(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// Millis is d in milliseconds, to the microsecond, the unit benchmarks report latencies in.
func Millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// FreePort returns a loopback TCP port that was free a moment ago, for a server that takes its port on the
// command line or in a config file rather than a listener.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Fataler is the part of a testing.TB (or GinkgoT()) that MustFreePort needs.
type Fataler interface {
	Helper()
	Fatal(args ...any)
}

// MustFreePort is FreePort that fails t when no port is free.
func MustFreePort(t Fataler) int {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// Endpoint is one address of an EndpointSlice and whether it is ready (and serving).
type Endpoint struct {
	Addr  string
	Ready bool
}

// EndpointSlice is a slice that the EndpointSlice controller would write for Service service: one endpoint per
// Endpoint, on the Service's port named portName. The address type is the first address's family.
func EndpointSlice(ns, name, service, portName string, port int32, endpoints ...Endpoint) *discoveryv1.EndpointSlice {
	family := discoveryv1.AddressTypeIPv4
	if len(endpoints) > 0 {
		if a, err := netip.ParseAddr(endpoints[0].Addr); err == nil && a.Is6() {
			family = discoveryv1.AddressTypeIPv6
		}
	}
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			discoveryv1.LabelServiceName: service, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
		AddressType: family,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(portName), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, e := range endpoints {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{e.Addr},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(e.Ready), Serving: ptr.To(e.Ready), Terminating: ptr.To(false)}})
	}
	return s
}
