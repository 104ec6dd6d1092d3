package limits

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// slots is the number of sub-slots a rolling window is cut into. See docs/limits.md for the algorithm and its
// worst-case error: a window counts the last slots+1 sub-slots, so it never admits more than the threshold in
// any interval of the window's length, and may hold capacity back for at most one sub-slot (window/slots).
const slots = 10

// slotWidth is the width of one sub-slot per rolling unit.
var slotWidth = [2]int64{
	Second: int64(time.Second) / slots,
	Minute: int64(time.Minute) / slots,
}

const nanosPerDay = int64(24 * time.Hour)

// Memory is the in-memory Store: one process, exact, all-or-nothing under per-cell locks taken in a fixed
// order. A cell holds every counter of one (namespace, metering group, slug), so a five-level chain takes at
// most five locks whatever the number of limits per level.
type Memory struct {
	mu    sync.Mutex
	cells map[cellKey]*cell
	// slugs lists the cells of each (namespace, group), so Release frees a group's cells without a scan.
	slugs  map[groupKey][]string
	nextID uint64
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory { return &Memory{cells: map[cellKey]*cell{}, slugs: map[groupKey][]string{}} }

type cellKey struct{ namespace, group, slug string }

type groupKey struct{ namespace, group string }

// Releaser is a Store whose counters live in this process and grow with the groups ever limited. gatewayd/reload
// calls Release with the groups that left a namespace's snapshot, once the view without them is served, so a
// long-running gatewayd under group churn holds only the counters of groups it serves (docs/limits.md).
type Releaser interface {
	// Release frees every counter of the metering groups of namespace. A group that comes back starts from zero.
	Release(namespace string, groups []string)
}

// cellLocked returns the cell of k, creating it on first use; m.mu is held.
func (m *Memory) cellLocked(k cellKey) *cell {
	c := m.cells[k]
	if c == nil {
		m.nextID++
		c = &cell{id: m.nextID}
		m.cells[k] = c
		g := groupKey{k.namespace, k.group}
		m.slugs[g] = append(m.slugs[g], k.slug)
	}
	return c
}

// Release implements Releaser. A plan still bound to a released cell (a call of the view just replaced) charges a
// cell no one reads again, which is what the group's deletion means.
func (m *Memory) Release(namespace string, groups []string) {
	m.release(namespace, groups, nil)
}

// release frees the cells of groups; each freed key is passed to freed, when not nil, with m.mu held.
func (m *Memory) release(namespace string, groups []string, freed func(cellKey)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, g := range groups {
		gk := groupKey{namespace, g}
		for _, slug := range m.slugs[gk] {
			k := cellKey{namespace, g, slug}
			delete(m.cells, k)
			if freed != nil {
				freed(k)
			}
		}
		delete(m.slugs, gk)
	}
}

// Cells is the number of counter cells held: one per (namespace, metering group, slug) bound and not released.
func (m *Memory) Cells() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.cells)
}

type cell struct {
	mu sync.Mutex
	// id orders lock acquisition, so two plans sharing cells can never deadlock.
	id   uint64
	roll [numRollTypes][2]window
	// cal are the calendar counters, [0] per UTC day and [1] per UTC month.
	cal [2][numTypes]periodCounter
}

// window is a sliding counter over slots+1 sub-slots: the current one and the slots before it.
type window struct {
	last  int64 // index of the newest sub-slot reached
	total int64 // sum of n
	n     [slots + 1]int64
}

// periodCounter is a calendar counter: the number of its period (Unit.Period) and its count in that period.
type periodCounter struct{ period, n int64 }

// advance moves the window to sub-slot idx, dropping the sub-slots that fell out. A clock that goes back is
// treated as standing still, so counts are never lost to skew.
func (w *window) advance(idx int64) {
	if idx <= w.last {
		return
	}
	if idx-w.last > slots {
		w.n = [slots + 1]int64{}
		w.total = 0
	} else {
		for i := w.last + 1; i <= idx; i++ {
			j := i % (slots + 1)
			w.total -= w.n[j]
			w.n[j] = 0
		}
	}
	w.last = idx
}

func (w *window) add(v int64) {
	w.n[w.last%(slots+1)] += v
	w.total += v
}

// retryAfter is how long until at least need units leave the window.
func (w *window) retryAfter(need int64, width, now int64) time.Duration {
	var released int64
	for i := w.last - slots; i <= w.last; i++ {
		released += w.n[((i%(slots+1))+(slots+1))%(slots+1)]
		if released >= need {
			// Sub-slot i stops counting once the window reaches i+slots+1.
			return time.Duration((i+slots+1)*width - now)
		}
	}
	return time.Duration((w.last+slots+1)*width - now)
}

// advance moves the counter to period p; a new period starts at zero. A clock that goes back keeps the newest
// period seen, as a rolling window does.
func (d *periodCounter) advance(p int64) {
	if p > d.period {
		d.period, d.n = p, 0
	}
}

// instant is the time of a call as the counters read it: the SECOND and MINUTE sub-slot indexes, the UTC day and
// month, and the time in nanoseconds.
type instant struct {
	sec, min int64
	period   [2]int64
	ns       int64
	t        time.Time
}

func instantOf(now time.Time) instant {
	ns := now.UnixNano()
	return instant{sec: ns / slotWidth[Second], min: ns / slotWidth[Minute], period: [2]int64{ns / nanosPerDay, Month.Period(now)}, ns: ns, t: now}
}

// memHandle is the bound form of a Plan: one ref per limit and the distinct cells in lock order.
type memHandle struct {
	refs  []ref
	cells []*cell
}

type ref struct {
	c *cell
	t Type
	u Unit
	// charge is false for a repeated bucket key, so one call never charges a counter twice.
	charge bool
}

