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
)

// ErrUnavailable wraps every failure to reach the shared counters, so gatewayd can answer 503
// limits_unavailable (fail closed) instead of guessing.
var ErrUnavailable = errors.New("limit counters are unavailable")

// admitScript checks and charges a whole plan in one round trip. It runs the same sub-slotted window as
// Memory (see docs/limits.md) over one header key per (namespace, group, slug) holding what a check reads of
// that pair's six counters, so its Redis calls grow with the levels of the plan, not with its limits. Every key
// gets a TTL: a rolling counter lives one window plus one slot after it entered its newest slot (when it would
// count zero anyway), a DAY one two days.
//
// KEYS: one header per (group, slug) of the plan. ARGV: secIdx, minIdx, day, nowMicros, then the arguments
// Bind packed (see redisHandle). It returns {-1} when admitted, or {hit index (0-based), retry after in micros}.
//
//go:embed redis_admit.lua
var admitSource string

// settleScript adds ARGV[4] tokens to every TOKEN counter of the plan; ARGV[4 + k] lists the codes on KEYS[k].
//
//go:embed redis_settle.lua
var settleSource string

// countScript reads one counter: KEYS[1] its header, ARGV[5] its code.
//
//go:embed redis_count.lua
var countSource string

// bucketsSource is the prelude every script starts with: the counter layout and its window arithmetic.
//
//go:embed redis_buckets.lua
var bucketsSource string

var (
	admitScript  = redis.NewScript(bucketsSource + admitSource)
	settleScript = redis.NewScript(bucketsSource + settleSource)
	countScript  = redis.NewScript(bucketsSource + countSource)
)

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

// Redis is the shared Store for several gatewayd replicas: the counters live in one Redis (standalone or
// Sentinel; a plan's keys span groups, so Redis Cluster is not supported) and each check is one Lua script, so
// the all-or-nothing charge is atomic across replicas. go-redis reconnects on its own after an outage.
//
// Calls are pipelined: whichever caller finds no pipeline in flight sends every queued script call (checks,
// counts and settles) as one pipeline, and the callers that queued meanwhile wait for its answers, so
// concurrent checks share round trips while a lone check waits for nobody. Settle only queues its tokens; see
// Flush.
type Redis struct {
	client redis.UniversalClient
	opts   RedisOptions

	mu sync.Mutex
	// idle is signalled when a pipeline ends, for Flush.
	idle *sync.Cond
	// busy is true while a goroutine owns the queue and is sending it.
	busy    bool
	calls   []*call
	settles []settle
	// queued and answered count the settles ever queued and answered by Redis (in queue order, since pipelines
	// run one at a time); settleErr is the first failure since the last Flush.
	queued, answered uint64
	settleErr        error
	// loaded is true once the scripts are known to be in Redis's script cache.
	loaded atomic.Bool
}

// call is a queued script call whose caller waits for its answer.
type call struct {
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
	done   chan struct{}
}

// settle is a queued charge of tokens. Settles of the same plan in the same sub-slots and day are summed into
// one script call, which charges the same counters the same amounts.
type settle struct {
	h                   *redisHandle
	tokens              int64
	secIdx, minIdx, day int64
}

// NewRedis returns a store over client.
func NewRedis(client redis.UniversalClient, opts RedisOptions) *Redis {
	if opts.Prefix == "" {
		opts.Prefix = "mg"
	}
	r := &Redis{client: client, opts: opts}
	r.idle = sync.NewCond(&r.mu)
	return r
}

// Client is the store's Redis client, for the billing events that share it.
func (r *Redis) Client() redis.UniversalClient { return r.client }

// redisHandle is the bound form of a Plan: one key per (group, slug) and the script arguments after the time.
type redisHandle struct {
	keys []string
	// admit is, per key, the codes of its limits (one digit each, code + 6 for a repeated counter), then the plan
	// index of each of those limits as two bytes, then their thresholds packed: see redis_admit.lua.
	admit []any
	// settleKeys are the keys with a TOKEN limit and settle their TOKEN codes, each once.
	settleKeys []string
	settle     []any
}

// code numbers the six counters of a (group, slug), as the scripts do.
func code(k BucketKey) int {
	if k.Unit == Day {
		return 4 + int(k.Type)
	}
	return 2*int(k.Type) + int(k.Unit)
}

