package limits

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"

	"github.com/modelgate/modelgate/gatewayd/state/redisclient"
)

// ErrUnavailable wraps every failure to reach the shared counters, so gatewayd can answer 503
// limits_unavailable (fail closed) instead of guessing.
var ErrUnavailable = errors.New("limit counters are unavailable")

// batchScript runs every call of one pipeline (checks, settles and counts, in queue order) in one script
// call. It runs the same sub-slotted window as Memory (see docs/limits.md) over one header key per (namespace,
// group, slug) holding what a check reads of that pair's six counters, so its Redis calls grow with the pairs a
// batch touches, not with its limits or its calls: one MGET for every header, one write per header charged, and
// a ring only when a window moves on while it holds counts. A check charges its whole plan or nothing. Every
// key gets a TTL: a rolling counter lives one window plus one slot after it entered its newest slot (when it
// would count zero anyway), a DAY one two days, a MONTH one 33 days. See redis_batch.lua for its arguments and answers.
//
//go:embed redis_batch.lua
var batchSource string

// bucketsSource is the prelude of the script: the counter layout and its window arithmetic.
//
//go:embed redis_buckets.lua
var bucketsSource string

var batchScript = redis.NewScript(bucketsSource + batchSource)

// maxBatch bounds the calls of one script call, so a burst of thousands of calls does not hold Redis in one
// script for long or pass more keys than Lua unpacks at once; a longer queue goes as several script calls in
// the same pipeline, in order.
const maxBatch = 64

// settleDelay is how long queued tokens wait for a check to carry them to Redis before they leave on their own.
// Under load a check always comes sooner, so settles cost no round trip of their own; when idle, settles leave
// in at most one script call per settleDelay.
const settleDelay = 2 * time.Millisecond

// RedisOptions configure a Redis store.
type RedisOptions struct {
	// Prefix starts every key, so several installations can share one Redis; "mg" when empty.
	Prefix string
	// FailOpen admits calls when Redis cannot be reached instead of returning ErrUnavailable. Off by default:
	// a customer's contract limit must hold even when the counters are down.
	FailOpen bool
	// Log receives the failures of queued settles, which no caller waits for; discarded when unset.
	Log logr.Logger
}

// Redis is the shared Store for several gatewayd replicas: the counters live in Redis (standalone, Sentinel or
// Cluster) and every check runs inside a Lua script, so the all-or-nothing charge is atomic across replicas.
// go-redis reconnects on its own after an outage and follows a failover or a moved slot.
//
// A plan's keys are those of one workspace (its group's ancestor chain and the workspace key's tier), so on a
// cluster they carry the workspace's namespace as their hash tag and one script charges the whole plan in one
// slot; a batch's calls are then split into one script call per namespace, still in one pipeline (go-redis
// sends each node its part). On standalone Redis and Sentinel nothing is split and the keys are untagged, as
// before (see docs/decisions.md, "Redis Cluster and Sentinel").
//
// Calls are batched: whichever caller finds no script call in flight sends every queued call (checks, counts
// and settles) as one script call, and the callers that queued meanwhile wait for its answers, so concurrent
// checks share a round trip and Redis reads and writes each header once for all of them, while a lone check
// waits for nobody. Settle only queues its tokens; see Flush.
type Redis struct {
	client redis.UniversalClient
	opts   RedisOptions
	// clustered is true on Redis Cluster: keys are tagged by namespace and batches split by it.
	clustered bool

	mu sync.Mutex
	// idle is signalled when a pipeline ends, for Flush.
	idle *sync.Cond
	// busy is true while a goroutine owns the queue and is sending it.
	busy    bool
	calls   []*call
	settles []settle
	// kick sends queued settles that no check carried within settleDelay; armed is true while it is set.
	kick  *time.Timer
	armed bool
	// queued and answered count the settles ever queued and answered by Redis (in queue order, since pipelines
	// run one at a time); settleErr is the first failure since the last Flush.
	queued, answered uint64
	settleErr        error
	// loaded is true once the script is known to be in Redis's script cache.
	loaded atomic.Bool
}

// call is a check or a count whose caller waits for its answer.
type call struct {
	item
	answer
	done chan struct{}
}

