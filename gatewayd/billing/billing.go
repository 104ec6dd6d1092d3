// Package billing records one billing event per model call made with a federated key, keeps the events for
// a retention period, serves them at GET /v1/gateway/events, and delivers them to the workspace's billing
// webhook from a durable outbox, signed the Standard Webhooks way, at least once. Events are written off the
// hot path by a Recorder that batches them into the Store (bbolt for the embedded store, Redis streams when
// several replicas share Redis); receivers deduplicate by idempotencyKey.
package billing

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"
)

// Tokens is the usage of one call.
type Tokens struct {
	InputTokens  int64 `json:"inputTokens"`
	OutputTokens int64 `json:"outputTokens"`
}

// Event is one billing event, in the public shape of DESIGN.md.
type Event struct {
	IdempotencyKey   string    `json:"idempotencyKey"`
	Timestamp        time.Time `json:"timestamp"`
	RequestID        string    `json:"requestId"`
	ModelSlug        string    `json:"modelSlug"`
	ExternalEntityID string    `json:"externalEntityId"`
	GroupID          string    `json:"groupId"`
	APIKeyPrefix     string    `json:"apiKeyPrefix"`
	StatusCode       int       `json:"statusCode"`
	Tokens           Tokens    `json:"tokens"`
}

// Record is an event with where it belongs, as the Recorder hands it to the Store.
type Record struct {
	Namespace string
	Event     Event
	// Deliver puts the event in the webhook outbox too: the workspace had a billing webhook when it was recorded.
	Deliver bool
}

// Query selects events of one namespace. Zero fields select everything.
type Query struct {
	Start, End time.Time // Start inclusive, End exclusive
	// Cursor continues after the last event of a previous page; it is opaque to callers.
	Cursor            string
	Limit             int
	APIKeyPrefixes    []string
	ExternalEntityIDs []string
}

func (q *Query) match(e *Event) bool {
	return (len(q.APIKeyPrefixes) == 0 || contains(q.APIKeyPrefixes, e.APIKeyPrefix)) &&
		(len(q.ExternalEntityIDs) == 0 || contains(q.ExternalEntityIDs, e.ExternalEntityID))
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Pending is an outbox entry: an event not yet acknowledged by the webhook.
type Pending struct {
	ID    string
	Event Event
}

// Store keeps events and the outbox.
type Store interface {
	// Append stores records, and their outbox entries, in one write.
	Append(ctx context.Context, recs []Record) error
	// List returns the events of ns matching q in ascending time order, and the cursor of the next page ("" when
	// there is none).
	List(ctx context.Context, ns string, q Query) ([]Event, string, error)
	// Pending returns up to max of the oldest outbox entries of ns.
	Pending(ctx context.Context, ns string, max int) ([]Pending, error)
	// Ack removes delivered entries from the outbox of ns.
	Ack(ctx context.Context, ns string, ids []string) error
	// Outboxes lists the namespaces that have pending entries.
	Outboxes(ctx context.Context) ([]string, error)
	// Prune drops events recorded before t (retention). Undelivered outbox entries are kept.
	Prune(ctx context.Context, before time.Time) error
}

// NewID returns a random identifier with prefix, for request ids and idempotency keys.
func NewID(prefix string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// DefaultFlushInterval is how long the Recorder gathers events before writing them: with the embedded store it
// bounds, like the DAY counters' flush, what a crash can lose.
const DefaultFlushInterval = 200 * time.Millisecond

// Recorder writes events to a Store in batches, so a model call never waits for a disk or network write.
type Recorder struct {
	store    Store
	interval time.Duration
	onError  func(error)

	mu     sync.RWMutex
	closed bool
	ch     chan Record
	done   chan struct{}
}

// NewRecorder starts a Recorder. onError, when not nil, hears about failed writes (the batch is retried).
func NewRecorder(store Store, interval time.Duration, onError func(error)) *Recorder {
	if interval <= 0 {
		interval = DefaultFlushInterval
	}
	r := &Recorder{store: store, interval: interval, onError: onError, ch: make(chan Record, 4096), done: make(chan struct{})}
	go r.loop()
	return r
}

// Record queues one event. It blocks only when the queue is full, which applies back-pressure rather than
// dropping billable usage.
func (r *Recorder) Record(rec Record) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if !r.closed {
		r.ch <- rec
	}
}

// Close writes everything queued and stops. Call it after the server stopped serving calls.
func (r *Recorder) Close() {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.ch)
	}
	r.mu.Unlock()
	<-r.done
}

func (r *Recorder) loop() {
	defer close(r.done)
	t := time.NewTicker(r.interval)
	defer t.Stop()
	var batch []Record
	// write stores the batch; on failure it keeps the batch for the next tick (Record keeps appending to it).
	write := func() {
		if len(batch) == 0 {
			return
		}
		if err := r.store.Append(context.Background(), batch); err != nil {
			if r.onError != nil {
				r.onError(err)
			}
			return
		}
		batch = batch[:0]
	}
	for {
		select {
		case rec, ok := <-r.ch:
			if !ok {
				// Closing: a store that keeps failing gets a few more tries, then the batch is given up.
				for range 5 {
					if write(); len(batch) == 0 {
						return
					}
					time.Sleep(r.interval)
				}
				return
			}
			batch = append(batch, rec)
			if len(batch) >= 512 {
				write()
			}
		case <-t.C:
			write()
		}
	}
}
