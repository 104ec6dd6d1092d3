package queue

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

var (
	bRequests  = []byte("async.requests")  // id -> JSON of Request
	bReady     = []byte("async.ready")     // queue \0 priority createdNanos id -> id (QUEUED)
	bRunning   = []byte("async.running")   // queue \0 id -> id (IN_PROGRESS)
	bLeases    = []byte("async.leases")    // leaseUntilNanos id -> id
	bDeadlines = []byte("async.deadlines") // deadlineNanos id -> id (QUEUED)
	bHooks     = []byte("async.hooks")     // dueNanos id -> id (webhook PENDING)
	bEnded     = []byte("async.ended")     // endedNanos id -> id (ended, owing no webhook)
	bKeys      = []byte("async.keys")      // key -> requests of the key QUEUED or IN_PROGRESS (uint64)
)

// errUnchanged rolls back a transaction that found nothing to do. bbolt commits even an empty write
// transaction in full (a fresh freelist page and two fdatasyncs) while holding the file's one writer lock, and
// the dispatcher's claim, the webhook poll and the sweep run several times a second whether or not there is work.
var errUnchanged = errors.New("unchanged")

// Bolt keeps requests in the embedded store's bbolt file, one transaction per transition. Besides the records it
// keeps ordered indexes: the ready queue of each deployment keyed by (priority, enqueue time), the running
// requests, and time-ordered leases, deadlines, webhook due times and end times for the sweeper.
type Bolt struct{ db *bolt.DB }

// NewBolt keeps requests in db and creates its buckets.
func NewBolt(db *bolt.DB) (*Bolt, error) {
	err := db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bRequests, bReady, bRunning, bLeases, bDeadlines, bHooks, bEnded, bKeys} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("failed to create the async queue buckets: %w", err)
	}
	return &Bolt{db: db}, nil
}

func timeKey(t time.Time, id string) []byte {
	return append(binary.BigEndian.AppendUint64(nil, uint64(t.UnixNano())), id...)
}

func readyPrefix(queue string) []byte { return append([]byte(queue), 0) }

func readyKey(r *Request) []byte {
	k := append(readyPrefix(r.Queue()), byte(r.Priority))
	k = binary.BigEndian.AppendUint64(k, uint64(r.CreatedAt.UnixNano()))
	return append(k, r.ID...)
}

func runningKey(r *Request) []byte { return append(readyPrefix(r.Queue()), r.ID...) }

// record is a Request as bbolt stores it: the input and output as bytes, so they keep their exact form.
type record struct {
	*Request
	In  []byte `json:"in"`
	Out []byte `json:"out,omitempty"`
}

func load(tx *bolt.Tx, id string) (*Request, error) {
	v := tx.Bucket(bRequests).Get([]byte(id))
	if v == nil {
		return nil, ErrNotFound
	}
	rec := record{Request: &Request{}}
	if err := json.Unmarshal(v, &rec); err != nil {
		return nil, fmt.Errorf("failed to decode async request %s: %w", id, err)
	}
	rec.Input = rec.In
	if len(rec.Out) > 0 {
		rec.Output = rec.Out
	}
	return rec.Request, nil
}

func save(tx *bolt.Tx, r *Request) error {
	v, err := json.Marshal(record{Request: r, In: r.Input, Out: r.Output})
	if err != nil {
		return err
	}
	return tx.Bucket(bRequests).Put([]byte(r.ID), v)
}

func put(tx *bolt.Tx, bucket, key []byte, id string) error {
	return tx.Bucket(bucket).Put(key, []byte(id))
}
func del(tx *bolt.Tx, bucket, key []byte) error { return tx.Bucket(bucket).Delete(key) }

// queue indexes a QUEUED request.
func queue(tx *bolt.Tx, r *Request) error {
	if err := put(tx, bReady, readyKey(r), r.ID); err != nil {
		return err
	}
	return put(tx, bDeadlines, timeKey(r.Deadline(), r.ID), r.ID)
}

// unqueue removes a QUEUED request's indexes.
func unqueue(tx *bolt.Tx, r *Request) error {
	if err := del(tx, bReady, readyKey(r)); err != nil {
		return err
	}
	return del(tx, bDeadlines, timeKey(r.Deadline(), r.ID))
}

// unrun removes an IN_PROGRESS request's indexes.
func unrun(tx *bolt.Tx, r *Request) error {
	if err := del(tx, bRunning, runningKey(r)); err != nil {
		return err
	}
	return del(tx, bLeases, timeKey(r.LeaseUntil, r.ID))
}

