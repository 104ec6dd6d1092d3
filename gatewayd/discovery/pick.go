package discovery

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
)

// Pick chooses a ready address ("ip:port", an IPv6 address in brackets) of the Service namespace/service on the
// port named portName ("" means the slice's only port, or its port with an empty name). It takes two distinct
// random ready addresses and keeps the one with fewer calls in flight from this Watcher (power of two choices),
// then counts the call in flight there until release is called. The caller calls release once when the call
// ends; a second call does nothing. ok is false when the Service has no ready address on that port.
func (w *Watcher) Pick(namespace, service, portName string) (addr string, release func(), ok bool) {
	eps := w.endpoints(namespace, service, portName)
	if len(eps) == 0 {
		return "", nil, false
	}
	e := choose(eps)
	return e.addr, e.acquire(), true
}

// Ready returns how many ready addresses the Service namespace/service has on the port named portName.
func (w *Watcher) Ready(namespace, service, portName string) int {
	return len(w.endpoints(namespace, service, portName))
}

// endpoints returns the current ready endpoints of a Service port. The list is immutable.
func (w *Watcher) endpoints(namespace, service, portName string) []*endpoint {
	s := (*w.services.Load())[serviceKey{namespace: namespace, name: service}]
	if s == nil {
		return nil
	}
	return s.ports[portName]
}

// choose returns the less loaded of two distinct random endpoints of eps, which is not empty. Ties go to the
// first, itself random.
func choose(eps []*endpoint) *endpoint {
	n := len(eps)
	if n == 1 {
		return eps[0]
	}
	i := rand.IntN(n)
	j := rand.IntN(n - 1)
	if j >= i {
		j++
	}
	if eps[j].inflight.Load() < eps[i].inflight.Load() {
		return eps[j]
	}
	return eps[i]
}

// acquire counts one more call in flight to e and returns the function that ends it, at most once.
func (e *endpoint) acquire() func() {
	e.inflight.Add(1)
	var done atomic.Bool
	return func() {
		if done.CompareAndSwap(false, true) {
			e.inflight.Add(-1)
		}
	}
}

// WaitReady blocks until the Service namespace/service has a ready address on the port named portName, or ctx
// is done, and then returns ctx's error. It wakes on each change of an address set (Changed), never by polling,
// so a held call costs a parked goroutine and nothing else. An address seen ready may be gone again by the time
// the caller picks: pick, and wait again when Pick finds none.
func (w *Watcher) WaitReady(ctx context.Context, namespace, service, portName string) error {
	for {
		// The signal first, then the check: a change between the two closes the signal taken.
		changed := w.Changed()
		if len(w.endpoints(namespace, service, portName)) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}