// Bind implements Store.
func (r *Redis) Bind(p *Plan) error {
	if len(p.Limits) > 1<<16 {
		return fmt.Errorf("plan has %d limits, more than the Redis store takes (%d)", len(p.Limits), 1<<16)
	}
	h := &redisHandle{}
	// byKey lists, per key in order of first use, the plan indexes of its limits.
	var byKey [][]int
	for i, l := range p.Limits {
		if l.Key.Type >= numTypes || l.Key.Unit >= numUnits {
			return errors.New("limit has an unknown type or unit")
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
				codes = append(codes, byte('0'+c+6))
			} else {
				codes = append(codes, byte('0'+c))
				if l.Key.Type == Token {
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

// pairKey names the counters of a (namespace, group, slug). Namespaces and group names are DNS labels without
// ':', so the layout is unambiguous even when a slug contains one.
func (r *Redis) pairKey(k BucketKey) string {
	return r.opts.Prefix + ":" + k.Namespace + ":" + k.Group + ":" + k.Slug
}

func (r *Redis) handle(p *Plan) (*redisHandle, error) {
	h, ok := p.Handle.(*redisHandle)
	if !ok {
		return nil, errUnbound
	}
	return h, nil
}

// timeArgs are the leading script arguments. Lua numbers are doubles, so time travels as slot indexes and
// microseconds, which stay exact.
func timeArgs(now time.Time) (secIdx, minIdx, day, micros int64) {
	ns := now.UnixNano()
	return ns / slotWidth[Second], ns / slotWidth[Minute], ns / nanosPerDay, ns / 1000
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
	args := make([]any, 4, 4+len(h.admit))
	args[0], args[1], args[2], args[3] = timeArgs(now)
	args = append(args, h.admit...)
	out, err := r.do(ctx, admitScript, h.keys, args).Int64Slice()
	if err != nil {
		if r.opts.FailOpen {
			return Result{Allowed: true, Hit: -1}, nil
		}
		return Result{}, fmt.Errorf("%w: admit script: %w", ErrUnavailable, err)
	}
	if len(out) == 0 || out[0] < 0 {
		return Result{Allowed: true, Hit: -1}, nil
	}
	if len(out) < 2 || out[0] >= int64(len(p.Limits)) {
		return Result{}, fmt.Errorf("admit script returned %v for a plan of %d limits", out, len(p.Limits))
	}
	return Result{Hit: int(out[0]), RetryAfter: time.Duration(out[1]) * time.Microsecond}, nil
}

// Settle implements Store. It queues the tokens and returns at once: they reach Redis with the next pipeline,
// which starts at once when none is in flight, so a settle waits for at most the pipeline ahead of it (see
// "TOKEN overshoot" in docs/limits.md). A settle that fails is logged and reported by the next Flush.
func (r *Redis) Settle(_ context.Context, p *Plan, tokens int64, now time.Time) error {
	if len(p.Limits) == 0 || tokens <= 0 {
		return nil
	}
	h, err := r.handle(p)
	if err != nil {
		return err
	}
	if len(h.settleKeys) == 0 {
		return nil
	}
	s := settle{h: h, tokens: tokens}
	s.secIdx, s.minIdx, s.day, _ = timeArgs(now)
	r.mu.Lock()
	r.settles = append(r.settles, s)
	r.queued++
	lead := !r.busy
	r.busy = true
	r.mu.Unlock()
	if lead {
		go r.send()
	}
	return nil
}

// Flush waits until every settle queued so far has been answered by Redis, and returns the failures of the
// settles since the last Flush.
func (r *Redis) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for target := r.queued; r.answered < target; {
		r.idle.Wait()
	}
	err := r.settleErr
	r.settleErr = nil
	return err
}

// Close flushes the queued settles, so a graceful stop charges every token it was told of. It does not close
// the client, which the billing events share.
func (r *Redis) Close() error { return r.Flush() }

// do queues a script call and waits for its answer. When no pipeline is in flight the caller sends the queue
// itself, so a lone call costs one round trip and no hand-off.
func (r *Redis) do(ctx context.Context, script *redis.Script, keys []string, args []any) *redis.Cmd {
	if err := ctx.Err(); err != nil {
		// The caller is gone: charge nothing for it.
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	c := &call{script: script, keys: keys, args: args, done: make(chan struct{})}
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
		return c.cmd
	case <-ctx.Done():
		// The call may still run: like a call whose answer was lost, it can have charged.
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(ctx.Err())
		return cmd
	}
}

// send pipelines everything queued, then hands the queue to a new goroutine when more arrived meanwhile, so
// the caller that sent it returns with its answer.
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
	more := len(r.calls) > 0 || len(r.settles) > 0
	r.busy = more
	r.idle.Broadcast()
	r.mu.Unlock()
	if more {
		go r.send()
	}
}

// exec runs one pipeline: the settles first (summed per plan, sub-slots and day), then the calls, in the order
// they were queued, so a settle is counted by every check queued after it. It answers the calls and returns
// the failure of the settles, if any.
func (r *Redis) exec(calls []*call, settles []settle) error {
	ctx := context.Background()
	merged := settles[:0]
	for _, s := range settles {
		i := slices.IndexFunc(merged, func(m settle) bool {
			return m.h == s.h && m.secIdx == s.secIdx && m.minIdx == s.minIdx && m.day == s.day
		})
		if i >= 0 {
			merged[i].tokens += s.tokens
		} else {
			merged = append(merged, s)
		}
	}
	all := make([]*call, 0, len(merged)+len(calls))
	for _, s := range merged {
		args := make([]any, 4, 4+len(s.h.settle))
		args[0], args[1], args[2], args[3] = s.secIdx, s.minIdx, s.day, s.tokens
		all = append(all, &call{script: settleScript, keys: s.h.settleKeys, args: append(args, s.h.settle...)})
	}
	all = append(all, calls...)
	r.pipeline(ctx, all, false)
	// A Redis that restarted has forgotten the scripts: send those calls again with their source, once, and
	// load the scripts ahead of the next pipeline.
	var again []*call
	for _, c := range all {
		if err := c.cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			again = append(again, c)
		}
	}
	if len(again) > 0 {
		r.loaded.Store(false)
		r.pipeline(ctx, again, true)
	}
	var failed error
	for i, c := range all {
		if c.done != nil {
			close(c.done)
			continue
		}
		if err := c.cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
			s := merged[i]
			r.opts.Log.Error(err, "Failed to charge tokens", "keys", s.h.settleKeys, "tokens", s.tokens)
			if failed == nil {
				failed = fmt.Errorf("%w: settle script: %w", ErrUnavailable, err)
			}
		}
	}
	return failed
}