// item is one call of the batch script: its kind ('a' check, 's' settle, 'c' count), its six time integers
// (see redis_batch.lua), its keys and, per key, its codes, followed for a check by the plan's ranks,
// thresholds and format. ns is the namespace of its keys, which a cluster's batches are split by.
type item struct {
	ns    string
	kind  string
	times [6]int64
	keys  []string
	args  []any
}

// settle is a queued charge: times holds the sub-slots, the day, the month, the tokens and the cost. Settles of
// the same plan in the same sub-slots, day and month are summed into one, which charges the same counters the
// same amounts.
type settle struct {
	h     *redisHandle
	times [6]int64
}

// NewRedis returns a store over client.
func NewRedis(client redis.UniversalClient, opts RedisOptions) *Redis {
	if opts.Prefix == "" {
		opts.Prefix = "mg"
	}
	r := &Redis{client: client, opts: opts, clustered: redisclient.Clustered(client)}
	if r.clustered {
		// A pipelined SCRIPT LOAD reaches one node of a cluster, not the one a batch runs on: each node learns
		// the script from the first batch it refuses with NOSCRIPT, sent again with its source.
		r.loaded.Store(true)
	}
	r.idle = sync.NewCond(&r.mu)
	return r
}

// redisHandle is the bound form of a Plan: one key per (group, slug) and the script arguments of its calls.
type redisHandle struct {
	// ns is the namespace of every key.
	ns   string
	keys []string
	// admit is, per key, the codes of its limits (one byte each, code + 10 for a repeated counter), then the plan
	// index of each of those limits as two bytes, then their thresholds packed: see redis_batch.lua.
	admit []any
	// settleKeys are the keys with a TOKEN or COST limit and settle their TOKEN and COST codes, each once.
	settleKeys []string
	settle     []any
}

// code numbers the ten counters of a (group, slug), as the scripts do: 0..3 the rolling ones, 4..6 the DAY and
// 7..9 the MONTH REQUEST, TOKEN and COST counters.
func code(k BucketKey) int {
	switch k.Unit {
	case Day:
		return 4 + int(k.Type)
	case Month:
		return 7 + int(k.Type)
	}
	return 2*int(k.Type) + int(k.Unit)
}

// repeated marks the code of a counter that an earlier limit of the plan already charges.
const repeated = 10

// Bind implements Store.
func (r *Redis) Bind(p *Plan) error {
	if len(p.Limits) > 1<<16 {
		return fmt.Errorf("plan has %d limits, more than the Redis store takes (%d)", len(p.Limits), 1<<16)
	}
	h := &redisHandle{}
	if len(p.Limits) > 0 {
		h.ns = p.Limits[0].Key.Namespace
	}
	// byKey lists, per key in order of first use, the plan indexes of its limits.
	var byKey [][]int
	for i, l := range p.Limits {
		if !valid(l.Key) {
			return fmt.Errorf("limit %s per %s is not one a store counts", l.Key.Type, l.Key.Unit)
		}
		if l.Key.Namespace != h.ns {
			// One script charges the whole plan, which on a cluster must stay in its namespace's slot.
			return fmt.Errorf("plan spans namespaces %s and %s; a plan charges one workspace", h.ns, l.Key.Namespace)
		}
		key := r.pairKey(l.Key)
		k := slices.Index(h.keys, key)
		if k < 0 {
			k = len(h.keys)
			h.keys = append(h.keys, key)
			byKey = append(byKey, nil)
		}
		byKey[k] = append(byKey[k], i)
	}
	var ranks, thresholds []byte
	for k, idx := range byKey {
		var codes, settle []byte
		for _, i := range idx {
			l := p.Limits[i]
			c := code(l.Key)
			if slices.ContainsFunc(p.Limits[:i], func(o Limit) bool { return o.Key == l.Key }) {
				codes = append(codes, byte('0'+c+repeated))
			} else {
				codes = append(codes, byte('0'+c))
				if l.Key.Type != Request {
					settle = append(settle, byte('0'+c))
				}
			}
			ranks = append(ranks, byte(i>>8), byte(i))
			thresholds = binary.LittleEndian.AppendUint64(thresholds, uint64(l.Threshold))
		}
		h.admit = append(h.admit, string(codes))
		if len(settle) > 0 {
			h.settleKeys = append(h.settleKeys, h.keys[k])
			h.settle = append(h.settle, string(settle))
		}
	}
	// Thresholds travel packed, so the script decodes them with one call instead of parsing decimals.
	h.admit = append(h.admit, string(ranks), string(thresholds), "<"+strings.Repeat("l", len(p.Limits)))
	p.Handle = h
	return nil
}

