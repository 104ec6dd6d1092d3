package inference

import "sync"

// inflight caps the calls of one key that hold a body in memory at once, so one key cannot fill gatewayd's
// memory with large bodies however fast its rate limits let it send them.
type inflight struct {
	mu  sync.Mutex
	max int
	n   map[string]int
}

func newInflight(max int) *inflight { return &inflight{max: max, n: map[string]int{}} }

// acquire takes a place for key, or reports false when key holds max already.
func (f *inflight) acquire(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n[key] >= f.max {
		return false
	}
	f.n[key]++
	return true
}

func (f *inflight) release(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n[key]--; f.n[key] <= 0 {
		delete(f.n, key)
	}
}
