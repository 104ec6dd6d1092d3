package inference

import "sync"

// inflight caps the body bytes one key holds in memory at once, so one key cannot fill gatewayd's memory with
// large bodies however fast its rate limits let it send them, while thousands of small concurrent calls of one
// key still pass.
type inflight struct {
	mu  sync.Mutex
	max int64
	n   map[string]int64
}

func newInflight(max int64) *inflight { return &inflight{max: max, n: map[string]int64{}} }

// acquire reserves size bytes for key, or reports false when that would take key past max. A key holding
// nothing may always reserve, so one body up to the body cap is never refused.
func (f *inflight) acquire(key string, size int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	held := f.n[key]
	if held > 0 && held+size > f.max {
		return false
	}
	f.n[key] = held + size
	return true
}

func (f *inflight) release(key string, size int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n[key] -= size; f.n[key] <= 0 {
		delete(f.n, key)
	}
}