// pairKey names the counters of a (namespace, group, slug), the namespace as the hash tag on a cluster.
// Namespaces and group names are DNS labels without ':' or braces, so the layout is unambiguous even when a slug
// contains one.
func (r *Redis) pairKey(k BucketKey) string {
	return r.opts.Prefix + ":" + redisclient.Tag(r.clustered, k.Namespace) + ":" + k.Group + ":" + k.Slug
}

func (r *Redis) handle(p *Plan) (*redisHandle, error) {
	h, ok := p.Handle.(*redisHandle)
	if !ok {
		return nil, errUnbound
	}
	return h, nil
}

// timesAt is the time part of a check or a count at now: the SECOND and MINUTE sub-slot indexes, the UTC day and
// month, the time in microseconds and the first instant of the next month in microseconds (a MONTH refusal's
// retry). Lua numbers are doubles, so time travels as slot indexes and microseconds, which stay exact.
func timesAt(now time.Time) [6]int64 {
	at := instantOf(now)
	return [6]int64{at.sec, at.min, at.period[0], at.period[1], at.ns / 1000, Month.PeriodEnd(now).UnixMicro()}
}

// settleTimes is the time part of a settle of c at now: the tokens and the cost take the place of the two times.
func settleTimes(now time.Time, c Charge) [6]int64 {
	t := timesAt(now)
	t[4], t[5] = c.Tokens, c.Cost
	return t
}

// Admit implements Store.
func (r *Redis) Admit(ctx context.Context, p *Plan, now time.Time) (Result, error) {
	if len(p.Limits) == 0 {
		return Result{Allowed: true, Hit: -1}, nil
	}
	h, err := r.handle(p)
	if err != nil {
		return Result{}, err
	}
	c := r.do(ctx, item{ns: h.ns, kind: "a", times: timesAt(now), keys: h.keys, args: h.admit})
	if c.err != nil {
		if r.opts.FailOpen {
			return Result{Allowed: true, Hit: -1}, nil
		}
		return Result{}, fmt.Errorf("%w: limit check: %w", ErrUnavailable, c.err)
	}
	if c.out[0] < 0 {
		return Result{Allowed: true, Hit: -1}, nil
	}
	if c.out[0] >= int64(len(p.Limits)) {
		return Result{}, fmt.Errorf("limit check answered %v for a plan of %d limits", c.out, len(p.Limits))
	}
	return Result{Hit: int(c.out[0]), RetryAfter: time.Duration(c.out[1]) * time.Microsecond}, nil
}

// Settle implements Store. It queues the charge and returns at once: it reaches Redis ahead of the next check or
// count, or after settleDelay when none comes, so a check on this gatewayd always counts it and another
// replica's within about settleDelay plus a round trip (see "Overshoot of TOKEN and COST" in docs/limits.md). A
// settle that fails is logged and reported by the next Flush.
func (r *Redis) Settle(_ context.Context, p *Plan, c Charge, now time.Time) error {
	if len(p.Limits) == 0 || (c.Tokens <= 0 && c.Cost <= 0) {
		return nil
	}
	h, err := r.handle(p)
	if err != nil {
		return err
	}
	if len(h.settleKeys) == 0 {
		return nil
	}
	s := settle{h: h, times: settleTimes(now, Charge{Tokens: max(c.Tokens, 0), Cost: max(c.Cost, 0)})}
	r.mu.Lock()
	r.settles = append(r.settles, s)
	r.queued++
	if !r.busy {
		r.arm()
	}
	r.mu.Unlock()
	return nil
}

// arm sets the timer that sends queued settles no check carried. Call with mu held.
func (r *Redis) arm() {
	if r.armed {
		return
	}
	r.armed = true
	if r.kick == nil {
		r.kick = time.AfterFunc(settleDelay, r.sendSettles)
		return
	}
	r.kick.Reset(settleDelay)
}

