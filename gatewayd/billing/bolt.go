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

func eventKey(ts time.Time, seq uint64) []byte { return appendEventKey(nil, ts, seq) }

// appendEventKey appends the eventKey of (ts, seq) to dst.
func appendEventKey(dst []byte, ts time.Time, seq uint64) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(ts.UnixNano()))
	return binary.BigEndian.AppendUint64(dst, seq)
}

// eventKeyLen is the length of an eventKey.
const eventKeyLen = 16

func nested(tx *bolt.Tx, top []byte, ns string) (*bolt.Bucket, error) {
	b, err := tx.CreateBucketIfNotExists(top)
	if err != nil {
		return nil, err
	}
	return b.CreateBucketIfNotExists([]byte(ns))
}

// appendFillPercent is how full Append fills the pages of the events and outbox buckets that split, where bbolt
// fills them half (DefaultFillPercent): their keys begin with the event's time, so a batch's keys nearly always
// come after every stored one, and a page split half full stayed half full. With 0.9 a stored event takes 689
// bytes of the file where it took 1,249 (BenchmarkBoltAppend, where half the events enter the outbox too). bbolt
// forgets the setting with the transaction's bucket handles, so Append sets it in each one.
const appendFillPercent = 0.9

// Append implements Store. The rollups are summed over the batch first, as the Redis store does, so each
// (minute, group, slug) counter and each throttle counter the batch touches is read and written once, however
// many of its events add to it.
func (s *Bolt) Append(_ context.Context, recs []Record) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		var sums boltRollups
		var ns string
		var ev, ob *bolt.Bucket // of ns
		// buf holds the key and JSON of every event of the batch, one after the other: bbolt keeps the slices Put
		// is given until the commit, so each event's bytes have their own range of buf, which nothing writes again.
		// When an append outgrows buf it copies buf to a new array and goes on there; the ranges already Put stay
		// in the old array, which they keep alive, untouched. One buffer costs an allocation or two per batch
		// where a buffer per event would cost one per event.
		buf := make([]byte, 0, len(recs)*(eventKeyLen+eventJSONSize))
		for i := range recs {
			r := &recs[i]
			var err error
			if ev == nil || r.Namespace != ns {
				if ev, err = nested(tx, bucketEvents, r.Namespace); err != nil {
					return err
				}
				ev.FillPercent = appendFillPercent
				ns, ob = r.Namespace, nil
			}
			seq, _ := ev.NextSequence()
			start := len(buf)
			if buf, err = appendEvent(appendEventKey(buf, r.Event.Timestamp, seq), &r.Event); err != nil {
				return err
			}
			// Capacity-clipped: an append to k or v would copy, never write into the next event's bytes.
			k := buf[start : start+eventKeyLen : start+eventKeyLen]
			v := buf[start+eventKeyLen : len(buf) : len(buf)]
			if err := ev.Put(k, v); err != nil {
				return err
			}
			if r.Deliver {
				if ob == nil {
					if ob, err = nested(tx, bucketOutbox, r.Namespace); err != nil {
						return err
					}
					ob.FillPercent = appendFillPercent
				}
				if err := ob.Put(k, v); err != nil {
					return err
				}
			}
			sums.add(r)
		}
		return sums.write(tx)
	})
	if err != nil {
		return fmt.Errorf("failed to store %d billing events: %w", len(recs), err)
	}
	return nil
}

// boltRollups sums what a batch adds to the throttle and usage rollups, per counter, and the latest event time
// per rollup bucket, from which the bucket's retention counts back.
type boltRollups struct {
	usage     map[usageCell]Counters
	throttles map[throttleCell]uint64
	latest    map[rollupBucket]time.Time
}

// rollupBucket is one namespace's bucket of the throttle rollup, or with usage one group's of the usage rollup.
type rollupBucket struct {
	ns, group string
	usage     bool
}

type usageCell struct {
	ns, group, slug string
	minute          int64
}

type throttleCell struct {
	ns, key string
	minute  int64
}

func (b *boltRollups) add(r *Record) {
	if b.usage == nil {
		b.usage, b.throttles, b.latest = map[usageCell]Counters{}, map[throttleCell]uint64{}, map[rollupBucket]time.Time{}
	}
	at, minute := r.Event.Timestamp, throttleMinute(r.Event.Timestamp)
	seen := func(rb rollupBucket) {
		if l, ok := b.latest[rb]; !ok || at.After(l) {
			b.latest[rb] = at
		}
	}
	if tk, ok := throttleOf(r); ok {
		b.throttles[throttleCell{ns: r.Namespace, key: string(tk.encode()), minute: minute}]++
		seen(rollupBucket{ns: r.Namespace})
	}
	c := usageOf(r)
	for _, g := range usageGroups(r) {
		cell := usageCell{ns: r.Namespace, group: g, slug: r.Event.ModelSlug, minute: minute}
		sum := b.usage[cell]
		sum.Add(c)
		b.usage[cell] = sum
		seen(rollupBucket{ns: r.Namespace, group: g, usage: true})
	}
}

// write adds the sums to the stored counters, then drops each touched bucket's minutes older than its keep
// before the latest event that touched it: a group keeps at most UsageKeep of minutes, and a namespace at most
// ThrottleKeep of throttles, counted back from its last call, without a pruner of their own.
func (b *boltRollups) write(tx *bolt.Tx) error {
	for cell, n := range b.throttles {
		tb, err := nested(tx, bucketThrottles, cell.ns)
		if err != nil {
			return err
		}
		key := binary.BigEndian.AppendUint64(nil, uint64(cell.minute))
		key = append(key, cell.key...)
		if v := tb.Get(key); len(v) == 8 {
			n += binary.BigEndian.Uint64(v)
		}
		if err := tb.Put(key, binary.BigEndian.AppendUint64(nil, n)); err != nil {
			return err
		}
	}
	for cell, c := range b.usage {
		ub, err := usageBucket(tx, cell.ns, cell.group)
		if err != nil {
			return err
		}
		key := binary.BigEndian.AppendUint64(nil, uint64(cell.minute))
		key = append(key, cell.slug...)
		if old, ok := decodeCounters(ub.Get(key)); ok {
			c.Add(old)
		}
		if err := ub.Put(key, encodeCounters(c)); err != nil {
			return err
		}
	}
	for rb, at := range b.latest { // every bucket here was written above, so it exists
		bk, keep := nsBucket(tx, bucketThrottles, rb.ns), ThrottleKeep
		if rb.usage {
			bk, keep = nsBucket(tx, bucketUsage, rb.ns).Bucket([]byte(rb.group)), UsageKeep
		}
		if err := dropMinutesBefore(bk, at.Add(-keep)); err != nil {
			return err
		}
	}
	return nil
}

// usageBucket is the usage rollup's bucket of group in ns, created when missing.
func usageBucket(tx *bolt.Tx, ns, group string) (*bolt.Bucket, error) {
	nb, err := nested(tx, bucketUsage, ns)
	if err != nil {
		return nil, err
	}
	return nb.CreateBucketIfNotExists([]byte(group))
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
