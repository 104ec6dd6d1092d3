package discovery

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/modelgate/modelgate/test/kubetest"
)

// The watch tests run against a real kube-apiserver and etcd (envtest). envtest runs no controller-manager, so
// no EndpointSlice controller writes slices for Services: the tests write the EndpointSlices themselves, labelled
// and shaped as that controller would write them.

var (
	env *kubetest.Env
	k8s kubernetes.Interface
)

// waitTimeout bounds every wait for the watch; it is a deadline against a hang, not a measure of speed.
const waitTimeout = 30 * time.Second

func TestMain(m *testing.M) {
	var err error
	env, err = kubetest.Start(kubetest.Options{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "The discovery tests need a control plane: %v\n", err)
		os.Exit(1)
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandler = rest.NoWarnings{} // the FQDN slice of a test is deprecated on purpose
	if k8s, err = kubernetes.NewForConfig(cfg); err != nil {
		fmt.Fprintf(os.Stderr, "Failed to create a clientset for envtest: %v\n", err)
		_ = env.Stop()
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "Failed to stop envtest: %v\n", err)
	}
	os.Exit(code)
}

// namespace creates a namespace of its own for one test.
func namespace(t *testing.T) string {
	t.Helper()
	ns, err := kubetest.NewNamespace(context.Background(), env.Client, "discovery-")
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// start runs a Watcher of namespaces until the test ends and waits for it to sync.
func start(t *testing.T, namespaces ...string) *Watcher {
	t.Helper()
	w := New(k8s, namespaces)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-w.Synced():
	case err := <-done:
		t.Fatalf("Run returned before sync: %v", err)
	case <-time.After(waitTimeout):
		t.Fatal("watcher did not sync")
	}
	return w
}

// waitClosed fails the test unless ch is closed in time.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitTimeout):
		t.Fatalf("Changed was not closed after %s", what)
	}
}

// eventually waits on Changed until cond holds.
func eventually(t *testing.T, w *Watcher, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		ch := w.Changed()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// ep is an endpoint of a test slice; ready nil leaves the condition unset, which the API reads as ready.
type ep struct {
	ip          string
	ready       *bool
	terminating bool
}

// port is a port of a test slice.
type port struct {
	name string
	port int32
}

// slice returns an EndpointSlice of service as the EndpointSlice controller writes it.
func slice(ns, name, service string, family discoveryv1.AddressType, ports []port, eps ...ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: service,
			discoveryv1.LabelManagedBy:   "endpointslice-controller.k8s.io",
		}},
		AddressType: family,
	}
	for _, p := range ports {
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptr.To(p.name), Port: ptr.To(p.port), Protocol: ptr.To(corev1.ProtocolTCP)})
	}
	for _, e := range eps {
		c := discoveryv1.EndpointConditions{Ready: e.ready}
		if e.terminating {
			c.Serving, c.Terminating = ptr.To(true), ptr.To(true)
		}
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{e.ip}, Conditions: c})
	}
	return s
}

func create(t *testing.T, s *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	t.Helper()
	out, err := k8s.DiscoveryV1().EndpointSlices(s.Namespace).Create(context.Background(), s, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("failed to create EndpointSlice %s: %v", s.Name, err)
	}
	return out
}

func update(t *testing.T, s *discoveryv1.EndpointSlice) {
	t.Helper()
	if _, err := k8s.DiscoveryV1().EndpointSlices(s.Namespace).Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("failed to update EndpointSlice %s: %v", s.Name, err)
	}
}

func remove(t *testing.T, ns, name string) {
	t.Helper()
	if err := k8s.DiscoveryV1().EndpointSlices(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("failed to delete EndpointSlice %s: %v", name, err)
	}
}

// picks calls Pick n times, releasing each call at once, and counts the addresses.
func picks(t *testing.T, w *Watcher, ns, service, portName string, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		addr, release, ok := w.Pick(ns, service, portName)
		if !ok {
			t.Fatalf("Pick(%s, %s, %q) found no ready address", ns, service, portName)
		}
		release()
		got[addr]++
	}
	return got
}