// sendSettles sends the queued settles unless a pipeline in flight will see to them.
func (r *Redis) sendSettles() {
	r.mu.Lock()
	r.armed = false
	if r.busy || len(r.settles) == 0 {
		r.mu.Unlock()
		return
	}
	r.busy = true
	r.mu.Unlock()
	r.send()
}

// Flush waits until every settle queued so far has been answered by Redis, and returns the failures of the
// settles since the last Flush.
func (r *Redis) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for target := r.queued; r.answered < target; {
		if !r.busy && len(r.settles) > 0 {
			// Send them now rather than wait for the timer.
			r.busy = true
			r.mu.Unlock()
			r.send()
			r.mu.Lock()
			continue
		}
		r.idle.Wait()
	}
	err := r.settleErr
	r.settleErr = nil
	return err
}

// Close flushes the queued settles, so a graceful stop charges every token it was told of. It does not close
// the client, which the billing events share.
func (r *Redis) Close() error { return r.Flush() }

// do queues a check or a count and waits for its answer. When no script call is in flight the caller sends the
// queue itself, so a lone call costs one round trip and no hand-off.
func (r *Redis) do(ctx context.Context, it item) *call {
	c := &call{item: it}
	if err := ctx.Err(); err != nil {
		// The caller is gone: charge nothing for it.
		c.err = err
		return c
	}
	c.done = make(chan struct{})
	r.mu.Lock()
	r.calls = append(r.calls, c)
	lead := !r.busy
	r.busy = true
	r.mu.Unlock()
	if lead {
		r.send()
	}
	select {
	case <-c.done:
		return c
	case <-ctx.Done():
		// The call may still run: like a call whose answer was lost, it can have charged.
		return &call{answer: answer{err: ctx.Err()}}
	}
}

// send runs everything queued, then hands the queue to a new goroutine when checks or counts arrived meanwhile,
// so the caller that sent it returns with its answer. Settles left alone wait for the next check or the timer.
func (r *Redis) send() {
	r.mu.Lock()
	calls, settles := r.calls, r.settles
	r.calls, r.settles = nil, nil
	r.mu.Unlock()

	failed := r.exec(calls, settles)

	r.mu.Lock()
	r.answered += uint64(len(settles))
	if failed != nil && r.settleErr == nil {
		r.settleErr = failed
	}
	more := len(r.calls) > 0
	r.busy = more
	if !more && len(r.settles) > 0 {
		r.arm()
	}
	r.idle.Broadcast()
	r.mu.Unlock()
	if more {
		go r.send()
	}
}

// exec runs the settles first (summed per plan, sub-slots, day and month), then the calls, in the order they were
// queued, so a settle is counted by every check queued after it. It answers the calls and returns the failure of
// the settles, if any.
func (r *Redis) exec(calls []*call, settles []settle) error {
	ctx := context.Background()
	merged := settles[:0]
	for _, s := range settles {
		i := slices.IndexFunc(merged, func(m settle) bool {
			// Same plan, sub-slots, day and month; times[4] and [5] are the tokens and the cost.
			return m.h == s.h && [4]int64(m.times[:4]) == [4]int64(s.times[:4])
		})
		if i >= 0 {
			merged[i].times[4] += s.times[4]
			merged[i].times[5] += s.times[5]
		} else {
			merged = append(merged, s)
		}
	}
	items := make([]*item, 0, len(merged)+len(calls))
	for i := range merged {
		s := &merged[i]
		items = append(items, &item{ns: s.h.ns, kind: "s", times: s.times, keys: s.h.settleKeys, args: s.h.settle})
	}
	for _, c := range calls {
		items = append(items, &c.item)
	}
	answers := r.run(ctx, items)
	var failed error
	for i, a := range answers {
		if i >= len(merged) {
			c := calls[i-len(merged)]
			c.answer = a
			close(c.done)
			continue
		}
		if a.err != nil {
			s := merged[i]
			r.opts.Log.Error(a.err, "Failed to charge tokens and cost", "keys", s.h.settleKeys, "tokens", s.times[4], "costMicroUSD", s.times[5])
			if failed == nil {
				failed = fmt.Errorf("%w: settle: %w", ErrUnavailable, a.err)
			}
		}
	}
	return failed
}