// pendingOf is how many requests of key are QUEUED or IN_PROGRESS.
func pendingOf(tx *bolt.Tx, key string) uint64 {
	v := tx.Bucket(bKeys).Get([]byte(key))
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

// admitKey counts a new request of r.Key, refusing it with ErrKeyFull once the key has r.KeyCap pending.
func admitKey(tx *bolt.Tx, r *Request) error {
	if r.Key == "" {
		return nil
	}
	n := pendingOf(tx, r.Key)
	if r.KeyCap > 0 && n >= uint64(r.KeyCap) {
		return ErrKeyFull
	}
	return tx.Bucket(bKeys).Put([]byte(r.Key), binary.BigEndian.AppendUint64(nil, n+1))
}

// settleKey uncounts a request of r.Key that reached an end state.
func settleKey(tx *bolt.Tx, r *Request) error {
	if r.Key == "" {
		return nil
	}
	n := pendingOf(tx, r.Key)
	if n <= 1 {
		return tx.Bucket(bKeys).Delete([]byte(r.Key))
	}
	return tx.Bucket(bKeys).Put([]byte(r.Key), binary.BigEndian.AppendUint64(nil, n-1))
}

// end records the end of a request that owes no webhook, for retention.
func end(tx *bolt.Tx, r *Request, now time.Time) error {
	return put(tx, bEnded, timeKey(now, r.ID), r.ID)
}

// expire moves a QUEUED request to EXPIRED.
func expire(tx *bolt.Tx, r *Request, now time.Time) error {
	if err := unqueue(tx, r); err != nil {
		return err
	}
	r.Status, r.StatusAt, r.WebhookStatus = Expired, now, endedWebhookStatus(r.Webhook)
	if err := settleKey(tx, r); err != nil {
		return err
	}
	if err := end(tx, r, now); err != nil {
		return err
	}
	return save(tx, r)
}

// Enqueue implements Store.
func (s *Bolt) Enqueue(_ context.Context, r *Request) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		if err := admitKey(tx, r); err != nil {
			return err
		}
		if err := save(tx, r); err != nil {
			return err
		}
		return queue(tx, r)
	})
	if errors.Is(err, ErrKeyFull) {
		return err
	}
	if err != nil {
		return fmt.Errorf("failed to enqueue async request %s: %w", r.ID, err)
	}
	return nil
}

// EnqueueClaimed implements Direct.
func (s *Bolt) EnqueueClaimed(_ context.Context, r *Request, owner string, now time.Time, lease time.Duration, maxInProgress int) (claimed bool, err error) {
	err = s.db.Update(func(tx *bolt.Tx) error {
		if err := admitKey(tx, r); err != nil {
			return err
		}
		prefix := readyPrefix(r.Queue())
		idle := maxInProgress > 0
		if k, _ := tx.Bucket(bReady).Cursor().Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) {
			idle = false // others wait: keep the order
		}
		if idle {
			n, c := 0, tx.Bucket(bRunning).Cursor()
			for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && n < maxInProgress; k, _ = c.Next() {
				n++
			}
			idle = n < maxInProgress
		}
		if !idle {
			if err := save(tx, r); err != nil {
				return err
			}
			return queue(tx, r)
		}
		r.Status, r.StatusAt, r.Owner, r.LeaseUntil = InProgress, now, owner, now.Add(lease)
		if err := put(tx, bRunning, runningKey(r), r.ID); err != nil {
			return err
		}
		if err := put(tx, bLeases, timeKey(r.LeaseUntil, r.ID), r.ID); err != nil {
			return err
		}
		claimed = true
		return save(tx, r)
	})
	if errors.Is(err, ErrKeyFull) {
		return false, err
	}
	if err != nil {
		return false, fmt.Errorf("failed to enqueue async request %s: %w", r.ID, err)
	}
	return claimed, nil
}

// Get implements Store.
func (s *Bolt) Get(_ context.Context, id string) (r *Request, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		r, err = load(tx, id)
		return err
	})
	return r, err
}

// Cancel implements Store.
func (s *Bolt) Cancel(_ context.Context, id string, now time.Time) (r *Request, canceled bool, err error) {
	err = s.db.Update(func(tx *bolt.Tx) error {
		if r, err = load(tx, id); err != nil || r.Status != Queued {
			return err
		}
		if err := unqueue(tx, r); err != nil {
			return err
		}
		r.Status, r.StatusAt, r.WebhookStatus = Canceled, now, endedWebhookStatus(r.Webhook)
		canceled = true
		if err := settleKey(tx, r); err != nil {
			return err
		}
		if err := end(tx, r, now); err != nil {
			return err
		}
		return save(tx, r)
	})
	return r, canceled, err
}

