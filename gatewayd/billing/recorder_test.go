package billing

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// heldStore is a real bbolt store whose first Append waits until release is closed, as a slow disk or an
// unreachable Redis holds the writer.
type heldStore struct {
	*Bolt
	entered chan struct{} // closed when the first Append began
	release chan struct{}
	once    sync.Once
}

func (s *heldStore) Append(ctx context.Context, recs []Record) error {
	first := false
	s.once.Do(func() { first = true; close(s.entered) })
	if first {
		<-s.release
	}
	return s.Bolt.Append(ctx, recs)
}

// TestRecorderBlocksWhenFullAndLosesNothing: while the writer is held, Record queues up to queueCap events and
// then blocks (back-pressure) instead of dropping one; once the writer goes on, every event, the blocked one
// included, is stored.
func TestRecorderBlocksWhenFullAndLosesNothing(t *testing.T) {
	store := &heldStore{Bolt: openBolt(t), entered: make(chan struct{}), release: make(chan struct{})}
	rec := NewRecorder(store, RecorderOptions{Interval: time.Millisecond})
	event := func(i int) Record {
		return Record{Namespace: "ns", Event: Event{IdempotencyKey: fmt.Sprintf("evt_%05d", i), Timestamp: t0}}
	}
	rec.Record(event(0))
	<-store.entered // the writer took event 0 and is held in Append
	for i := 1; i <= queueCap; i++ {
		rec.Record(event(i))
	}
	returned := make(chan struct{})
	go func() { rec.Record(event(queueCap + 1)); close(returned) }()
	time.Sleep(20 * time.Millisecond) // time for a Record that did not block to return; the checks hold either way
	select {
	case <-returned:
		t.Fatal("Record returned while the queue held queueCap events and the writer was held")
	default:
	}
	rec.mu.Lock()
	queued := len(rec.queue)
	rec.mu.Unlock()
	if queued != queueCap {
		t.Fatalf("queue holds %d events while the writer is held, want queueCap (%d)", queued, queueCap)
	}
	close(store.release)
	<-returned
	rec.Close()
	keys := map[string]bool{}
	for q := (Query{Limit: 1000}); ; {
		evs, next, err := store.List(context.Background(), "ns", q)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			keys[e.IdempotencyKey] = true
		}
		if next == "" {
			break
		}
		q.Cursor = next
	}
	for i := 0; i <= queueCap+1; i++ {
		if k := event(i).Event.IdempotencyKey; !keys[k] {
			t.Fatalf("event %s was recorded but not stored (%d of %d stored)", k, len(keys), queueCap+2)
		}
	}
}