// answer is the script's answer to one item: out (see redis_batch.lua) when err is nil.
type answer struct {
	out [2]int64
	err error
}

// run sends items as script calls of at most maxBatch items each, in one pipeline, and returns their answers in
// order. On a cluster each script call holds the items of one namespace, in their order. A Redis that restarted
// (or a primary that took over) has forgotten the script: the batches it refused are sent again with its source,
// once, and the script is loaded ahead of the next pipeline.
func (r *Redis) run(ctx context.Context, items []*item) []answer {
	var batches []batch
	if !r.clustered {
		for start := 0; start < len(items); start += maxBatch {
			batches = append(batches, newBatch(items, span(start, min(start+maxBatch, len(items)))))
		}
	} else {
		for _, group := range byNamespace(items) {
			for start := 0; start < len(group); start += maxBatch {
				batches = append(batches, newBatch(items, group[start:min(start+maxBatch, len(group))]))
			}
		}
	}
	r.pipeline(ctx, batches, false)
	// A node that never ran the script, or forgot it, refuses with NOSCRIPT: send those batches again with the
	// source, once. Only the refused batches: the others ran, and must not charge twice.
	if r.again(ctx, batches, "NOSCRIPT", true) && !r.clustered {
		r.loaded.Store(false)
	}
	// While a cluster moves a workspace's slot, a script whose keys are split between the two nodes answers
	// TRYAGAIN without running: send it again a few times, a little later each time.
	for wait := 5 * time.Millisecond; wait <= 40*time.Millisecond; wait *= 2 {
		if !slices.ContainsFunc(batches, func(b batch) bool { return refused(b, "TRYAGAIN") }) {
			break
		}
		time.Sleep(wait)
		r.again(ctx, batches, "TRYAGAIN", false)
	}
	answers := make([]answer, len(items))
	for _, b := range batches {
		b.answer(answers)
	}
	return answers
}

// refused reports whether Redis refused b with an error that starts with prefix.
func refused(b batch, prefix string) bool {
	return b.cmd.Err() != nil && redis.HasErrorPrefix(b.cmd.Err(), prefix)
}

// again sends the batches Redis refused with prefix again, in one pipeline (with the script's source when
// source), and reports whether there were any.
func (r *Redis) again(ctx context.Context, batches []batch, prefix string, source bool) bool {
	var again []batch
	var at []int
	for i, b := range batches {
		if refused(b, prefix) {
			again, at = append(again, b), append(at, i)
		}
	}
	if len(again) == 0 {
		return false
	}
	r.pipeline(ctx, again, source)
	for k, i := range at {
		batches[i].cmd = again[k].cmd
	}
	return true
}

// byNamespace lists the indexes of items per namespace, in order of first appearance, each in queue order: the
// script calls of a cluster, where a script stays in one workspace's slot.
func byNamespace(items []*item) [][]int {
	var out [][]int
	var names []string
	for i, it := range items {
		g := slices.Index(names, it.ns)
		if g < 0 {
			g = len(out)
			names = append(names, it.ns)
			out = append(out, nil)
		}
		out[g] = append(out[g], i)
	}
	return out
}

// identity holds 0, 1, 2, ...: span slices it, so a batch on one primary allocates no index list.
var identity = func() []int {
	s := make([]int, 16*maxBatch)
	for i := range s {
		s[i] = i
	}
	return s
}()

// span is the indexes from start to end, end excluded.
func span(start, end int) []int {
	if end <= len(identity) {
		return identity[start:end:end]
	}
	s := make([]int, 0, end-start)
	for i := start; i < end; i++ {
		s = append(s, i)
	}
	return s
}

// batch is one call of the batch script.
type batch struct {
	// idx are the indexes of its items in the items run sends.
	idx  []int
	keys []string
	args []any
	cmd  *redis.Cmd
}

