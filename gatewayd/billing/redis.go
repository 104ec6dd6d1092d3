package billing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgate/modelgate/gatewayd/state/redisclient"
)

// Redis keeps events in Redis streams, so every replica records into and delivers from the same place. Per
// namespace, "<prefix>:billing:events:<ns>" holds every event (trimmed by Prune) and
// "<prefix>:billing:outbox:<ns>" the undelivered ones; the set "<prefix>:billing:namespaces" lists the
// namespaces that ever recorded. Stream ids are Redis server time, so a listing is in time order whatever
// replica recorded the event. Two replicas may deliver the same batch at once; receivers dedupe by
// idempotencyKey, as at-least-once delivery requires anyway.
//
// On Redis Cluster the namespace in every key but the namespaces' set is a hash tag ("{ns}"), so the events,
// outbox and rollups of a namespace share its slot and a namespace's records are written in one transaction.
type Redis struct {
	client    redis.UniversalClient
	prefix    string
	clustered bool
	// wait, when set, makes each transaction of Append wait for replicas before Append answers (WithWait).
	wait *redisclient.Wait
}

// NewRedis stores events through client under prefix ("mg" when empty).
func NewRedis(client redis.UniversalClient, prefix string) *Redis {
	if prefix == "" {
		prefix = "mg"
	}
	return &Redis{client: client, prefix: prefix, clustered: redisclient.Clustered(client)}
}

// WithWait makes each of Append's writes (a batch's events, outbox entries and rollups, and on a cluster the
// namespaces' set) wait until w's replicas acknowledge it, on the connection that wrote it, before Append
// answers; nil waits for nothing. It returns s.
func (s *Redis) WithWait(w *redisclient.Wait) *Redis {
	s.wait = w
	return s
}

// tag is ns as its keys carry it: a hash tag on a cluster.
func (s *Redis) tag(ns string) string { return redisclient.Tag(s.clustered, ns) }

func (s *Redis) events(ns string) string { return s.prefix + ":billing:events:" + s.tag(ns) }
func (s *Redis) outbox(ns string) string { return s.prefix + ":billing:outbox:" + s.tag(ns) }
func (s *Redis) namespaces() string      { return s.prefix + ":billing:namespaces" }

// throttles is the hash of one minute of the throttle rollup of ns: field ThrottleKey JSON, value the count.
func (s *Redis) throttles(ns string, minute int64) string {
	return s.prefix + ":billing:throttles:" + s.tag(ns) + ":" + strconv.FormatInt(minute, 10)
}

// usage is the hash of one minute of the usage rollup of (ns, group): fields "<counter>|<slug>", where counter is
// r (requests), t (429s), i (input tokens), o (output tokens) or c (cost, micro-USD), values the counts.
func (s *Redis) usage(ns, group string, minute int64) string {
	return s.prefix + ":billing:usage:" + s.tag(ns) + ":" + group + ":" + strconv.FormatInt(minute, 10)
}

// usageFields pairs each counter's field letter with its value in c.
func usageFields(c *Counters) []struct {
	letter string
	n      *int64
} {
	return []struct {
		letter string
		n      *int64
	}{{"r", &c.Requests}, {"t", &c.Throttled}, {"i", &c.InputTokens}, {"o", &c.OutputTokens}, {"c", &c.CostMicroUsd}}
}