// Bind resolves the cells of p, creating them on first use. Cells are never replaced while their group is served,
// which is what keeps counts across snapshots; Release frees them once it is not.
func (m *Memory) Bind(p *Plan) error {
	h := &memHandle{refs: make([]ref, len(p.Limits))}
	m.mu.Lock()
	for i, l := range p.Limits {
		if !valid(l.Key) {
			m.mu.Unlock()
			return fmt.Errorf("limit %s per %s is not one a store counts", l.Key.Type, l.Key.Unit)
		}
		c := m.cellLocked(cellKey{l.Key.Namespace, l.Key.Group, l.Key.Slug})
		// Plans are short (at most six limits per level), so a scan beats a map here.
		first := !slices.ContainsFunc(p.Limits[:i], func(o Limit) bool { return o.Key == l.Key })
		h.refs[i] = ref{c: c, t: l.Key.Type, u: l.Key.Unit, charge: first}
		if !slices.Contains(h.cells, c) {
			h.cells = append(h.cells, c)
		}
	}
	m.mu.Unlock()
	slices.SortFunc(h.cells, func(a, b *cell) int { return int(a.id) - int(b.id) })
	p.Handle = h
	return nil
}

var errUnbound = errors.New("limit plan is not bound to this store")

func (m *Memory) handle(p *Plan) (*memHandle, error) {
	h, ok := p.Handle.(*memHandle)
	if !ok {
		return nil, errUnbound
	}
	return h, nil
}

func lockAll(cells []*cell) {
	for _, c := range cells {
		c.mu.Lock()
	}
}

func unlockAll(cells []*cell) {
	for i := len(cells) - 1; i >= 0; i-- {
		cells[i].mu.Unlock()
	}
}

// current returns the count of r's bucket at now, after expiring what fell out of its window or period.
func (r *ref) current(at *instant) int64 {
	switch r.u {
	case Second:
		w := &r.c.roll[r.t][Second]
		w.advance(at.sec)
		return w.total
	case Minute:
		w := &r.c.roll[r.t][Minute]
		w.advance(at.min)
		return w.total
	default:
		d := &r.c.cal[r.u-Day][r.t]
		d.advance(at.period[r.u-Day])
		return d.n
	}
}

func (r *ref) add(v int64) {
	if r.u.Calendar() {
		r.c.cal[r.u-Day][r.t].n += v
		return
	}
	r.c.roll[r.t][r.u].add(v)
}

func (r *ref) retryAfter(threshold int64, at *instant) time.Duration {
	if r.u.Calendar() {
		return r.u.PeriodEnd(at.t).Sub(at.t)
	}
	w := &r.c.roll[r.t][r.u]
	return w.retryAfter(w.total+1-threshold, slotWidth[r.u], at.ns)
}

// valid reports whether a store counts k: a known type and unit, and a rolling unit only for REQUEST and TOKEN.
func valid(k BucketKey) bool {
	return k.Type < numTypes && k.Unit < numUnits && (k.Unit.Calendar() || k.Type < numRollTypes)
}

// Admit implements Store.
func (m *Memory) Admit(_ context.Context, p *Plan, now time.Time) (Result, error) {
	if len(p.Limits) == 0 {
		return Result{Allowed: true, Hit: -1}, nil
	}
	h, err := m.handle(p)
	if err != nil {
		return Result{}, err
	}
	at := instantOf(now)
	lockAll(h.cells)
	defer unlockAll(h.cells)
	for i := range h.refs {
		r := &h.refs[i]
		n := r.current(&at)
		threshold := p.Limits[i].Threshold
		// REQUEST needs room for this call; TOKEN and COST only refuse once exhausted, since what the call uses
		// is not known yet (docs/limits.md, "Overshoot of TOKEN and COST").
		if (r.t == Request && n+1 > threshold) || (r.t != Request && n >= threshold) {
			return Result{Hit: i, RetryAfter: r.retryAfter(threshold, &at)}, nil
		}
	}
	for i := range h.refs {
		if r := &h.refs[i]; r.t == Request && r.charge {
			r.add(1)
		}
	}
	return Result{Allowed: true, Hit: -1}, nil
}

// Settle implements Store.
func (m *Memory) Settle(_ context.Context, p *Plan, c Charge, now time.Time) error {
	if len(p.Limits) == 0 || (c.Tokens <= 0 && c.Cost <= 0) {
		return nil
	}
	h, err := m.handle(p)
	if err != nil {
		return err
	}
	at := instantOf(now)
	lockAll(h.cells)
	defer unlockAll(h.cells)
	for i := range h.refs {
		if r := &h.refs[i]; r.t != Request && r.charge {
			if v := c.amount(r.t); v > 0 {
				r.current(&at)
				r.add(v)
			}
		}
	}
	return nil
}

// Count returns the current count of one bucket; a bucket never charged reads 0.
func (m *Memory) Count(_ context.Context, k BucketKey, now time.Time) (int64, error) {
	return m.Usage(k, now), nil
}

// Usage is Count without a context, for tests and callers that hold a *Memory.
func (m *Memory) Usage(k BucketKey, now time.Time) int64 {
	m.mu.Lock()
	c := m.cells[cellKey{k.Namespace, k.Group, k.Slug}]
	m.mu.Unlock()
	if c == nil {
		return 0
	}
	if !valid(k) {
		return 0
	}
	at := instantOf(now)
	r := ref{c: c, t: k.Type, u: k.Unit}
	c.mu.Lock()
	defer c.mu.Unlock()
	return r.current(&at)
}

var (
	_ Store    = (*Memory)(nil)
	_ Releaser = (*Memory)(nil)
)
