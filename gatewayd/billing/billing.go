// Package billing records one billing event per model call made with a federated key, keeps the events for a
// retention period, answers the queries of GET /v1/gateway/events (served by gatewayd/rest/events), and delivers
// them to the workspace's billing webhook from a durable outbox, through the one Standard Webhooks sender
// (gatewayd/stdwebhook), at least once. Events are written off the hot path by a Recorder that batches them into
// the Store (bbolt for the embedded store, Redis streams when several replicas share Redis); receivers
// deduplicate by idempotencyKey. Beside the events, in the same write, each store keeps a per-minute throttle
// rollup: the 429s per group, slug and the limit that refused them, which GET /v1/gateway/throttles serves
// (throttles.go), and a per-minute usage rollup: the calls, 429s, tokens and cost per group and slug, which
// GET /v1/gateway/usage charts (usage.go).
package billing

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Tokens is the usage of one call.
type Tokens struct {
	InputTokens  int64 `json:"inputTokens"`
	OutputTokens int64 `json:"outputTokens"`
}

// Event is one billing event, in its public shape (docs/limits.md "Billing events").
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
	// CostMicroUsd is the call's cost in millionths of a US dollar: its tokens at the prices of the target that
	// answered, as the view the call was routed with held them, rounded half up (docs/limits.md "Billing
	// events"); 0 for an unpriced target and for a call no target answered.
	CostMicroUsd int64 `json:"costMicroUsd"`
	// Target and Provider name the Endpoint target that answered, Attempts the tries the call made
	// (docs/routing.md, rule 1); empty for a call refused before any try.
	Target   string `json:"target,omitempty"`
	Provider string `json:"provider,omitempty"`
	Attempts int    `json:"attempts,omitempty"`
}

// Record is an event with where it belongs, as the Recorder hands it to the Store.
type Record struct {
	Namespace string
	Event     Event
	// Deliver puts the event in the webhook outbox too: the workspace had a billing webhook when it was recorded.
	Deliver bool
	// Refusal names the limit that refused a 429 call; nil for other calls, and for a 429 no gateway limit gave.
	// It goes to the throttle rollup, not into the event.
	Refusal *Refusal `json:",omitempty"`
}

// DefaultLimit is List's page size when Query.Limit is not positive.
const DefaultLimit = 100

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

// PartlyWritten is an Append error after which only Unwritten remain to be written: the store kept the other
// records of the batch.
type PartlyWritten struct {
	Unwritten []Record
	Err       error
}

func (e *PartlyWritten) Error() string {
	return fmt.Sprintf("%d billing events were not written: %v", len(e.Unwritten), e.Err)
}

func (e *PartlyWritten) Unwrap() error { return e.Err }

// Store keeps events and the outbox.
type Store interface {
	// Append stores records, and their outbox entries, in one write; a store that writes in several parts (Redis
	// Cluster, one per namespace) returns a *PartlyWritten when only some parts failed.
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
	// Throttles sums the throttle rollup of ns: every 429 Append stored, counted per ThrottleKey, over the minutes
	// from the one holding start to the one holding end, both included. Append writes the rollup in the same
	// write as the events; it keeps ThrottleKeep.
	Throttles(ctx context.Context, ns string, start, end time.Time) ([]ThrottleCount, error)
	// Usage reads the usage rollup of ns for group (AllGroups: every group's calls together): the Counters of
	// each slug per minute, over the minutes from the one holding start to the one holding end, both included,
	// in minute then slug order; minutes without calls are absent. Append writes the rollup in the same write as
	// the events; it keeps UsageKeep.
	Usage(ctx context.Context, ns, group string, start, end time.Time) ([]UsageMinute, error)
}

// ErrCursor is List's answer to a cursor it did not hand out.
var ErrCursor = errors.New("cursor: not one this server issued")

// DefaultFlushInterval is how long the Recorder gathers events before writing them: with the embedded store it
// bounds, like the DAY counters' flush, what a crash can lose.
const DefaultFlushInterval = 200 * time.Millisecond

// RecorderOptions tune a Recorder.
type RecorderOptions struct {
	// Interval is how long events gather before a write; DefaultFlushInterval when zero.
	Interval time.Duration
	// OnError hears about failed writes (the batch is kept and retried) and spool problems.
	OnError func(error)
	// Spool is a file that keeps the events the Store still refuses when the Recorder closes (Redis unreachable
	// at shutdown, say). A Recorder started with the same file hands them to the Store first and removes the file
	// once they are written. Without a spool, such events are lost after the closing retries.
	Spool string
}

// Recorder writes events to a Store in batches, so a model call never waits for a disk or network write. Record
// appends to a queue under a mutex and wakes nobody: the writing goroutine takes the whole queue at each tick,
// or as soon as it holds flushAt events, so a call costs no hand-over to another goroutine (a channel send to a
// waiting receiver is one, and on a loaded gateway it was one per call; docs/benchmarks.md).
type Recorder struct {
	store Store
	opts  RecorderOptions

	// gate is held (read) by every Record for its whole call, and (write) by Close before it marks the Recorder
	// closed, so an event whose Record began before Close is always written or spooled.
	gate   sync.RWMutex
	closed bool

	mu    sync.Mutex
	room  *sync.Cond // broadcast when the writer takes the queue: a Record waiting for room may go on
	queue []Record   // recorded, not yet taken by the writer; at most queueCap
	// full wakes the writer when the queue reaches flushAt; closing when Close was called.
	full, closing chan struct{}
	done          chan struct{}
}

