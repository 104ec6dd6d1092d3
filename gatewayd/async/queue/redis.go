package queue

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgate/modelgate/gatewayd/state/redisclient"
)

// Redis keeps requests in Redis so that every replica enqueues, claims and delivers from the same place. Under
// "<prefix>:async:":
//
//	r:<id>      hash: the request (scalar fields; model_input and the output stored as they came)
//	q:<queue>   sorted set: the ready requests of a deployment, scored priority*1e13 + enqueue time in ms
//	d:<queue>   sorted set: requests waiting out a retry delay, scored by when they are due
//	run:<queue> sorted set: the requests of a deployment that run, scored by lease end
//	leased      sorted set: every running request, scored by lease end (the reaper's index)
//	deadline    sorted set: queued requests, scored by their expiry
//	hooks       sorted set: results owed to a webhook, scored by when the next delivery is due
//	ended       sorted set: ended requests owing nothing, scored by their end (retention)
//	queues      set: every queue that ever held a request
//	keys        hash: per key (Request.Key), how many of its requests are QUEUED or IN_PROGRESS
//
// Claim, cancel, the transitions and the sweep are Lua scripts, each one atomic step, so two replicas never
// claim one request and a request is never both queued and running. Scripts build the keys of a request's queue
// from its hash, and the sweep walks indexes of every queue, so every key of the queue must be on one primary:
// on Redis Cluster the whole prefix is one hash tag ("{mg:async}:"), the queue lives in one slot, and each script
// names its "queues" key so that the cluster client sends it to that slot's primary. See docs/decisions.md,
// "Redis Cluster and Sentinel", for what that slot bounds.
type Redis struct {
	client redis.UniversalClient
	prefix string
	// route is the key every script names, for the cluster client's routing; the scripts build the others.
	route []string
	// wait, when set, makes an enqueue wait for replicas before it is answered (WithWait).
	wait *redisclient.Wait
}

// NewRedis keeps requests through client under prefix ("mg" when empty).
func NewRedis(client redis.UniversalClient, prefix string) *Redis {
	if prefix == "" {
		prefix = "mg"
	}
	p := redisclient.Tag(redisclient.Clustered(client), prefix+":async") + ":"
	return &Redis{client: client, prefix: p, route: []string{p + "queues"}}
}

// WithWait makes each enqueue (the key's count and the request) wait until w's replicas acknowledge it, on the
// connection that wrote it, before Enqueue answers; nil waits for nothing. It returns s.
func (s *Redis) WithWait(w *redisclient.Wait) *Redis {
	s.wait = w
	return s
}

//go:embed redis.lua
var luaLib string

var (
	scriptAdmitKey  = redis.NewScript(luaLib + "\nreturn admit_key()")
	scriptClaim     = redis.NewScript(luaLib + "\nreturn claim()")
	scriptCancel    = redis.NewScript(luaLib + "\nreturn cancel()")
	scriptHeartbeat = redis.NewScript(luaLib + "\nreturn heartbeat()")
	scriptRetry     = redis.NewScript(luaLib + "\nreturn retry()")
	scriptFinish    = redis.NewScript(luaLib + "\nreturn finish()")
	scriptHooksDue  = redis.NewScript(luaLib + "\nreturn hooks_due()")
	scriptHookDone  = redis.NewScript(luaLib + "\nreturn hook_done()")
	scriptSweep     = redis.NewScript(luaLib + "\nreturn sweep()")
)

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMS(s string) time.Time {
	n, _ := strconv.ParseInt(s, 10, 64)
	if n == 0 {
		return time.Time{}
	}
	return time.UnixMilli(n).UTC()
}

func (s *Redis) key(id string) string { return s.prefix + "r:" + id }

