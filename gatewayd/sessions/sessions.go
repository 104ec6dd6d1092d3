// Package sessions keeps which dashboard sessions are live, server side (gatewayd/dashboard seals the cookies):
// Memory for one process, Bolt beside the embedded store, Redis shared by every replica. gatewayd/state opens the
// one of the durable store in use.
package sessions

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	bolt "go.etcd.io/bbolt"
)

// Store keeps which dashboard sessions are live, server side, so that signing out ends a session at once on every
// replica that shares the store (docs/security.md "Dashboard sessions end on the server"). It holds only the
// SHA-256 of each session's random id, never the key the sealed cookie carries.
type Store interface {
	// Start records session id as live from now for ttl.
	Start(ctx context.Context, id string, now time.Time, ttl time.Duration) error
	// Live reports whether session id was started, has not ended and has not expired at now.
	Live(ctx context.Context, id string, now time.Time) (bool, error)
	// End ends session id at once; ending an unknown session is no error.
	End(ctx context.Context, id string) error
}

// Memory keeps sessions in this process only: the default of dashboard.SessionOptions, and for tests.
type Memory struct {
	mu      sync.Mutex
	expires map[string]time.Time
}

// NewMemory returns an empty Memory.
func NewMemory() *Memory { return &Memory{expires: map[string]time.Time{}} }

// Start implements Store; it drops expired sessions as it goes.
func (m *Memory) Start(_ context.Context, id string, now time.Time, ttl time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, exp := range m.expires {
		if !now.Before(exp) {
			delete(m.expires, k)
		}
	}
	m.expires[id] = now.Add(ttl)
	return nil
}

// Live implements Store.
func (m *Memory) Live(_ context.Context, id string, now time.Time) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	exp, ok := m.expires[id]
	return ok && now.Before(exp), nil
}

// End implements Store.
func (m *Memory) End(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.expires, id)
	return nil
}

var sessionBucket = []byte("dashboard.sessions")

// Bolt keeps sessions in the embedded store's bbolt file: id -> expiry in Unix seconds.
type Bolt struct{ db *bolt.DB }

// NewBolt stores sessions in db.
func NewBolt(db *bolt.DB) *Bolt { return &Bolt{db: db} }

// Start implements Store; it drops expired sessions in the same transaction, so the bucket holds at most
// the sessions of one absolute timeout.
func (b *Bolt) Start(_ context.Context, id string, now time.Time, ttl time.Duration) error {
	err := b.db.Update(func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists(sessionBucket)
		if err != nil {
			return err
		}
		var expired [][]byte
		_ = bk.ForEach(func(k, v []byte) error {
			if len(v) != 8 || int64(binary.BigEndian.Uint64(v)) <= now.Unix() {
				expired = append(expired, k)
			}
			return nil
		})
		for _, k := range expired {
			if err := bk.Delete(k); err != nil {
				return err
			}
		}
		return bk.Put([]byte(id), binary.BigEndian.AppendUint64(nil, uint64(now.Add(ttl).Unix())))
	})
	if err != nil {
		return fmt.Errorf("failed to record a dashboard session: %w", err)
	}
	return nil
}

// Live implements Store.
func (b *Bolt) Live(_ context.Context, id string, now time.Time) (bool, error) {
	live := false
	err := b.db.View(func(tx *bolt.Tx) error {
		if bk := tx.Bucket(sessionBucket); bk != nil {
			v := bk.Get([]byte(id))
			live = len(v) == 8 && int64(binary.BigEndian.Uint64(v)) > now.Unix()
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("failed to read a dashboard session: %w", err)
	}
	return live, nil
}

// End implements Store.
func (b *Bolt) End(_ context.Context, id string) error {
	err := b.db.Update(func(tx *bolt.Tx) error {
		if bk := tx.Bucket(sessionBucket); bk != nil {
			return bk.Delete([]byte(id))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("failed to end a dashboard session: %w", err)
	}
	return nil
}

// Redis keeps sessions in Redis, shared by every replica: one key per session that Redis expires itself.
type Redis struct{ client redis.UniversalClient }

// NewRedis stores sessions under modelgate:dashboard:session:<sha256 of the id>.
func NewRedis(client redis.UniversalClient) *Redis {
	return &Redis{client: client}
}

func (r *Redis) key(id string) string { return "modelgate:dashboard:session:" + id }

// Start implements Store.
func (r *Redis) Start(ctx context.Context, id string, _ time.Time, ttl time.Duration) error {
	if err := r.client.Set(ctx, r.key(id), "1", ttl).Err(); err != nil {
		return fmt.Errorf("failed to record a dashboard session: %w", err)
	}
	return nil
}

// Live implements Store.
func (r *Redis) Live(ctx context.Context, id string, _ time.Time) (bool, error) {
	n, err := r.client.Exists(ctx, r.key(id)).Result()
	if err != nil {
		return false, fmt.Errorf("failed to read a dashboard session: %w", err)
	}
	return n == 1, nil
}

// End implements Store.
func (r *Redis) End(ctx context.Context, id string) error {
	if err := r.client.Del(ctx, r.key(id)).Err(); err != nil {
		return fmt.Errorf("failed to end a dashboard session: %w", err)
	}
	return nil
}