const (
	// queueCap is how many events wait for the writer before Record blocks: back-pressure, never a dropped event.
	queueCap = 4096
	// flushAt is how many queued events make the writer write before its tick.
	flushAt = 512
)

// closingAttempts is how many times Close tries to write what is left before it spools it.
const closingAttempts = 5

// NewRecorder starts a Recorder. Events left in opts.Spool by an earlier Recorder are written before new ones;
// a spool that cannot be read is moved aside (suffix .unreadable) and reported, never deleted.
func NewRecorder(store Store, opts RecorderOptions) *Recorder {
	if opts.Interval <= 0 {
		opts.Interval = DefaultFlushInterval
	}
	r := &Recorder{store: store, opts: opts, full: make(chan struct{}, 1), closing: make(chan struct{}), done: make(chan struct{})}
	r.room = sync.NewCond(&r.mu)
	spooled, err := readSpool(opts.Spool)
	if err != nil {
		r.report(err)
		if mvErr := os.Rename(opts.Spool, opts.Spool+".unreadable"); mvErr != nil {
			r.report(fmt.Errorf("failed to move the unreadable billing spool aside: %w", mvErr))
		}
		spooled = nil
	}
	go r.loop(spooled)
	return r
}

func (r *Recorder) report(err error) {
	if r.opts.OnError != nil {
		r.opts.OnError(err)
	}
}

// Record queues one event. It blocks only when the queue is full, which applies back-pressure rather than
// dropping billable usage.
func (r *Recorder) Record(rec Record) {
	r.gate.RLock()
	defer r.gate.RUnlock()
	if r.closed {
		return
	}
	r.mu.Lock()
	for len(r.queue) >= queueCap {
		r.room.Wait()
	}
	r.queue = append(r.queue, rec)
	n := len(r.queue)
	r.mu.Unlock()
	if n == flushAt {
		select {
		case r.full <- struct{}{}:
		default: // the writer already has a wake-up pending
		}
	}
}

// take moves the queue to the end of batch and lets waiting Records go on.
func (r *Recorder) take(batch []Record) []Record {
	r.mu.Lock()
	batch = append(batch, r.queue...)
	clear(r.queue) // the strings of events already taken are not kept alive by the queue's array
	r.queue = r.queue[:0]
	r.room.Broadcast()
	r.mu.Unlock()
	return batch
}

// Close writes everything queued and stops. Call it after the server stopped serving calls.
func (r *Recorder) Close() {
	r.gate.Lock()
	if !r.closed {
		r.closed = true
		close(r.closing)
	}
	r.gate.Unlock()
	<-r.done
}

func (r *Recorder) loop(batch []Record) {
	defer close(r.done)
	t := time.NewTicker(r.opts.Interval)
	defer t.Stop()
	// spooled is true while the spool file holds events that are also in batch.
	spooled := len(batch) > 0
	// write stores the batch; on failure it keeps the batch for the next tick (take keeps appending to it).
	write := func() {
		if len(batch) == 0 {
			return
		}
		if err := r.store.Append(context.Background(), batch); err != nil {
			// Only what the store did not keep is written again, so a partial write duplicates nothing.
			if pw := (*PartlyWritten)(nil); errors.As(err, &pw) {
				batch = append(batch[:0], pw.Unwritten...)
			}
			r.report(fmt.Errorf("failed to write %d billing events (kept for the next attempt): %w", len(batch), err))
			return
		}
		batch = batch[:0]
		if spooled {
			if err := os.Remove(r.opts.Spool); err != nil && !errors.Is(err, fs.ErrNotExist) {
				r.report(fmt.Errorf("failed to remove the written billing spool: %w", err))
			}
			spooled = false
		}
	}
	for {
		select {
		case <-r.closing:
			// Close holds no Record back any more: every event recorded is in the queue.
			batch = r.take(batch)
			for range closingAttempts {
				if write(); len(batch) == 0 {
					return
				}
				time.Sleep(r.opts.Interval)
			}
			r.spool(batch)
			return
		case <-r.full:
		case <-t.C:
		}
		if batch = r.take(batch); len(batch) > 0 {
			write()
		}
	}
}

// spool saves the events the Store refused at close, replacing the file atomically: it always holds the whole
// unwritten batch, which already includes whatever the file held when this Recorder started.
func (r *Recorder) spool(batch []Record) {
	if r.opts.Spool == "" {
		r.report(fmt.Errorf("lost %d billing events: the store refused them at shutdown and no spool file is set", len(batch)))
		return
	}
	if err := writeSpool(r.opts.Spool, batch); err != nil {
		r.report(fmt.Errorf("lost %d billing events: the store refused them at shutdown and the spool failed: %w", len(batch), err))
		return
	}
	r.report(fmt.Errorf("spooled %d billing events to %s: the store refused them at shutdown; they are written at the next start", len(batch), r.opts.Spool))
}

// writeSpool writes recs as JSON lines to a temporary file, syncs it and renames it over path, so a crash leaves
// either the old spool or the new one, never a torn file.
func writeSpool(path string, recs []Record) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	w := bufio.NewWriter(tmp)
	enc := json.NewEncoder(w)
	for i := range recs {
		if err := enc.Encode(&recs[i]); err != nil {
			tmp.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// readSpool reads the records of a spool file; a missing file (or no spool) is no records.
func readSpool(path string) ([]Record, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to open the billing spool: %w", err)
	}
	defer f.Close()
	var out []Record
	dec := json.NewDecoder(f)
	for {
		var rec Record
		err := dec.Decode(&rec)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("failed to read the billing spool %s after %d events: %w", path, len(out), err)
		}
		out = append(out, rec)
	}
}