// newBatch lays the items of idx out as the script takes them: each key once in KEYS, and per item its kind,
// time, key indexes and arguments.
func newBatch(items []*item, idx []int) batch {
	b := batch{idx: idx}
	index := make(map[string]int, 8)
	for _, i := range idx {
		it := items[i]
		refs := make([]byte, 0, 2*len(it.keys))
		for _, k := range it.keys {
			g, ok := index[k]
			if !ok {
				b.keys = append(b.keys, k)
				g = len(b.keys)
				index[k] = g
			}
			refs = append(refs, byte(g>>8), byte(g))
		}
		times := make([]byte, 0, 48)
		for _, t := range it.times {
			times = binary.LittleEndian.AppendUint64(times, uint64(t))
		}
		b.args = append(b.args, it.kind, times, refs)
		b.args = append(b.args, it.args...)
	}
	return b
}

// answer splits the script's reply into the answers of its items, in out.
func (b batch) answer(out []answer) {
	vals, err := b.cmd.Int64Slice()
	if err == nil && len(vals) != 2*len(b.idx) {
		err = fmt.Errorf("limit script answered %d values for %d calls", len(vals), len(b.idx))
	}
	for k, i := range b.idx {
		if err != nil {
			out[i].err = err
			continue
		}
		out[i].out = [2]int64{vals[2*k], vals[2*k+1]}
	}
}

// pipeline sends batches as one pipeline, by script hash or, with source, by script text. Until the script is
// known to be loaded, it loads it first in the same pipeline: a batch sent again by its source would run after
// the calls queued behind it, and a settle must run before the checks queued after it.
func (r *Redis) pipeline(ctx context.Context, batches []batch, source bool) {
	pipe := r.client.Pipeline()
	var load *redis.StringCmd
	if !source && !r.loaded.Load() {
		load = pipe.ScriptLoad(ctx, bucketsSource+batchSource)
	}
	for i := range batches {
		b := &batches[i]
		switch {
		case r.clustered:
			// go-redis sends every command of a node's part of a cluster pipeline again when the first one meets
			// a retryable error (TRYAGAIN while a slot moves, a broken connection), those that ran included: a
			// script must not run twice, so go-redis retries none of them (it still follows MOVED and ASK), and
			// run sends again only what Redis refused.
			b.cmd = scriptCmd(ctx, source, b.keys, b.args)
			_ = pipe.Process(ctx, noRetry{b.cmd})
		case source:
			b.cmd = pipe.Eval(ctx, bucketsSource+batchSource, b.keys, b.args...)
		default:
			b.cmd = pipe.EvalSha(ctx, batchScript.Hash(), b.keys, b.args...)
		}
	}
	_, _ = pipe.Exec(ctx) // every command carries its own error
	if load != nil && load.Err() == nil {
		r.loaded.Store(true)
	}
}

// scriptCmd is the batch script's EVALSHA (or EVAL, with source) of keys and args.
func scriptCmd(ctx context.Context, source bool, keys []string, args []any) *redis.Cmd {
	all := make([]any, 0, 3+len(keys)+len(args))
	if source {
		all = append(all, "eval", bucketsSource+batchSource)
	} else {
		all = append(all, "evalsha", batchScript.Hash())
	}
	all = append(all, len(keys))
	for _, k := range keys {
		all = append(all, k)
	}
	return redis.NewCmd(ctx, append(all, args...)...)
}

// noRetry is a command that go-redis never sends again on its own.
type noRetry struct{ *redis.Cmd }

func (noRetry) NoRetry() bool { return true }

// Count implements Store. It is queued like a check, so it sees every settle queued before it.
func (r *Redis) Count(ctx context.Context, k BucketKey, now time.Time) (int64, error) {
	if !valid(k) {
		return 0, fmt.Errorf("bucket %s per %s is not one a store counts", k.Type, k.Unit)
	}
	c := r.do(ctx, item{ns: k.Namespace, kind: "c", times: timesAt(now), keys: []string{r.pairKey(k)}, args: []any{string(rune('0' + code(k)))}})
	if c.err != nil {
		return 0, fmt.Errorf("%w: count: %w", ErrUnavailable, c.err)
	}
	return c.out[0], nil
}

// Ping reports whether Redis answers, for startup checks.
func (r *Redis) Ping(ctx context.Context) error {
	if err := r.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

var _ Store = (*Redis)(nil)
