// Package keyuse records when each workspace key was last used, for the last_used_at of GET /v1/api_keys. A
// Recorder writes at most once a minute per key from each replica (the throttle is in memory), into the durable
// store that gatewayd/state opens (the bbolt file, or Redis shared by every replica), so every replica lists the
// same times. The time is that of a successful authentication, not of a successful call.
package keyuse

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	bolt "go.etcd.io/bbolt"
)

// Interval is the least time between two writes of one key's last use: last_used_at is exact to a minute.
const Interval = time.Minute

// Store keeps the last use of each workspace key.
type Store interface {
	// Touch records that the key of prefix in namespace was used at t. An earlier t than the one stored is kept
	// out, so replicas whose writes cross never move the time back.
	Touch(ctx context.Context, namespace, prefix string, t time.Time) error
	// LastUsed returns the recorded last use of the namespace's keys, by prefix; a key never used is absent.
	LastUsed(ctx context.Context, namespace string) (map[string]time.Time, error)
}

// Recorder throttles writes to a Store: one per key per Interval from this process.
type Recorder struct {
	store Store
	now   func() time.Time
	log   logr.Logger
	mu    sync.Mutex
	// last is keyed by (namespace, prefix): a composite key, so the hot path builds no string.
	last map[[2]string]time.Time
}

// NewRecorder writes to store, reading the time from now (time.Now when nil) and logging failed writes to log.
func NewRecorder(store Store, now func() time.Time, log logr.Logger) *Recorder {
	if now == nil {
		now = time.Now
	}
	return &Recorder{store: store, now: now, log: log, last: map[[2]string]time.Time{}}
}

// sweepAt is the size of the throttle map past which entries older than Interval are dropped.
const sweepAt = 4096

// Used records a use of the key now, unless this process recorded one less than Interval ago. The write is
// synchronous (at most once a minute per key, so the call it delays is rare) and bounded to a second; a failure
// is logged and the call goes on, since a last-use time is never worth a refused call.
func (r *Recorder) Used(namespace, prefix string) {
	if r == nil {
		return
	}
	now := r.now()
	id := [2]string{namespace, prefix}
	r.mu.Lock()
	if t, ok := r.last[id]; ok && now.Sub(t) < Interval {
		r.mu.Unlock()
		return
	}
	r.last[id] = now
	if len(r.last) > sweepAt {
		for k, t := range r.last {
			if now.Sub(t) >= Interval {
				delete(r.last, k)
			}
		}
	}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := r.store.Touch(ctx, namespace, prefix, now); err != nil {
		r.log.Error(err, "Failed to record the last use of a workspace key", "namespace", namespace, "keyPrefix", prefix)
		// Let the next call try again rather than waiting out the interval.
		r.mu.Lock()
		delete(r.last, id)
		r.mu.Unlock()
	}
}

// LastUsed reads the store.
func (r *Recorder) LastUsed(ctx context.Context, namespace string) (map[string]time.Time, error) {
	return r.store.LastUsed(ctx, namespace)
}

// Memory keeps last uses in this process only: gatewayd's store when it runs without durable state (tests).
type Memory struct {
	mu   sync.Mutex
	last map[string]map[string]time.Time
}

// NewMemory returns an empty Memory.
func NewMemory() *Memory { return &Memory{last: map[string]map[string]time.Time{}} }

// Touch implements Store.
func (s *Memory) Touch(_ context.Context, namespace, prefix string, t time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := s.last[namespace]
	if ns == nil {
		ns = map[string]time.Time{}
		s.last[namespace] = ns
	}
	if old, ok := ns[prefix]; !ok || old.Before(t) {
		ns[prefix] = t.Truncate(time.Second).UTC()
	}
	return nil
}

// LastUsed implements Store.
func (s *Memory) LastUsed(_ context.Context, namespace string) (map[string]time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.last[namespace]), nil
}

var bucket = []byte("keyuse.last")

// Bolt keeps last uses in the embedded store's bbolt file: a bucket per namespace, prefix -> Unix seconds.
type Bolt struct{ db *bolt.DB }

// NewBolt stores last uses in db.
func NewBolt(db *bolt.DB) *Bolt { return &Bolt{db: db} }

// Touch implements Store.
func (s *Bolt) Touch(_ context.Context, namespace, prefix string, t time.Time) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		top, err := tx.CreateBucketIfNotExists(bucket)
		if err != nil {
			return err
		}
		b, err := top.CreateBucketIfNotExists([]byte(namespace))
		if err != nil {
			return err
		}
		if old := b.Get([]byte(prefix)); len(old) == 8 && int64(binary.BigEndian.Uint64(old)) >= t.Unix() {
			return nil
		}
		return b.Put([]byte(prefix), binary.BigEndian.AppendUint64(nil, uint64(t.Unix())))
	})
	if err != nil {
		return fmt.Errorf("failed to record the last use of key %s: %w", prefix, err)
	}
	return nil
}

// LastUsed implements Store.
func (s *Bolt) LastUsed(_ context.Context, namespace string) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	err := s.db.View(func(tx *bolt.Tx) error {
		top := tx.Bucket(bucket)
		if top == nil {
			return nil
		}
		b := top.Bucket([]byte(namespace))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			if len(v) == 8 {
				out[string(k)] = time.Unix(int64(binary.BigEndian.Uint64(v)), 0).UTC()
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("failed to read the last uses of workspace keys: %w", err)
	}
	return out, nil
}

// Redis keeps last uses in one hash per namespace, prefix -> Unix seconds, shared by every replica.
type Redis struct {
	client redis.UniversalClient
	prefix string
}

// NewRedis stores last uses under keys that begin with prefix ("modelgate:" when empty).
func NewRedis(client redis.UniversalClient, prefix string) *Redis {
	if prefix == "" {
		prefix = "modelgate:"
	}
	return &Redis{client: client, prefix: prefix}
}

func (s *Redis) key(namespace string) string { return s.prefix + "keyuse:{" + namespace + "}" }

// touchScript sets the field only when the stored time is older, in one round trip.
var touchScript = redis.NewScript(`
local old = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if old < tonumber(ARGV[2]) then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
return 0`)

// Touch implements Store.
func (s *Redis) Touch(ctx context.Context, namespace, prefix string, t time.Time) error {
	if err := touchScript.Run(ctx, s.client, []string{s.key(namespace)}, prefix, t.Unix()).Err(); err != nil {
		return fmt.Errorf("failed to record the last use of key %s: %w", prefix, err)
	}
	return nil
}

// LastUsed implements Store.
func (s *Redis) LastUsed(ctx context.Context, namespace string) (map[string]time.Time, error) {
	all, err := s.client.HGetAll(ctx, s.key(namespace)).Result()
	if err != nil {
		return nil, fmt.Errorf("failed to read the last uses of workspace keys: %w", err)
	}
	out := make(map[string]time.Time, len(all))
	for k, v := range all {
		if sec, err := strconv.ParseInt(v, 10, 64); err == nil {
			out[k] = time.Unix(sec, 0).UTC()
		}
	}
	return out, nil
}
