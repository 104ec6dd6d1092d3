package discovery

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// These tests set a Service's slices directly, without the API server: they are about choosing, not watching.

const (
	testNS  = "ws"
	testSvc = "model"
)

// watcherWith returns a Watcher that has not run, holding a Service with one ready address per IP on port 8080.
func watcherWith(ips ...string) *Watcher {
	w := New(nil, nil)
	setIPs(w, ips...)
	return w
}

// setIPs replaces the Service's addresses, as an EndpointSlice update would.
func setIPs(w *Watcher, ips ...string) {
	eps := make([]ep, len(ips))
	for i, ip := range ips {
		eps[i] = ep{ip: ip}
	}
	s := slice(testNS, "s1", testSvc, discoveryv1.AddressTypeIPv4, []port{{name: "http", port: 8080}}, eps...)
	w.update(logr.Discard(), serviceKey{namespace: testNS, name: testSvc}, []*discoveryv1.EndpointSlice{s})
}

func (w *Watcher) inflight(addr string) int64 {
	e := (*w.services.Load())[serviceKey{namespace: testNS, name: testSvc}].byAddr()[addr]
	if e == nil {
		return -1
	}
	return e.inflight.Load()
}

func TestPickAvoidsTheBusyAddress(t *testing.T) {
	w := watcherWith("10.0.0.1")
	var held []func()
	for range 20 {
		_, release, _ := w.Pick(testNS, testSvc, "http")
		held = append(held, release)
	}
	// A second address arrives; the first keeps its 20 calls in flight across the rebuild.
	setIPs(w, "10.0.0.1", "10.0.0.2")
	if n := w.inflight("10.0.0.1:8080"); n != 20 {
		t.Fatalf("in flight on 10.0.0.1 after the rebuild = %d, want 20", n)
	}
	for range 1000 {
		addr, release, ok := w.Pick(testNS, testSvc, "http")
		if !ok || addr != "10.0.0.2:8080" {
			t.Fatalf("Pick = %q, %v; want the idle 10.0.0.2:8080", addr, ok)
		}
		release()
	}
	for _, release := range held {
		release()
		release() // a second call does nothing
	}
	if a, b := w.inflight("10.0.0.1:8080"), w.inflight("10.0.0.2:8080"); a != 0 || b != 0 {
		t.Fatalf("in flight after every release = %d and %d, want 0", a, b)
	}
}

func TestPickSpreads(t *testing.T) {
	const n, rounds = 8, 8000
	var ips []string
	for i := range n {
		ips = append(ips, fmt.Sprintf("10.0.0.%d", i+1))
	}
	w := watcherWith(ips...)
	got := picks(t, w, testNS, testSvc, "http", rounds)
	if len(got) != n {
		t.Fatalf("picked %d addresses (%v), want all %d", len(got), got, n)
	}
	// Idle addresses tie, and a tie goes to a uniform random choice: each expects rounds/n = 1000 picks,
	// with a standard deviation near 30.
	for addr, c := range got {
		if c < rounds/n/2 {
			t.Errorf("%s picked %d times of %d, want about %d", addr, c, rounds, rounds/n)
		}
	}
}

func TestPickWithoutAddresses(t *testing.T) {
	w := watcherWith()
	if _, _, ok := w.Pick(testNS, testSvc, "http"); ok {
		t.Error("Pick on a Service with no ready address: ok true, want false")
	}
	if _, _, ok := w.Pick(testNS, "missing", "http"); ok {
		t.Error("Pick on an unknown Service: ok true, want false")
	}
}

func BenchmarkPick(b *testing.B) {
	var ips []string
	for i := range 16 {
		ips = append(ips, fmt.Sprintf("10.0.0.%d", i+1))
	}
	w := watcherWith(ips...)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_, release, ok := w.Pick(testNS, testSvc, "http")
			if !ok {
				b.Fatal("no ready address")
			}
			release()
		}
	})
}

// TestWaitReady: a waiter parks until an address of its Service and port arrives, ignores changes of other
// Services, and leaves with ctx's error when ctx ends first.
func TestWaitReady(t *testing.T) {
	w := watcherWith()
	done := make(chan error, 1)
	go func() { done <- w.WaitReady(context.Background(), testNS, testSvc, "http") }()

	// Another Service's change wakes the waiter, which finds nothing for its own and waits again.
	other := slice(testNS, "o1", "other", discoveryv1.AddressTypeIPv4, []port{{name: "http", port: 8080}}, ep{ip: "10.0.9.1"})
	w.update(logr.Discard(), serviceKey{namespace: testNS, name: "other"}, []*discoveryv1.EndpointSlice{other})
	select {
	case err := <-done:
		t.Fatalf("WaitReady returned %v after another Service's change; want it still waiting", err)
	case <-time.After(50 * time.Millisecond):
	}

	setIPs(w, "10.0.0.1")
	if err := <-done; err != nil {
		t.Fatalf("WaitReady = %v once an address is ready, want nil", err)
	}
	// Ready already: at once.
	if err := w.WaitReady(context.Background(), testNS, testSvc, "http"); err != nil {
		t.Fatalf("WaitReady with an address ready = %v, want nil", err)
	}

	// Another port of the Service never becomes ready: ctx's error.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- w.WaitReady(ctx, testNS, testSvc, "grpc") }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitReady after cancel = %v, want context.Canceled", err)
	}
}
