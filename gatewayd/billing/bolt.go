package billing

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

var (
	bucketEvents = []byte("billing.events")
	bucketOutbox = []byte("billing.outbox")
	// bucketThrottles holds the throttle rollup: per namespace, key (Unix minute, big-endian) + ThrottleKey JSON,
	// value the count, big-endian.
	bucketThrottles = []byte("billing.throttles")
	// bucketUsage holds the usage rollup: per namespace, per group (and AllGroups), key (Unix minute, big-endian)
	// + slug, value the Counters (encodeCounters).
	bucketUsage = []byte("billing.usage")
)

// Bolt keeps events in a bbolt file (the embedded store's, so one volume holds all state). Per namespace,
// events are keyed by (timestamp, sequence), big-endian, so a key scan is time order; the outbox holds a copy
// of each undelivered event under the same key, so retention never drops an event still owed to the webhook.
type Bolt struct{ db *bolt.DB }

// NewBolt stores events in db.
func NewBolt(db *bolt.DB) *Bolt { return &Bolt{db: db} }

func eventKey(ts time.Time, seq uint64) []byte {
	k := binary.BigEndian.AppendUint64(nil, uint64(ts.UnixNano()))
	return binary.BigEndian.AppendUint64(k, seq)
}

func nested(tx *bolt.Tx, top []byte, ns string) (*bolt.Bucket, error) {
	b, err := tx.CreateBucketIfNotExists(top)
	if err != nil {
		return nil, err
	}
	return b.CreateBucketIfNotExists([]byte(ns))
}