// Enqueue implements Store.
func (s *Redis) Enqueue(ctx context.Context, r *Request) error {
	errs, err := json.Marshal(r.Errors)
	if err != nil {
		return err
	}
	score := float64(r.Priority)*1e13 + float64(ms(r.CreatedAt))
	full := false
	err = s.wait.Write(ctx, s.client, s.route[0], "async_request", func(c redis.Cmdable) error {
		if r.Key != "" {
			// Counted first, in one script with the cap check; an enqueue that then fails gives the count back.
			ok, err := scriptAdmitKey.Run(ctx, c, s.route, s.prefix, r.Key, r.KeyCap).Int()
			if err != nil {
				return fmt.Errorf("failed to count async request %s of its key in Redis: %w", r.ID, err)
			}
			if ok == 0 {
				full = true
				return nil
			}
		}
		_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, s.key(r.ID), "key", r.Key,
				"id", r.ID, "ns", r.Namespace, "model", r.ModelID, "dep", r.DeploymentID, "env", r.Environment, "queue", r.Queue(),
				"input", []byte(r.Input), "webhook", r.Webhook, "prio", r.Priority, "mtq", r.MaxTimeInQueueSeconds,
				"ma", r.Retry.MaxAttempts, "idm", r.Retry.InitialDelayMs, "mdm", r.Retry.MaxDelayMs,
				"status", r.Status, "whs", r.WebhookStatus, "created", ms(r.CreatedAt), "status_at", ms(r.StatusAt),
				"nb", ms(r.NotBefore), "attempts", r.Attempts, "errors", errs, "owner", "", "lease", 0, "wha", 0, "whn", 0, "tp", r.TraceParent)
			p.ZAdd(ctx, s.prefix+"q:"+r.Queue(), redis.Z{Score: score, Member: r.ID})
			p.ZAdd(ctx, s.prefix+"deadline", redis.Z{Score: float64(ms(r.Deadline())), Member: r.ID})
			p.SAdd(ctx, s.prefix+"queues", r.Queue())
			return nil
		})
		if err != nil {
			if r.Key != "" {
				s.client.HIncrBy(ctx, s.prefix+"keys", r.Key, -1)
			}
			return fmt.Errorf("failed to enqueue async request %s in Redis: %w", r.ID, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if full {
		return ErrKeyFull
	}
	return nil
}

// Get implements Store.
func (s *Redis) Get(ctx context.Context, id string) (*Request, error) {
	m, err := s.client.HGetAll(ctx, s.key(id)).Result()
	if err != nil {
		return nil, fmt.Errorf("failed to read async request %s from Redis: %w", id, err)
	}
	if len(m) == 0 {
		return nil, ErrNotFound
	}
	return decodeHash(m)
}

func decodeHash(m map[string]string) (*Request, error) {
	atoi := func(k string) int { n, _ := strconv.Atoi(m[k]); return n }
	atoi64 := func(k string) int64 { n, _ := strconv.ParseInt(m[k], 10, 64); return n }
	r := &Request{
		ID: m["id"], Key: m["key"], Namespace: m["ns"], ModelID: m["model"], DeploymentID: m["dep"], Environment: m["env"],
		Input: json.RawMessage(m["input"]), Webhook: m["webhook"], Priority: atoi("prio"),
		MaxTimeInQueueSeconds: atoi64("mtq"),
		Retry:                 RetryConfig{MaxAttempts: atoi("ma"), InitialDelayMs: atoi64("idm"), MaxDelayMs: atoi64("mdm")},
		Status:                m["status"], WebhookStatus: m["whs"],
		CreatedAt: fromMS(m["created"]), StatusAt: fromMS(m["status_at"]), NotBefore: fromMS(m["nb"]),
		Attempts: atoi("attempts"), Owner: m["owner"], LeaseUntil: fromMS(m["lease"]),
		WebhookAttempts: atoi("wha"), WebhookNext: fromMS(m["whn"]), TraceParent: m["tp"],
	}
	if out := m["output"]; out != "" {
		r.Output = json.RawMessage(out)
	}
	if e := m["errors"]; e != "" {
		if err := json.Unmarshal([]byte(e), &r.Errors); err != nil {
			return nil, fmt.Errorf("failed to decode the errors of async request %s: %w", r.ID, err)
		}
	}
	return r, nil
}

// Cancel implements Store.
func (s *Redis) Cancel(ctx context.Context, id string, now time.Time) (*Request, bool, error) {
	res, err := scriptCancel.Run(ctx, s.client, s.route, s.prefix, id, ms(now)).Int()
	if err != nil {
		return nil, false, fmt.Errorf("failed to cancel async request %s in Redis: %w", id, err)
	}
	if res < 0 {
		return nil, false, ErrNotFound
	}
	r, err := s.Get(ctx, id)
	return r, res == 1, err
}

// Claim implements Store.
func (s *Redis) Claim(ctx context.Context, q, owner string, now time.Time, lease time.Duration, maxInProgress int) (*Request, int, error) {
	res, err := scriptClaim.Run(ctx, s.client, s.route, s.prefix, q, owner, ms(now), ms(now.Add(lease)), maxInProgress, maxScanPerClaim).Slice()
	if err != nil {
		return nil, 0, fmt.Errorf("failed to claim from async queue %s in Redis: %w", q, err)
	}
	expired, _ := res[1].(int64)
	if len(res) < 3 {
		return nil, int(expired), nil
	}
	m := map[string]string{}
	fields, _ := res[2].([]any)
	for i := 0; i+1 < len(fields); i += 2 {
		k, _ := fields[i].(string)
		v, _ := fields[i+1].(string)
		m[k] = v
	}
	r, err := decodeHash(m)
	return r, int(expired), err
}

func leaseResult(res int, err error, what, id string) error {
	if err != nil {
		return fmt.Errorf("failed to %s async request %s in Redis: %w", what, id, err)
	}
	switch res {
	case -1:
		return ErrNotFound
	case 0:
		return ErrLeaseLost
	}
	return nil
}

// Heartbeat implements Store.
func (s *Redis) Heartbeat(ctx context.Context, id, owner string, until time.Time) error {
	res, err := scriptHeartbeat.Run(ctx, s.client, s.route, s.prefix, id, owner, ms(until)).Int()
	return leaseResult(res, err, "extend the lease of", id)
}

// Retry implements Store.
func (s *Redis) Retry(ctx context.Context, id, owner string, now, notBefore time.Time, attempts int, errs []Error) error {
	e, err := json.Marshal(errs)
	if err != nil {
		return err
	}
	res, err := scriptRetry.Run(ctx, s.client, s.route, s.prefix, id, owner, ms(now), ms(notBefore), attempts, e).Int()
	return leaseResult(res, err, "requeue", id)
}

// Finish implements Store.
func (s *Redis) Finish(ctx context.Context, id, owner string, now time.Time, out Outcome) error {
	e, err := json.Marshal(out.Errors)
	if err != nil {
		return err
	}
	res, err := scriptFinish.Run(ctx, s.client, s.route, s.prefix, id, owner, ms(now), out.Status, out.Attempts, e, []byte(out.Output)).Int()
	return leaseResult(res, err, "finish", id)
}

// Depth implements Store.
func (s *Redis) Depth(ctx context.Context, q string) (queued, inProgress int, err error) {
	var ready, delayed, running *redis.IntCmd
	_, err = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		ready, delayed, running = p.ZCard(ctx, s.prefix+"q:"+q), p.ZCard(ctx, s.prefix+"d:"+q), p.ZCard(ctx, s.prefix+"run:"+q)
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("failed to count async queue %s in Redis: %w", q, err)
	}
	return int(ready.Val() + delayed.Val()), int(running.Val()), nil
}

