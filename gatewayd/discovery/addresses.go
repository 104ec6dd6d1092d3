package discovery

import (
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// endpoint is one ready address and the calls this gatewayd has in flight to it. A rebuild of the address list
// keeps the endpoint of an address that stays, so its count survives.
type endpoint struct {
	addr     string
	inflight atomic.Int64
}

// service is the ready endpoints of one Service by port name, each list sorted by address. It is immutable once
// built: a change builds a new one.
type service struct {
	ports map[string][]*endpoint
}

// build merges the EndpointSlices of one Service (from) into its ready endpoints per port, reusing old's
// endpoint of every address that stays. It returns nil when there are no slices, which removes the Service.
func build(old *service, from []*discoveryv1.EndpointSlice) *service {
	if len(from) == 0 {
		return nil
	}
	b := builder{s: &service{ports: map[string][]*endpoint{}}, pool: old.byAddr(), seen: map[portAddr]bool{}}
	for _, sl := range from {
		b.add(sl)
	}
	for _, eps := range b.s.ports {
		slices.SortFunc(eps, func(a, b *endpoint) int { return strings.Compare(a.addr, b.addr) })
	}
	return b.s
}

// portAddr is an address under a port name.
type portAddr struct{ port, addr string }

// builder collects the ready endpoints of one Service's slices.
type builder struct {
	s    *service
	pool map[string]*endpoint // endpoints by address, old ones first
	seen map[portAddr]bool
}

// add adds the ready endpoints of an IPv4 or IPv6 slice. The same endpoint may be in two slices for a while, as
// the EndpointSlice controller moves it: it is added once.
func (b *builder) add(sl *discoveryv1.EndpointSlice) {
	if sl.AddressType != discoveryv1.AddressTypeIPv4 && sl.AddressType != discoveryv1.AddressTypeIPv6 {
		return
	}
	ips := readyIPs(sl)
	for name, port := range portsOf(sl) {
		if _, ok := b.s.ports[name]; !ok {
			b.s.ports[name] = nil // a known port, even with no ready address
		}
		for _, ip := range ips {
			k := portAddr{port: name, addr: net.JoinHostPort(ip, strconv.Itoa(int(port)))}
			if !b.seen[k] {
				b.seen[k] = true
				b.s.ports[name] = append(b.s.ports[name], reuse(b.pool, k.addr))
			}
		}
	}
}

// portsOf returns the TCP ports of a slice by the names Pick finds them under: its name, and "" too when it is
// the slice's only port. A port without a number (all ports) cannot be dialled and is left out.
func portsOf(sl *discoveryv1.EndpointSlice) map[string]int32 {
	ports := make(map[string]int32, len(sl.Ports)+1)
	for _, p := range sl.Ports {
		if p.Port == nil || (p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP) {
			continue
		}
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		ports[name] = *p.Port
		if len(sl.Ports) == 1 {
			ports[""] = *p.Port
		}
	}
	return ports
}

// readyIPs returns the address of every ready endpoint. Ready nil means ready (per the EndpointSlice API); an
// endpoint that is serving but terminating is not ready and is not picked. Only the first address counts: the
// API gives the others no meaning.
func readyIPs(sl *discoveryv1.EndpointSlice) []string {
	ips := make([]string, 0, len(sl.Endpoints))
	for _, e := range sl.Endpoints {
		if len(e.Addresses) == 0 || (e.Conditions.Ready != nil && !*e.Conditions.Ready) {
			continue
		}
		ips = append(ips, e.Addresses[0])
	}
	return ips
}

// reuse returns the endpoint of addr from pool, adding a new one when there is none.
func reuse(pool map[string]*endpoint, addr string) *endpoint {
	if e, ok := pool[addr]; ok {
		return e
	}
	e := &endpoint{addr: addr}
	pool[addr] = e
	return e
}

// byAddr returns s's endpoints by address, empty for a nil s.
func (s *service) byAddr() map[string]*endpoint {
	pool := map[string]*endpoint{}
	if s == nil {
		return pool
	}
	for _, eps := range s.ports {
		for _, e := range eps {
			pool[e.addr] = e
		}
	}
	return pool
}

// equal reports whether s and o hold the same addresses on the same ports.
func (s *service) equal(o *service) bool {
	if s == nil || o == nil {
		return s == o
	}
	if len(s.ports) != len(o.ports) {
		return false
	}
	for name, eps := range s.ports {
		others, ok := o.ports[name]
		if !ok || !slices.EqualFunc(eps, others, func(a, b *endpoint) bool { return a.addr == b.addr }) {
			return false
		}
	}
	return true
}

// count returns the number of distinct ready addresses over all ports.
func (s *service) count() int { return len(s.byAddr()) }