// Claim implements Store.
func (s *Bolt) Claim(_ context.Context, q, owner string, now time.Time, lease time.Duration, maxInProgress int) (claimed *Request, expired int, err error) {
	err = s.db.Update(func(tx *bolt.Tx) error {
		prefix := readyPrefix(q)
		if maxInProgress > 0 {
			n := 0
			c := tx.Bucket(bRunning).Cursor()
			for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && n < maxInProgress; k, _ = c.Next() {
				n++
			}
			if n >= maxInProgress {
				return errUnchanged
			}
		}
		var ids []string
		c := tx.Bucket(bReady).Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && len(ids) < maxScanPerClaim; k, v = c.Next() {
			ids = append(ids, string(v))
		}
		for _, id := range ids {
			r, err := load(tx, id)
			if err != nil {
				return err
			}
			if !now.Before(r.Deadline()) {
				if err := expire(tx, r, now); err != nil {
					return err
				}
				expired++
				continue
			}
			if now.Before(r.NotBefore) {
				continue // waiting out a retry delay
			}
			if err := unqueue(tx, r); err != nil {
				return err
			}
			r.Status, r.StatusAt, r.Owner, r.LeaseUntil = InProgress, now, owner, now.Add(lease)
			if err := put(tx, bRunning, runningKey(r), r.ID); err != nil {
				return err
			}
			if err := put(tx, bLeases, timeKey(r.LeaseUntil, r.ID), r.ID); err != nil {
				return err
			}
			claimed = r
			return save(tx, r)
		}
		if expired == 0 {
			return errUnchanged
		}
		return nil
	})
	if errors.Is(err, errUnchanged) {
		err = nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("failed to claim from async queue %s: %w", q, err)
	}
	return claimed, expired, nil
}

// held loads id and checks that owner runs it.
func held(tx *bolt.Tx, id, owner string) (*Request, error) {
	r, err := load(tx, id)
	if err != nil {
		return nil, err
	}
	if r.Status != InProgress || r.Owner != owner {
		return nil, ErrLeaseLost
	}
	return r, nil
}

// Heartbeat implements Store.
func (s *Bolt) Heartbeat(_ context.Context, id, owner string, until time.Time) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		r, err := held(tx, id, owner)
		if err != nil {
			return err
		}
		if err := del(tx, bLeases, timeKey(r.LeaseUntil, r.ID)); err != nil {
			return err
		}
		r.LeaseUntil = until
		if err := put(tx, bLeases, timeKey(r.LeaseUntil, r.ID), r.ID); err != nil {
			return err
		}
		return save(tx, r)
	})
}

// Retry implements Store.
func (s *Bolt) Retry(_ context.Context, id, owner string, now, notBefore time.Time, attempts int, errs []Error) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		r, err := held(tx, id, owner)
		if err != nil {
			return err
		}
		if err := unrun(tx, r); err != nil {
			return err
		}
		r.Status, r.StatusAt, r.Owner, r.LeaseUntil = Queued, now, "", time.Time{}
		r.NotBefore, r.Attempts, r.Errors = notBefore, attempts, errs
		if err := queue(tx, r); err != nil {
			return err
		}
		return save(tx, r)
	})
}

// Finish implements Store.
func (s *Bolt) Finish(_ context.Context, id, owner string, now time.Time, out Outcome) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		r, err := held(tx, id, owner)
		if err != nil {
			return err
		}
		if err := unrun(tx, r); err != nil {
			return err
		}
		r.Status, r.StatusAt, r.Owner, r.LeaseUntil = out.Status, now, "", time.Time{}
		r.Attempts, r.Errors = out.Attempts, out.Errors
		if err := settleKey(tx, r); err != nil {
			return err
		}
		if r.Webhook == "" {
			r.WebhookStatus = HookNone
			if err := end(tx, r, now); err != nil {
				return err
			}
		} else {
			r.WebhookStatus, r.Output, r.WebhookNext = HookPending, out.Output, now
			if err := put(tx, bHooks, timeKey(now, r.ID), r.ID); err != nil {
				return err
			}
		}
		return save(tx, r)
	})
}

// Depth implements Store.
func (s *Bolt) Depth(_ context.Context, q string) (queued, inProgress int, err error) {
	prefix := readyPrefix(q)
	count := func(c *bolt.Cursor) int {
		n := 0
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			n++
		}
		return n
	}
	err = s.db.View(func(tx *bolt.Tx) error {
		queued, inProgress = count(tx.Bucket(bReady).Cursor()), count(tx.Bucket(bRunning).Cursor())
		return nil
	})
	return queued, inProgress, err
}

