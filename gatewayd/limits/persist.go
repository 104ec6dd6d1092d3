package limits

import (
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// DefaultFlushInterval is how often the embedded store writes its DAY and MONTH counters to disk, and so the most a
// crash (SIGKILL, power loss) can lose: the calls admitted and tokens settled since the last flush. A graceful
// stop flushes everything.
const DefaultFlushInterval = time.Second

// calendar is where the counters of one calendar unit live in the file: a bbolt bucket holding one counter per
// (namespace, group, slug, type) and, under periodKey, the number of the period (Unit.Period) they belong to.
type calendar struct {
	unit   Unit
	bucket []byte
}

// calendars are the persisted units: DAY in limits.day, MONTH in limits.month.
var calendars = [2]calendar{{Day, []byte("limits.day")}, {Month, []byte("limits.month")}}

// periodKey holds the period number of a calendar bucket. It begins with a NUL, which no counter key does.
var periodKey = []byte("\x00day")

// EmbeddedOptions configure an embedded store.
type EmbeddedOptions struct {
	// FlushInterval is the period of the background flush; DefaultFlushInterval when zero, none when negative
	// (tests call Flush themselves).
	FlushInterval time.Duration
	// Now is the clock that decides which day is today; time.Now when nil.
	Now func() time.Time
}

// Embedded is the default single-replica Store: it is the in-memory store, whose DAY and MONTH counters are also
// kept in a bbolt file so that a restart keeps the day's and the month's usage. Rolling windows stay in memory only: they are at
// most a minute long, about the time a restart takes. The file is opened by one process at a time (bbolt
// locks it), which matches the one replica this store supports.
type Embedded struct {
	*Memory
	db  *bolt.DB
	now func() time.Time
	mu  sync.Mutex // serialises flushes
	// released are the calendar counters of released groups still in the file (in every calendar bucket); the next flush deletes them, so a
	// restart does not bring a deleted group's counters back. Guarded by Memory.mu.
	released [][]byte
	stop     chan struct{}
	done     chan struct{}
}

// NewEmbedded restores today's DAY and this month's MONTH counters from db and starts the background flush. A
// calendar bucket written in an earlier period restores nothing: its usage starts from zero. db belongs to the caller (gatewayd/state), which
// closes it after Close.
func NewEmbedded(db *bolt.DB, opts EmbeddedOptions) (*Embedded, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.FlushInterval == 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	e := &Embedded{Memory: NewMemory(), db: db, now: opts.Now, stop: make(chan struct{}), done: make(chan struct{})}
	if err := e.restore(); err != nil {
		return nil, err
	}
	if opts.FlushInterval > 0 {
		go e.loop(opts.FlushInterval)
	} else {
		close(e.done)
	}
	return e, nil
}

func (e *Embedded) loop(interval time.Duration) {
	defer close(e.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
			// A failed flush is retried on the next tick; Close reports the last one.
			_ = e.Flush()
		}
	}
}

// bucketID is the bbolt key of a calendar counter: namespace, group, slug and type, NUL-separated (none of them
// can contain a NUL).
func bucketID(ns, group, slug string, t Type) []byte {
	return []byte(ns + "\x00" + group + "\x00" + slug + "\x00" + t.String())
}

// Flush writes every calendar counter of the current day and month to the file in one transaction.
func (e *Embedded) Flush() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	type entry struct {
		cal int
		id  []byte
		n   int64
	}
	var periods [2]int64
	for i, c := range calendars {
		periods[i] = c.unit.Period(now)
	}
	var entries []entry
	e.Memory.mu.Lock()
	for k, c := range e.Memory.cells {
		c.mu.Lock()
		for i := range calendars {
			for t := range numTypes {
				if d := c.cal[i][t]; d.period == periods[i] && d.n > 0 {
					entries = append(entries, entry{i, bucketID(k.namespace, k.group, k.slug, t), d.n})
				}
			}
		}
		c.mu.Unlock()
	}
	released := e.released
	e.released = nil
	e.Memory.mu.Unlock()
	err := e.db.Update(func(tx *bolt.Tx) error {
		var buckets [2]*bolt.Bucket
		for i, c := range calendars {
			b := tx.Bucket(c.bucket)
			if b != nil && periodOf(b) != periods[i] {
				// A new day or month: the old period's counters go.
				if err := tx.DeleteBucket(c.bucket); err != nil {
					return err
				}
				b = nil
			}
			if b == nil {
				var err error
				if b, err = tx.CreateBucket(c.bucket); err != nil {
					return err
				}
				if err := b.Put(periodKey, binary.BigEndian.AppendUint64(nil, uint64(periods[i]))); err != nil {
					return err
				}
			}
			for _, id := range released {
				if err := b.Delete(id); err != nil {
					return err
				}
			}
			buckets[i] = b
		}
		for _, en := range entries {
			if err := buckets[en.cal].Put(en.id, binary.BigEndian.AppendUint64(nil, uint64(en.n))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		e.Memory.mu.Lock()
		e.released = append(e.released, released...)
		e.Memory.mu.Unlock()
		return fmt.Errorf("failed to flush the calendar counters: %w", err)
	}
	return nil
}

func periodOf(b *bolt.Bucket) int64 {
	v := b.Get(periodKey)
	if len(v) != 8 {
		return -1
	}
	return int64(binary.BigEndian.Uint64(v))
}

// restore seeds the memory cells with the counters of the current day and month found in the file.
func (e *Embedded) restore() error {
	now := e.now()
	return e.db.View(func(tx *bolt.Tx) error {
		for i, c := range calendars {
			period := c.unit.Period(now)
			b := tx.Bucket(c.bucket)
			if b == nil || periodOf(b) != period {
				continue
			}
			err := b.ForEach(func(k, v []byte) error {
				if string(k) == string(periodKey) {
					return nil
				}
				parts := strings.Split(string(k), "\x00")
				if len(parts) != 4 || len(v) != 8 {
					return fmt.Errorf("corrupt %s counter %q in the state file", c.unit, k)
				}
				t, err := ParseType(parts[3])
				if err != nil {
					return err
				}
				e.seed(cellKey{parts[0], parts[1], parts[2]}, i, t, period, int64(binary.BigEndian.Uint64(v)))
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
}

func (e *Embedded) seed(k cellKey, cal int, t Type, period, n int64) {
	m := e.Memory
	m.mu.Lock()
	c := m.cellLocked(k)
	m.mu.Unlock()
	c.mu.Lock()
	c.cal[cal][t] = periodCounter{period: period, n: n}
	c.mu.Unlock()
}

// Release implements Releaser: it frees the groups' cells and deletes their calendar counters from the file at
// the next flush.
func (e *Embedded) Release(namespace string, groups []string) {
	e.Memory.release(namespace, groups, func(k cellKey) {
		for t := range numTypes {
			e.released = append(e.released, bucketID(k.namespace, k.group, k.slug, t))
		}
	})
}

// Close stops the background flush and flushes everything; the file stays open for its owner to close. Call it
// on graceful shutdown, after the server stopped admitting calls.
func (e *Embedded) Close() error {
	e.halt()
	return e.Flush()
}

func (e *Embedded) halt() {
	select {
	case <-e.stop:
	default:
		close(e.stop)
	}
	<-e.done
}

var (
	_ Store    = (*Embedded)(nil)
	_ Releaser = (*Embedded)(nil)
)
