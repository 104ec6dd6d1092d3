package stats

import (
	"net"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ServiceName reads a flag that names gatewayd's metrics Service: "namespace/name", or "name" in namespace (the
// pod's own, POD_NAMESPACE).
func ServiceName(flag, namespace string) types.NamespacedName {
	ns, name, ok := strings.Cut(flag, "/")
	if !ok {
		ns, name = namespace, flag
	}
	return types.NamespacedName{Namespace: ns, Name: name}
}

// Replicas are the gatewayd replicas behind its metrics Service: the ready endpoints (host:port) on port PortName
// of the Service's EndpointSlices, each once (an endpoint may sit in two slices while the EndpointSlice controller
// moves it). The manager's autoscaler reads their stats, and a replica reads the others' request logs.
func Replicas(slices []discoveryv1.EndpointSlice) []string {
	seen := map[string]bool{}
	var out []string
	for _, sl := range slices {
		if sl.AddressType != discoveryv1.AddressTypeIPv4 && sl.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		port := int32(0)
		for _, p := range sl.Ports {
			if p.Name != nil && *p.Name == PortName && p.Port != nil && (p.Protocol == nil || *p.Protocol == corev1.ProtocolTCP) {
				port = *p.Port
			}
		}
		if port == 0 {
			continue
		}
		for _, e := range sl.Endpoints {
			if (e.Conditions.Ready != nil && !*e.Conditions.Ready) || len(e.Addresses) == 0 {
				continue
			}
			addr := net.JoinHostPort(e.Addresses[0], strconv.Itoa(int(port)))
			if !seen[addr] {
				seen[addr] = true
				out = append(out, addr)
			}
		}
	}
	return out
}
