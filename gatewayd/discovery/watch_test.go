package discovery

import (
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/modelgate/modelgate/test/kubetest"
)

func TestWatchReadyAddresses(t *testing.T) {
	ns := namespace(t)
	w := start(t, ns)
	web := []port{{name: "", port: 8080}}

	ch := w.Changed()
	a := create(t, slice(ns, "echo-a", "echo", discoveryv1.AddressTypeIPv4, web,
		ep{ip: "10.0.0.1"}, ep{ip: "10.0.0.2", ready: ptr.To(true)}, ep{ip: "10.0.0.3", ready: ptr.To(false)}))
	waitClosed(t, ch, "the first slice")
	create(t, slice(ns, "echo-b", "echo", discoveryv1.AddressTypeIPv4, web,
		ep{ip: "10.0.0.4", ready: ptr.To(true)}, ep{ip: "10.0.0.5", ready: ptr.To(false), terminating: true}))
	// An FQDN slice of the same Service has no IP to call: it is ignored.
	create(t, slice(ns, "echo-fqdn", "echo", discoveryv1.AddressTypeFQDN, web, ep{ip: "echo.example.com"}))
	eventually(t, w, "three ready addresses", func() bool { return w.Ready(ns, "echo", "") == 3 })
	want := []string{"10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.4:8080"}
	if got := slices.Sorted(maps.Keys(picks(t, w, ns, "echo", "", 300))); !slices.Equal(got, want) {
		t.Fatalf("picked %v, want exactly %v (never the not-ready or terminating ones)", got, want)
	}
	if n := w.Ready(ns, "other", ""); n != 0 {
		t.Errorf("Ready of a Service without slices = %d, want 0", n)
	}

	ch = w.Changed()
	a.Endpoints[2].Conditions.Ready = ptr.To(true)
	update(t, a)
	waitClosed(t, ch, "marking 10.0.0.3 ready")
	eventually(t, w, "four ready addresses", func() bool { return w.Ready(ns, "echo", "") == 4 })
	if got := picks(t, w, ns, "echo", "", 400); got["10.0.0.3:8080"] == 0 {
		t.Fatalf("picked %v, want 10.0.0.3:8080 among them once ready", got)
	}

	for _, name := range []string{"echo-a", "echo-b", "echo-fqdn"} {
		ch = w.Changed()
		remove(t, ns, name)
		waitClosed(t, ch, "deleting "+name)
	}
	eventually(t, w, "the Service to go", func() bool { return w.Ready(ns, "echo", "") == 0 })
	if addr, _, ok := w.Pick(ns, "echo", ""); ok {
		t.Fatalf("Pick after deleting every slice = %q, want ok false", addr)
	}
	eventually(t, w, "the Service to be removed", func() bool {
		_, found := (*w.services.Load())[serviceKey{namespace: ns, name: "echo"}]
		return !found
	})
}

func TestWatchPortByName(t *testing.T) {
	ns := namespace(t)
	w := start(t, ns)
	ready := []ep{{ip: "10.0.1.1"}, {ip: "10.0.1.2"}}
	create(t, slice(ns, "multi-1", "multi", discoveryv1.AddressTypeIPv4,
		[]port{{name: "http", port: 8080}, {name: "metrics", port: 9090}}, ready...))
	create(t, slice(ns, "single-1", "single", discoveryv1.AddressTypeIPv4, []port{{name: "http", port: 8000}}, ready...))
	create(t, slice(ns, "six-1", "six", discoveryv1.AddressTypeIPv6, []port{{name: "http", port: 8080}}, ep{ip: "fd00::1"}))
	eventually(t, w, "all three Services", func() bool {
		return w.Ready(ns, "multi", "http") == 2 && w.Ready(ns, "single", "http") == 2 && w.Ready(ns, "six", "http") == 1
	})

	for _, tc := range []struct {
		service, port string
		want          []string // nil: no ready address
	}{
		{"multi", "http", []string{"10.0.1.1:8080", "10.0.1.2:8080"}},
		{"multi", "metrics", []string{"10.0.1.1:9090", "10.0.1.2:9090"}},
		{"multi", "", nil}, // two named ports: "" names neither
		{"multi", "grpc", nil},
		{"single", "", []string{"10.0.1.1:8000", "10.0.1.2:8000"}}, // the only port
		{"single", "http", []string{"10.0.1.1:8000", "10.0.1.2:8000"}},
		{"six", "http", []string{"[fd00::1]:8080"}},
	} {
		if tc.want == nil {
			if addr, _, ok := w.Pick(ns, tc.service, tc.port); ok {
				t.Errorf("Pick(%s, %q) = %q, want ok false", tc.service, tc.port, addr)
			}
			continue
		}
		got := slices.Sorted(maps.Keys(picks(t, w, ns, tc.service, tc.port, 100)))
		if !slices.Equal(got, tc.want) {
			t.Errorf("Pick(%s, %q) picked %v, want %v", tc.service, tc.port, got, tc.want)
		}
	}
}

// TestWatchRealSockets points a Service's slices at two real HTTP servers and calls what Pick returns. The API
// server refuses loopback addresses in an EndpointSlice, so the servers listen on a non-loopback address of this
// host. Both listen on that one address on different ports, and a slice has one port list, so each gets a slice
// of its own, with the same port name.
func TestWatchRealSockets(t *testing.T) {
	ip := kubetest.EndpointAddress(t)
	ns := namespace(t)
	w := start(t)                  // all namespaces
	servers := map[string]string{} // address -> name
	for _, name := range []string{"one", "two"} {
		srv := serve(t, ip, name)
		ap := netip.MustParseAddrPort(srv.Listener.Addr().String())
		servers[ap.String()] = name
		create(t, slice(ns, "web-"+name, "web", family(ap.Addr()),
			[]port{{name: "http", port: int32(ap.Port())}}, ep{ip: ap.Addr().String(), ready: ptr.To(true)}))
	}
	eventually(t, w, "both servers", func() bool { return w.Ready(ns, "web", "http") == 2 })

	answered := map[string]int{}
	for range 40 {
		addr, release, ok := w.Pick(ns, "web", "http")
		if !ok {
			t.Fatal("Pick found no ready address")
		}
		body := get(t, "http://"+addr+"/")
		release()
		if body != servers[addr] {
			t.Fatalf("GET %s answered %q, want %q", addr, body, servers[addr])
		}
		answered[body]++
	}
	if answered["one"] == 0 || answered["two"] == 0 {
		t.Fatalf("answers %v, want both servers", answered)
	}
}

// serve starts an HTTP server on ip that answers every request with name.
func serve(t *testing.T, ip netip.Addr, name string) *httptest.Server {
	t.Helper()
	l, err := net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		t.Fatalf("failed to listen on %s: %v", ip, err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(rw, name)
	}))
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

func family(ip netip.Addr) discoveryv1.AddressType {
	if ip.Is4() {
		return discoveryv1.AddressTypeIPv4
	}
	return discoveryv1.AddressTypeIPv6
}

func get(t *testing.T, url string) string {
	t.Helper()
	// No proxy from the environment: the server is on this host.
	c := &http.Client{Transport: &http.Transport{}}
	resp, err := c.Get(url) //nolint:noctx // a local test server
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return string(b)
}