// due lists up to n ids of a time-keyed bucket due at now.
func due(tx *bolt.Tx, bucket []byte, now time.Time, n int) (keys [][]byte, ids []string) {
	limit := binary.BigEndian.AppendUint64(nil, uint64(now.UnixNano()))
	c := tx.Bucket(bucket).Cursor()
	for k, v := c.First(); k != nil && bytes.Compare(k[:8], limit) <= 0 && len(ids) < n; k, v = c.Next() {
		keys, ids = append(keys, append([]byte(nil), k...)), append(ids, string(v))
	}
	return keys, ids
}

// DueWebhooks implements Store.
func (s *Bolt) DueWebhooks(_ context.Context, now time.Time, hold time.Duration, n int) (out []*Request, err error) {
	err = s.db.Update(func(tx *bolt.Tx) error {
		keys, ids := due(tx, bHooks, now, n)
		if len(ids) == 0 {
			return errUnchanged
		}
		for i, id := range ids {
			if err := del(tx, bHooks, keys[i]); err != nil {
				return err
			}
			r, err := load(tx, id)
			if err != nil {
				continue // removed meanwhile; drop the stale index entry
			}
			r.WebhookNext = now.Add(hold)
			if err := put(tx, bHooks, timeKey(r.WebhookNext, r.ID), r.ID); err != nil {
				return err
			}
			if err := save(tx, r); err != nil {
				return err
			}
			out = append(out, r)
		}
		return nil
	})
	if errors.Is(err, errUnchanged) {
		err = nil
	}
	return out, err
}

// WebhookDone implements Store.
func (s *Bolt) WebhookDone(_ context.Context, id string, now time.Time, res WebhookResult, next time.Time) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		r, err := load(tx, id)
		if err != nil || r.WebhookStatus != HookPending {
			return err
		}
		if err := del(tx, bHooks, timeKey(r.WebhookNext, r.ID)); err != nil {
			return err
		}
		switch res {
		case Delivered:
			r.WebhookStatus, r.Output = HookSucceeded, nil
		case GiveUp:
			r.Status, r.StatusAt, r.WebhookStatus, r.Output = WebhookFailed, now, HookFailed, nil
		default:
			r.WebhookAttempts++
			r.WebhookNext = next
			if err := put(tx, bHooks, timeKey(next, r.ID), r.ID); err != nil {
				return err
			}
			return save(tx, r)
		}
		r.WebhookNext = time.Time{}
		if err := end(tx, r, now); err != nil {
			return err
		}
		return save(tx, r)
	})
}

// Sweep implements Store.
func (s *Bolt) Sweep(_ context.Context, now time.Time, retention time.Duration) (sw Swept, err error) {
	err = s.db.Update(func(tx *bolt.Tx) error {
		keys, ids := due(tx, bLeases, now, maxSweepPerStep)
		changed := len(ids) > 0 // every due entry is removed or moved
		for i, id := range ids {
			if err := del(tx, bLeases, keys[i]); err != nil {
				return err
			}
			r, err := load(tx, id)
			if err != nil || r.Status != InProgress || r.LeaseUntil.After(now) {
				continue
			}
			if err := del(tx, bRunning, runningKey(r)); err != nil {
				return err
			}
			r.Status, r.StatusAt, r.Owner, r.LeaseUntil = Queued, now, "", time.Time{}
			if err := queue(tx, r); err != nil {
				return err
			}
			if err := save(tx, r); err != nil {
				return err
			}
			sw.Requeued++
		}
		keys, ids = due(tx, bDeadlines, now, maxSweepPerStep)
		changed = changed || len(ids) > 0
		for i, id := range ids {
			r, err := load(tx, id)
			if err != nil || r.Status != Queued {
				if err := del(tx, bDeadlines, keys[i]); err != nil {
					return err
				}
				continue
			}
			if err := expire(tx, r, now); err != nil {
				return err
			}
			sw.Expired++
		}
		keys, ids = due(tx, bEnded, now.Add(-retention), maxSweepPerStep)
		if !changed && len(ids) == 0 {
			return errUnchanged
		}
		for i, id := range ids {
			if err := del(tx, bEnded, keys[i]); err != nil {
				return err
			}
			if err := tx.Bucket(bRequests).Delete([]byte(id)); err != nil {
				return err
			}
			sw.Removed++
		}
		return nil
	})
	if errors.Is(err, errUnchanged) {
		err = nil
	}
	return sw, err
}