// Append implements Store. The rollups' increments are summed over the batch first, so a batch of N calls costs
// one HINCRBY per distinct counter and one EXPIRE per hash, not N of each: under load a batch holds many calls of
// few groups and slugs.
//
// On one primary the batch is one transaction. On a cluster a transaction cannot leave a slot, so the namespaces'
// set is written first and then each namespace's records in a transaction of their own, all at once; when some
// fail, the error is a *PartlyWritten holding only those records, so writing them again duplicates nothing.
func (s *Redis) Append(ctx context.Context, recs []Record) error {
	if !s.clustered {
		return s.appendTx(ctx, recs, true)
	}
	var names []string
	var byNS [][]Record
	for _, r := range recs {
		i := slices.Index(names, r.Namespace)
		if i < 0 {
			i = len(names)
			names, byNS = append(names, r.Namespace), append(byNS, nil)
		}
		byNS[i] = append(byNS[i], r)
	}
	err := s.wait.Write(ctx, s.client, s.namespaces(), "billing_events", func(c redis.Cmdable) error {
		return c.SAdd(ctx, s.namespaces(), toAny(names)...).Err()
	})
	if err != nil {
		return fmt.Errorf("failed to store %d billing events in Redis: %w", len(recs), err)
	}
	errs := make([]error, len(byNS))
	var wg sync.WaitGroup
	for i, part := range byNS {
		wg.Go(func() { errs[i] = s.appendTx(ctx, part, false) })
	}
	wg.Wait()
	failed := &PartlyWritten{}
	for i, err := range errs {
		if err != nil {
			failed.Unwritten = append(failed.Unwritten, byNS[i]...)
			failed.Err = errors.Join(failed.Err, err)
		}
	}
	if failed.Err == nil {
		return nil
	}
	return failed
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// appendTx writes recs in one transaction, with the namespaces' set when withSet.
func (s *Redis) appendTx(ctx context.Context, recs []Record, withSet bool) error {
	if len(recs) == 0 {
		return nil
	}
	// Every key of the transaction but the namespaces' set (written with it on one primary only) is in the slot of
	// the records' namespace.
	err := s.wait.Write(ctx, s.client, s.events(recs[0].Namespace), "billing_events", func(c redis.Cmdable) error {
		_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error { return s.queueAppend(ctx, p, recs, withSet) })
		return err
	})
	if err != nil {
		return fmt.Errorf("failed to store %d billing events in Redis: %w", len(recs), err)
	}
	return nil
}

// queueAppend queues on p the writes of recs: events, outbox entries, rollups, and the namespaces' set when
// withSet.
func (s *Redis) queueAppend(ctx context.Context, p redis.Pipeliner, recs []Record, withSet bool) error {
	var sums rollupSums
	namespaces := map[string]bool{}
	// buf holds the JSON of every event of the batch, one after the other: the pipeline keeps each value until it
	// sends the batch, so each event has its own range of buf, as in the embedded store's Append.
	buf := make([]byte, 0, len(recs)*eventJSONSize)
	for _, r := range recs {
		start := len(buf)
		var err error
		if buf, err = appendEvent(buf, &r.Event); err != nil {
			return err
		}
		v := buf[start:len(buf):len(buf)]
		p.XAdd(ctx, &redis.XAddArgs{Stream: s.events(r.Namespace), Values: []any{"e", v}})
		if r.Deliver {
			p.XAdd(ctx, &redis.XAddArgs{Stream: s.outbox(r.Namespace), Values: []any{"e", v}})
		}
		namespaces[r.Namespace] = true
		// The minute comes from the event's time, not Redis's, as in the embedded store.
		minute := throttleMinute(r.Event.Timestamp)
		if tk, ok := throttleOf(&r); ok {
			sums.add(s.throttles(r.Namespace, minute), string(tk.encode()), 1, ThrottleKeep)
		}
		c := usageOf(&r)
		for _, g := range usageGroups(&r) {
			h := s.usage(r.Namespace, g, minute)
			for _, f := range usageFields(&c) {
				sums.add(h, f.letter+"|"+r.Event.ModelSlug, *f.n, UsageKeep)
			}
		}
	}
	if withSet {
		for ns := range namespaces {
			p.SAdd(ctx, s.namespaces(), ns)
		}
	}
	sums.write(ctx, p)
	return nil
}

func decode(m redis.XMessage) (Event, error) {
	var e Event
	v, _ := m.Values["e"].(string)
	if err := json.Unmarshal([]byte(v), &e); err != nil {
		return e, fmt.Errorf("corrupt billing event %s: %w", m.ID, err)
	}
	return e, nil
}