// pipeline sends calls as one pipeline, by script hash or, with source, by script text. Until the scripts are
// known to be loaded, it loads them first in the same pipeline: a call sent again by its source would run
// after the calls queued behind it, and a settle must run before the checks queued after it.
func (r *Redis) pipeline(ctx context.Context, calls []*call, source bool) {
	pipe := r.client.Pipeline()
	var loads []*redis.StringCmd
	if !source && !r.loaded.Load() {
		for _, src := range []string{bucketsSource + admitSource, bucketsSource + settleSource, bucketsSource + countSource} {
			loads = append(loads, pipe.ScriptLoad(ctx, src))
		}
	}
	for _, c := range calls {
		if source {
			c.cmd = pipe.Eval(ctx, scriptSource(c.script), c.keys, c.args...)
		} else {
			c.cmd = pipe.EvalSha(ctx, c.script.Hash(), c.keys, c.args...)
		}
	}
	_, _ = pipe.Exec(ctx) // every command carries its own error
	if len(loads) > 0 && !slices.ContainsFunc(loads, func(c *redis.StringCmd) bool { return c.Err() != nil }) {
		r.loaded.Store(true)
	}
}

func scriptSource(s *redis.Script) string {
	switch s {
	case admitScript:
		return bucketsSource + admitSource
	case settleScript:
		return bucketsSource + settleSource
	}
	return bucketsSource + countSource
}

// Count implements Store. It is queued like a check, so it sees every settle queued before it.
func (r *Redis) Count(ctx context.Context, k BucketKey, now time.Time) (int64, error) {
	if k.Type >= numTypes || k.Unit >= numUnits {
		return 0, errors.New("bucket has an unknown type or unit")
	}
	secIdx, minIdx, day, micros := timeArgs(now)
	n, err := r.do(ctx, countScript, []string{r.pairKey(k)}, []any{secIdx, minIdx, day, micros, code(k)}).Int64()
	if err != nil {
		return 0, fmt.Errorf("%w: count script: %w", ErrUnavailable, err)
	}
	return n, nil
}

// Ping reports whether Redis answers, for startup checks.
func (r *Redis) Ping(ctx context.Context) error {
	if err := r.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

var _ Store = (*Redis)(nil)