// Append implements Store.
func (s *Bolt) Append(_ context.Context, recs []Record) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		for _, r := range recs {
			ev, err := nested(tx, bucketEvents, r.Namespace)
			if err != nil {
				return err
			}
			seq, _ := ev.NextSequence()
			k := eventKey(r.Event.Timestamp, seq)
			v, err := json.Marshal(r.Event)
			if err != nil {
				return err
			}
			if err := ev.Put(k, v); err != nil {
				return err
			}
			if r.Deliver {
				ob, err := nested(tx, bucketOutbox, r.Namespace)
				if err != nil {
					return err
				}
				if err := ob.Put(k, v); err != nil {
					return err
				}
			}
			if tk, ok := throttleOf(&r); ok {
				if err := addThrottle(tx, r.Namespace, r.Event.Timestamp, tk); err != nil {
					return err
				}
			}
			for _, g := range usageGroups(&r) {
				if err := addUsage(tx, r.Namespace, g, r.Event.Timestamp, r.Event.ModelSlug, usageOf(&r)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("failed to store %d billing events: %w", len(recs), err)
	}
	return nil
}

// List implements Store. The cursor is the hex key of the last event returned.
func (s *Bolt) List(_ context.Context, ns string, q Query) ([]Event, string, error) {
	start := eventKey(q.Start, 0)
	if q.Start.IsZero() {
		start = nil
	}
	if q.Cursor != "" {
		c, err := hex.DecodeString(q.Cursor)
		if err != nil || len(c) != 16 {
			return nil, "", ErrCursor
		}
		// Resume strictly after the cursor: append a byte so Seek lands past it.
		c = append(c, 0)
		if string(c) > string(start) {
			start = c
		}
	}
	if q.Limit <= 0 {
		q.Limit = DefaultLimit
	}
	var out []Event
	var lastKey []byte
	next := ""
	err := s.db.View(func(tx *bolt.Tx) error {
		b := nsBucket(tx, bucketEvents, ns)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		k, v := c.First()
		if start != nil {
			k, v = c.Seek(start)
		}
		for ; k != nil; k, v = c.Next() {
			if !q.End.IsZero() && int64(binary.BigEndian.Uint64(k[:8])) >= q.End.UnixNano() {
				return nil
			}
			var e Event
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("corrupt billing event %x: %w", k, err)
			}
			if !q.match(&e) {
				continue
			}
			if len(out) == q.Limit {
				// One more match exists: the page is full and the next one starts after its last event.
				next = hex.EncodeToString(lastKey)
				return nil
			}
			out = append(out, e)
			lastKey = append(lastKey[:0], k...)
		}
		return nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("failed to list billing events: %w", err)
	}
	return out, next, nil
}

// Pending implements Store.
func (s *Bolt) Pending(_ context.Context, ns string, max int) ([]Pending, error) {
	var out []Pending
	err := s.db.View(func(tx *bolt.Tx) error {
		b := nsBucket(tx, bucketOutbox, ns)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.First(); k != nil && len(out) < max; k, v = c.Next() {
			var e Event
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("corrupt outbox entry %x: %w", k, err)
			}
			out = append(out, Pending{ID: hex.EncodeToString(k), Event: e})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("failed to read the billing outbox: %w", err)
	}
	return out, nil
}

// Ack implements Store.
func (s *Bolt) Ack(_ context.Context, ns string, ids []string) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := nsBucket(tx, bucketOutbox, ns)
		if b == nil {
			return nil
		}
		for _, id := range ids {
			k, err := hex.DecodeString(id)
			if err != nil {
				return err
			}
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("failed to acknowledge billing outbox entries: %w", err)
	}
	return nil
}

// Outboxes implements Store.
func (s *Bolt) Outboxes(_ context.Context) ([]string, error) {
	var out []string
	err := s.db.View(func(tx *bolt.Tx) error {
		top := tx.Bucket(bucketOutbox)
		if top == nil {
			return nil
		}
		return top.ForEachBucket(func(name []byte) error {
			if k, _ := top.Bucket(name).Cursor().First(); k != nil {
				out = append(out, string(name))
			}
			return nil
		})
	})
	return out, err
}

// Prune implements Store.
func (s *Bolt) Prune(_ context.Context, before time.Time) error {
	limit := eventKey(before, 0)
	return s.db.Update(func(tx *bolt.Tx) error {
		top := tx.Bucket(bucketEvents)
		if top == nil {
			return nil
		}
		return top.ForEachBucket(func(name []byte) error {
			c := top.Bucket(name).Cursor()
			for k, _ := c.First(); k != nil && string(k) < string(limit); k, _ = c.First() {
				if err := c.Delete(); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// addThrottle adds one to the rollup counter of k in the minute of at, and drops the minutes of ns older than
// ThrottleKeep before at, so the rollup stays small without a pruner of its own.
func addThrottle(tx *bolt.Tx, ns string, at time.Time, k ThrottleKey) error {
	b, err := nested(tx, bucketThrottles, ns)
	if err != nil {
		return err
	}
	key := binary.BigEndian.AppendUint64(nil, uint64(throttleMinute(at)))
	key = append(key, k.encode()...)
	n := uint64(0)
	if v := b.Get(key); len(v) == 8 {
		n = binary.BigEndian.Uint64(v)
	}
	if err := b.Put(key, binary.BigEndian.AppendUint64(nil, n+1)); err != nil {
		return err
	}
	return dropMinutesBefore(b, at.Add(-ThrottleKeep))
}

// dropMinutesBefore deletes the counters of b, keyed by Unix minute first, of the minutes before the one holding t.
func dropMinutesBefore(b *bolt.Bucket, t time.Time) error {
	oldest := uint64(throttleMinute(t))
	c := b.Cursor()
	for ck, _ := c.First(); ck != nil && binary.BigEndian.Uint64(ck[:8]) < oldest; ck, _ = c.First() {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// Throttles implements Store.
func (s *Bolt) Throttles(_ context.Context, ns string, start, end time.Time) ([]ThrottleCount, error) {
	sums := map[ThrottleKey]int64{}
	last := uint64(throttleMinute(end))
	err := s.db.View(func(tx *bolt.Tx) error {
		b := nsBucket(tx, bucketThrottles, ns)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.Seek(binary.BigEndian.AppendUint64(nil, uint64(throttleMinute(start)))); k != nil && binary.BigEndian.Uint64(k[:8]) <= last; k, v = c.Next() {
			tk, err := decodeThrottleKey(k[8:])
			if err != nil || len(v) != 8 {
				return fmt.Errorf("corrupt throttle counter %x: %v", k, err)
			}
			sums[tk] += int64(binary.BigEndian.Uint64(v))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("failed to read the throttle rollup: %w", err)
	}
	return sortedThrottles(sums), nil
}

// addUsage adds c to the usage counter of (group, slug) in the minute of at, and drops the group's minutes older
// than UsageKeep before at, so the rollup stays small without a pruner of its own: a group keeps at most
// UsageKeep of minutes, counted back from its last call.
func addUsage(tx *bolt.Tx, ns, group string, at time.Time, slug string, c Counters) error {
	nb, err := nested(tx, bucketUsage, ns)
	if err != nil {
		return err
	}
	b, err := nb.CreateBucketIfNotExists([]byte(group))
	if err != nil {
		return err
	}
	key := binary.BigEndian.AppendUint64(nil, uint64(throttleMinute(at)))
	key = append(key, slug...)
	if old, ok := decodeCounters(b.Get(key)); ok {
		c.Add(old)
	}
	if err := b.Put(key, encodeCounters(c)); err != nil {
		return err
	}
	return dropMinutesBefore(b, at.Add(-UsageKeep))
}

// Usage implements Store.
func (s *Bolt) Usage(_ context.Context, ns, group string, start, end time.Time) ([]UsageMinute, error) {
	sums := map[usageRow]Counters{}
	last := uint64(throttleMinute(end))
	err := s.db.View(func(tx *bolt.Tx) error {
		nb := nsBucket(tx, bucketUsage, ns)
		if nb == nil {
			return nil
		}
		b := nb.Bucket([]byte(group))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.Seek(binary.BigEndian.AppendUint64(nil, uint64(throttleMinute(start)))); k != nil && binary.BigEndian.Uint64(k[:8]) <= last; k, v = c.Next() {
			n, ok := decodeCounters(v)
			if !ok {
				return fmt.Errorf("corrupt usage counter %x", k)
			}
			sums[usageRow{minute: int64(binary.BigEndian.Uint64(k[:8])), slug: string(k[8:])}] = n
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("failed to read the usage rollup: %w", err)
	}
	return sortedUsage(sums), nil
}

var _ Store = (*Bolt)(nil)

// nsBucket is the bucket of namespace ns under the top-level bucket top, or nil when either does not exist yet.
func nsBucket(tx *bolt.Tx, top []byte, ns string) *bolt.Bucket {
	t := tx.Bucket(top)
	if t == nil {
		return nil
	}
	return t.Bucket([]byte(ns))
}
