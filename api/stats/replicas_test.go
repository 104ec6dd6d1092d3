package stats

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

func TestReplicas(t *testing.T) {
	slice := func(typ discoveryv1.AddressType, port string, number int32, eps ...discoveryv1.Endpoint) discoveryv1.EndpointSlice {
		return discoveryv1.EndpointSlice{AddressType: typ, Endpoints: eps,
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)},
				{Name: ptr.To(port), Port: ptr.To(number), Protocol: ptr.To(corev1.ProtocolTCP)}}}
	}
	ep := func(addr string, ready *bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
	}
	got := Replicas([]discoveryv1.EndpointSlice{
		slice(discoveryv1.AddressTypeIPv4, PortName, 9090, ep("10.0.0.1", ptr.To(true)), ep("10.0.0.2", nil), ep("10.0.0.3", ptr.To(false))),
		// The same endpoint in a second slice while it moves: read once.
		slice(discoveryv1.AddressTypeIPv4, PortName, 9090, ep("10.0.0.1", ptr.To(true))),
		slice(discoveryv1.AddressTypeIPv6, PortName, 9090, ep("fd00::4", ptr.To(true))),
		// No metrics port, or not an IP: not a replica to read.
		slice(discoveryv1.AddressTypeIPv4, "other", 9090, ep("10.0.0.5", ptr.To(true))),
		slice(discoveryv1.AddressTypeFQDN, PortName, 9090, ep("gatewayd.example", ptr.To(true))),
	})
	want := []string{"10.0.0.1:9090", "10.0.0.2:9090", "[fd00::4]:9090"}
	if !slices.Equal(got, want) {
		t.Fatalf("Replicas = %v, want %v", got, want)
	}
}