// List implements Store. The cursor is the stream id of the last event returned.
func (s *Redis) List(ctx context.Context, ns string, q Query) ([]Event, string, error) {
	if q.Limit <= 0 {
		q.Limit = DefaultLimit
	}
	start := "-"
	if !q.Start.IsZero() {
		start = strconv.FormatInt(q.Start.UnixMilli(), 10) + "-0"
	}
	if q.Cursor != "" {
		if _, _, ok := parseStreamID(q.Cursor); !ok {
			return nil, "", ErrCursor
		}
		start = "(" + q.Cursor
	}
	end := "+"
	if !q.End.IsZero() {
		end = "(" + strconv.FormatInt(q.End.UnixMilli(), 10) + "-0"
	}
	var out []Event
	last := ""
	for {
		msgs, err := s.client.XRangeN(ctx, s.events(ns), start, end, 256).Result()
		if err != nil {
			return nil, "", fmt.Errorf("failed to list billing events: %w", err)
		}
		for _, m := range msgs {
			e, err := decode(m)
			if err != nil {
				return nil, "", err
			}
			if !q.match(&e) {
				continue
			}
			if len(out) == q.Limit {
				return out, last, nil
			}
			out, last = append(out, e), m.ID
		}
		if len(msgs) < 256 {
			return out, "", nil
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
}

func parseStreamID(id string) (int64, int64, bool) {
	for i := range len(id) {
		if id[i] == '-' {
			a, err1 := strconv.ParseInt(id[:i], 10, 64)
			b, err2 := strconv.ParseInt(id[i+1:], 10, 64)
			return a, b, err1 == nil && err2 == nil
		}
	}
	return 0, 0, false
}

// Pending implements Store.
func (s *Redis) Pending(ctx context.Context, ns string, max int) ([]Pending, error) {
	msgs, err := s.client.XRangeN(ctx, s.outbox(ns), "-", "+", int64(max)).Result()
	if err != nil {
		return nil, fmt.Errorf("failed to read the billing outbox: %w", err)
	}
	out := make([]Pending, 0, len(msgs))
	for _, m := range msgs {
		e, err := decode(m)
		if err != nil {
			return nil, err
		}
		out = append(out, Pending{ID: m.ID, Event: e})
	}
	return out, nil
}

// Ack implements Store.
func (s *Redis) Ack(ctx context.Context, ns string, ids []string) error {
	if err := s.client.XDel(ctx, s.outbox(ns), ids...).Err(); err != nil {
		return fmt.Errorf("failed to acknowledge billing outbox entries: %w", err)
	}
	return nil
}

// Outboxes implements Store.
func (s *Redis) Outboxes(ctx context.Context) ([]string, error) {
	nss, err := s.client.SMembers(ctx, s.namespaces()).Result()
	if err != nil {
		return nil, fmt.Errorf("failed to list billing namespaces: %w", err)
	}
	var out []string
	for _, ns := range nss {
		if n, err := s.client.XLen(ctx, s.outbox(ns)).Result(); err == nil && n > 0 {
			out = append(out, ns)
		}
	}
	return out, nil
}

// Prune implements Store.
func (s *Redis) Prune(ctx context.Context, before time.Time) error {
	nss, err := s.client.SMembers(ctx, s.namespaces()).Result()
	if err != nil {
		return fmt.Errorf("failed to list billing namespaces: %w", err)
	}
	minID := strconv.FormatInt(before.UnixMilli(), 10) + "-0"
	for _, ns := range nss {
		if err := s.client.XTrimMinID(ctx, s.events(ns), minID).Err(); err != nil {
			return fmt.Errorf("failed to prune billing events of %s: %w", ns, err)
		}
	}
	return nil
}

// Throttles implements Store: one HGETALL per minute of the window, in one pipeline.
func (s *Redis) Throttles(ctx context.Context, ns string, start, end time.Time) ([]ThrottleCount, error) {
	_, cmds, err := s.minutes(ctx, start, end, ThrottleKeep, func(m int64) string { return s.throttles(ns, m) })
	if err != nil {
		return nil, fmt.Errorf("failed to read the throttle rollup: %w", err)
	}
	sums := map[ThrottleKey]int64{}
	for _, c := range cmds {
		for f, v := range c.Val() {
			tk, err := decodeThrottleKey([]byte(f))
			n, perr := strconv.ParseInt(v, 10, 64)
			if err != nil || perr != nil {
				return nil, fmt.Errorf("corrupt throttle counter %q=%q in %s", f, v, c.Args()[1])
			}
			sums[tk] += n
		}
	}
	return sortedThrottles(sums), nil
}

// minutes reads the hash of each minute from the one holding start to the one holding end, at most keep back from
// end (older ones have expired), with one HGETALL per minute in one pipeline; key names a minute's hash. It answers
// the first minute read and the commands, in minute order.
func (s *Redis) minutes(ctx context.Context, start, end time.Time, keep time.Duration, key func(minute int64) string) (int64, []*redis.MapStringStringCmd, error) {
	first, last := throttleMinute(start), throttleMinute(end)
	if last-first > int64(keep/time.Minute) {
		first = last - int64(keep/time.Minute)
	}
	cmds := make([]*redis.MapStringStringCmd, 0, last-first+1)
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for m := first; m <= last; m++ {
			cmds = append(cmds, p.HGetAll(ctx, key(m)))
		}
		return nil
	})
	return first, cmds, err
}

