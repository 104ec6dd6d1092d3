package limits

import (
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// DefaultFlushInterval is how often the embedded store writes its DAY counters to disk, and so the most a
// crash (SIGKILL, power loss) can lose: the calls admitted and tokens settled since the last flush. A graceful
// stop flushes everything.
const DefaultFlushInterval = time.Second

var (
	bucketDay = []byte("limits.day")
	// keyDay holds the UTC day number the counters of bucketDay belong to.
	keyDay = []byte("\x00day")
)

// EmbeddedOptions configure an embedded store.
type EmbeddedOptions struct {
	// FlushInterval is the period of the background flush; DefaultFlushInterval when zero, none when negative
	// (tests call Flush themselves).
	FlushInterval time.Duration
	// Now is the clock that decides which day is today; time.Now when nil.
	Now func() time.Time
}

// Embedded is the default single-replica Store: it is the in-memory store, whose DAY counters are also kept
// in a bbolt file so that a restart keeps the day's usage. Rolling windows stay in memory only: they are at
// most a minute long, about the time a restart takes. The file is opened by one process at a time (bbolt
// locks it), which matches the one replica this store supports.
type Embedded struct {
	*Memory
	db  *bolt.DB
	now func() time.Time
	mu  sync.Mutex // serialises flushes
	// released are the DAY counters of released groups still in the file; the next flush deletes them, so a
	// restart does not bring a deleted group's counters back. Guarded by Memory.mu.
	released [][]byte
	stop     chan struct{}
	done     chan struct{}
}

// NewEmbedded restores today's DAY counters from db and starts the background flush. A file written on an
// earlier UTC day restores nothing: usage starts from zero. db belongs to the caller (gatewayd/state), which
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

// bucketID is the bbolt key of a DAY counter: namespace, group, slug and type, NUL-separated (none of them
// can contain a NUL).
func bucketID(ns, group, slug string, t Type) []byte {
	return []byte(ns + "\x00" + group + "\x00" + slug + "\x00" + t.String())
}

// Flush writes every DAY counter of today to the file in one transaction.
func (e *Embedded) Flush() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	today := e.now().UnixNano() / nanosPerDay
	type entry struct {
		id []byte
		n  int64
	}
	var entries []entry
	e.Memory.mu.Lock()
	for k, c := range e.Memory.cells {
		c.mu.Lock()
		for t := range numTypes {
			if d := c.day[t]; d.day == today && d.n > 0 {
				entries = append(entries, entry{bucketID(k.namespace, k.group, k.slug, t), d.n})
			}
		}
		c.mu.Unlock()
	}
	released := e.released
	e.released = nil
	e.Memory.mu.Unlock()
	err := e.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketDay)
		if b != nil && dayOf(b) != today {
			if err := tx.DeleteBucket(bucketDay); err != nil {
				return err
			}
			b = nil
		}
		if b == nil {
			var err error
			if b, err = tx.CreateBucket(bucketDay); err != nil {
				return err
			}
			if err := b.Put(keyDay, binary.BigEndian.AppendUint64(nil, uint64(today))); err != nil {
				return err
			}
		}
		for _, id := range released {
			if err := b.Delete(id); err != nil {
				return err
			}
		}
		for _, en := range entries {
			if err := b.Put(en.id, binary.BigEndian.AppendUint64(nil, uint64(en.n))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		e.Memory.mu.Lock()
		e.released = append(e.released, released...)
		e.Memory.mu.Unlock()
		return fmt.Errorf("failed to flush the DAY counters: %w", err)
	}
	return nil
}

func dayOf(b *bolt.Bucket) int64 {
	v := b.Get(keyDay)
	if len(v) != 8 {
		return -1
	}
	return int64(binary.BigEndian.Uint64(v))
}

// restore seeds the memory cells with the counters of today found in the file.
func (e *Embedded) restore() error {
	today := e.now().UnixNano() / nanosPerDay
	return e.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketDay)
		if b == nil || dayOf(b) != today {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			if string(k) == string(keyDay) {
				return nil
			}
			parts := strings.Split(string(k), "\x00")
			if len(parts) != 4 || len(v) != 8 {
				return fmt.Errorf("corrupt DAY counter %q in the state file", k)
			}
			t, err := ParseType(parts[3])
			if err != nil {
				return err
			}
			e.seed(cellKey{parts[0], parts[1], parts[2]}, t, today, int64(binary.BigEndian.Uint64(v)))
			return nil
		})
	})
}

func (e *Embedded) seed(k cellKey, t Type, day, n int64) {
	m := e.Memory
	m.mu.Lock()
	c := m.cellLocked(k)
	m.mu.Unlock()
	c.mu.Lock()
	c.day[t] = dayCounter{day: day, n: n}
	c.mu.Unlock()
}

// Release implements Releaser: it frees the groups' cells and deletes their DAY counters from the file at the
// next flush.
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
