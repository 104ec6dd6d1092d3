package limits

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrUnavailable wraps every failure to reach the shared counters, so gatewayd can answer 503
// limits_unavailable (fail closed) instead of guessing.
var ErrUnavailable = errors.New("limit counters are unavailable")

// admitScript checks and charges a whole plan in one round trip. It runs the same sub-slotted window as
// Memory (see docs/limits.md): a rolling bucket is a hash {l = newest slot, t = total, "0".."10" = ring}, a
// DAY bucket is a string counter under "<key>:<utc day>". Every key gets a TTL: a rolling one expires one
// window plus one slot after its last charge (when it would count zero anyway), a DAY one two days after.
//
// KEYS: one base key per limit. ARGV: secIdx, minIdx, day, nowMicros, then per limit: type, unit, threshold,
// charge (1 or 0). It returns {-1} when admitted, or {hit index (0-based), retry after in micros}.
//
//go:embed redis_admit.lua
var admitSource string

// settleScript adds ARGV[5] tokens to every TOKEN bucket of the plan that charges; same layout as admit.
//
//go:embed redis_settle.lua
var settleSource string

// countScript reads one bucket; same layout with a single limit.
//
//go:embed redis_count.lua
var countSource string

// bucketsSource is the prelude every script starts with: the bucket layout and its window arithmetic.
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
}

// Redis is the shared Store for several gatewayd replicas: the counters live in one Redis (standalone or
// Sentinel; a plan's keys span groups, so Redis Cluster is not supported) and each check is one Lua script, so
// the all-or-nothing charge is atomic across replicas. go-redis reconnects on its own after an outage.
type Redis struct {
	client redis.UniversalClient
	opts   RedisOptions
}

// NewRedis returns a store over client.
func NewRedis(client redis.UniversalClient, opts RedisOptions) *Redis {
	if opts.Prefix == "" {
		opts.Prefix = "mg"
	}
	return &Redis{client: client, opts: opts}
}

// Client is the store's Redis client, for the billing events that share it.
func (r *Redis) Client() redis.UniversalClient { return r.client }

// redisHandle is the bound form of a Plan: its keys and the static tail of the script arguments.
type redisHandle struct {
	keys []string
	// args holds 4 leading slots for the per-call values, then 4 values per limit.
	args []any
	// token is true when the plan has a TOKEN limit, so Settle can skip the round trip otherwise.
	token bool
}

const argsHead = 4

// Bind implements Store.
func (r *Redis) Bind(p *Plan) error {
	h := &redisHandle{keys: make([]string, len(p.Limits)), args: make([]any, argsHead, argsHead+4*len(p.Limits))}
	for i, l := range p.Limits {
		if l.Key.Type >= numTypes || l.Key.Unit >= numUnits {
			return errors.New("limit has an unknown type or unit")
		}
		h.keys[i] = r.key(l.Key)
		charge := 1
		for _, o := range p.Limits[:i] {
			if o.Key == l.Key {
				charge = 0
			}
		}
		h.args = append(h.args, int(l.Key.Type), int(l.Key.Unit), l.Threshold, charge)
		h.token = h.token || l.Key.Type == Token
	}
	p.Handle = h
	return nil
}

// key names a bucket. Namespaces and group names are DNS labels without ':', so the layout is unambiguous
// even when a slug contains one.
func (r *Redis) key(k BucketKey) string {
	return r.opts.Prefix + ":" + k.Namespace + ":" + k.Group + ":" + k.Slug + ":" + k.Type.String() + ":" + k.Unit.String()
}

func (r *Redis) handle(p *Plan) (*redisHandle, error) {
	h, ok := p.Handle.(*redisHandle)
	if !ok {
		return nil, errUnbound
	}
	return h, nil
}

// callArgs copies the bound arguments and fills in the time of this call. Lua numbers are doubles, so time
// travels as slot indexes and microseconds, which stay exact.
func callArgs(h *redisHandle, now time.Time) []any {
	ns := now.UnixNano()
	args := make([]any, len(h.args))
	copy(args, h.args)
	args[0], args[1], args[2], args[3] = ns/slotWidth[Second], ns/slotWidth[Minute], ns/nanosPerDay, ns/1000
	return args
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
	out, err := admitScript.Run(ctx, r.client, h.keys, callArgs(h, now)...).Int64Slice()
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

// Settle implements Store.
func (r *Redis) Settle(ctx context.Context, p *Plan, tokens int64, now time.Time) error {
	if len(p.Limits) == 0 || tokens <= 0 {
		return nil
	}
	h, err := r.handle(p)
	if err != nil {
		return err
	}
	if !h.token {
		return nil
	}
	args := callArgs(h, now)
	args[3] = tokens
	if err := settleScript.Run(ctx, r.client, h.keys, args...).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("%w: settle script: %w", ErrUnavailable, err)
	}
	return nil
}

// Count implements Store.
func (r *Redis) Count(ctx context.Context, k BucketKey, now time.Time) (int64, error) {
	if k.Type >= numTypes || k.Unit >= numUnits {
		return 0, errors.New("bucket has an unknown type or unit")
	}
	ns := now.UnixNano()
	n, err := countScript.Run(ctx, r.client, []string{r.key(k)},
		ns/slotWidth[Second], ns/slotWidth[Minute], ns/nanosPerDay, int(k.Unit)).Int64()
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

// dayKey is the Redis key of a DAY bucket on day, as the scripts build it; tests use it to check the layout.
func (r *Redis) dayKey(k BucketKey, day int64) string {
	return r.key(k) + ":" + strconv.FormatInt(day, 10)
}

var _ Store = (*Redis)(nil)