// Usage implements Store: one HGETALL per minute of the window, in one pipeline.
func (s *Redis) Usage(ctx context.Context, ns, group string, start, end time.Time) ([]UsageMinute, error) {
	first, cmds, err := s.minutes(ctx, start, end, UsageKeep, func(m int64) string { return s.usage(ns, group, m) })
	if err != nil {
		return nil, fmt.Errorf("failed to read the usage rollup: %w", err)
	}
	sums := map[usageRow]Counters{}
	for i, c := range cmds {
		for f, v := range c.Val() {
			letter, slug, ok := strings.Cut(f, "|")
			n, perr := strconv.ParseInt(v, 10, 64)
			if !ok || perr != nil {
				return nil, fmt.Errorf("corrupt usage counter %q=%q in %s", f, v, c.Args()[1])
			}
			row := usageRow{minute: first + int64(i), slug: slug}
			sum := sums[row]
			for _, uf := range usageFields(&sum) {
				if uf.letter == letter {
					*uf.n += n
				}
			}
			sums[row] = sum
		}
	}
	return sortedUsage(sums), nil
}

// rollupSums are a batch's increments of the rollups' hashes, summed per hash and field.
type rollupSums struct {
	hashes []string // in the order first seen
	keep   map[string]time.Duration
	fields map[string]map[string]int64
}

// add counts n more in field of hash, which expires keep after the batch's write. A hash is kept (and its expiry
// renewed) even when n is 0, as every call touches the hashes of its minute.
func (r *rollupSums) add(hash, field string, n int64, keep time.Duration) {
	if r.fields == nil {
		r.keep, r.fields = map[string]time.Duration{}, map[string]map[string]int64{}
	}
	f, ok := r.fields[hash]
	if !ok {
		f = map[string]int64{}
		r.fields[hash], r.keep[hash] = f, keep
		r.hashes = append(r.hashes, hash)
	}
	if n != 0 {
		f[field] += n
	}
}

// write queues the sums on p: one HINCRBY per counter that moved, one EXPIRE per hash.
func (r *rollupSums) write(ctx context.Context, p redis.Pipeliner) {
	for _, h := range r.hashes {
		for field, n := range r.fields[h] {
			p.HIncrBy(ctx, h, field, n)
		}
		p.Expire(ctx, h, r.keep[h])
	}
}

var _ Store = (*Redis)(nil)