// DueWebhooks implements Store.
func (s *Redis) DueWebhooks(ctx context.Context, now time.Time, hold time.Duration, n int) ([]*Request, error) {
	ids, err := scriptHooksDue.Run(ctx, s.client, s.route, s.prefix, ms(now), ms(now.Add(hold)), n).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("failed to take due async webhooks from Redis: %w", err)
	}
	out := make([]*Request, 0, len(ids))
	for _, id := range ids {
		r, err := s.Get(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// WebhookDone implements Store.
func (s *Redis) WebhookDone(ctx context.Context, id string, now time.Time, res WebhookResult, next time.Time) error {
	if err := scriptHookDone.Run(ctx, s.client, s.route, s.prefix, id, ms(now), int(res), ms(next)).Err(); err != nil {
		return fmt.Errorf("failed to record the webhook delivery of async request %s in Redis: %w", id, err)
	}
	return nil
}

// Sweep implements Store.
func (s *Redis) Sweep(ctx context.Context, now time.Time, retention time.Duration) (Swept, error) {
	res, err := scriptSweep.Run(ctx, s.client, s.route, s.prefix, ms(now), ms(now.Add(-retention)), maxSweepPerStep).Int64Slice()
	if err != nil || len(res) < 3 {
		return Swept{}, fmt.Errorf("failed to sweep the async queues in Redis: %w", err)
	}
	return Swept{Requeued: int(res[0]), Expired: int(res[1]), Removed: int(res[2])}, nil
}
