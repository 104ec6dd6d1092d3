package queue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgate/modelgate/gatewayd/async/queue"
	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

// TestRedisFailoverUnderEnqueues kills (SIGKILL) the primary that holds the queue while eight callers enqueue, on
// Sentinel and on Cluster, and keeps enqueueing until the replica has taken over. It fails when the store does not
// accept again, or when a request is half there after the failover (its hash without its place in the queue, or
// the other way round): each enqueue is one transaction. It reports the enqueues that failed meanwhile and the
// accepted requests (201s) the failover lost: replication is asynchronous and the store does not WAIT, so what
// the replica had not received at the kill is gone (run it with -v; docs/operations.md, "Redis failover").
func TestRedisFailoverUnderEnqueues(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a primary and waits for the failover")
	}
	for _, mode := range []string{redistest.Sentinel, redistest.Cluster} {
		t.Run(mode, func(t *testing.T) {
			d := redistest.StartDeployment(t, mode)
			s := queue.NewRedis(d.Client(), "")
			primary := d.PrimaryOf(context.Background(), "{mg:async}:queues")
			var mu sync.Mutex
			var accepted, refused []string
			var failed, afterKill atomic.Int64
			var killed atomic.Bool
			var killOnce sync.Once
			deadline := time.Now().Add(60 * time.Second)
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Go(func() {
					for i := 0; time.Now().Before(deadline); i++ {
						id := fmt.Sprintf("req-%d-%d", w, i)
						ctx, cancel := context.WithTimeout(context.Background(), time.Second)
						err := s.Enqueue(ctx, req(id, 0, t0, ""))
						cancel()
						if err != nil {
							failed.Add(1)
							mu.Lock()
							refused = append(refused, id)
							mu.Unlock()
							time.Sleep(10 * time.Millisecond)
							continue
						}
						mu.Lock()
						accepted = append(accepted, id)
						n := len(accepted)
						mu.Unlock()
						if n == 500 {
							killOnce.Do(func() { primary.Kill(); killed.Store(true) })
						}
						// Enough accepted after the takeover: stop.
						if killed.Load() && failed.Load() > 0 && afterKill.Add(1) >= 500 {
							return
						}
					}
				})
			}
			wg.Wait()
			if afterKill.Load() < 500 {
				t.Fatalf("the store did not accept again after the failover: %d accepted, %d failed", len(accepted), failed.Load())
			}
			var lost int
			for _, id := range accepted {
				err := retry(func() error { _, err := s.Get(context.Background(), id); return err })
				if errors.Is(err, queue.ErrNotFound) {
					lost++
				} else if err != nil {
					t.Fatal(err)
				}
			}
			// An enqueue that failed from the caller's side (its answer lost with the primary, or past its deadline)
			// may still have been written whole: it is queued too, and is no half request.
			var landed int
			for _, id := range refused {
				err := retry(func() error { _, err := s.Get(context.Background(), id); return err })
				if err == nil {
					landed++
				} else if !errors.Is(err, queue.ErrNotFound) {
					t.Fatal(err)
				}
			}
			var queued int
			if err := retry(func() (err error) { queued, _, err = s.Depth(context.Background(), q); return err }); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d enqueues failed during the failover (%d of them written all the same); %d accepted, %d of them lost, %d queued",
				mode, failed.Load(), landed, len(accepted), lost, queued)
			if queued != len(accepted)-lost+landed {
				t.Errorf("%d requests queued, want the %d accepted less the %d lost, plus the %d failed enqueues written all the same: a request is half there",
					queued, len(accepted), lost, landed)
			}
		})
	}
}

// retry runs fn until it answers, for at most 10 s: right after a failover a pooled connection may still point
// at the dead primary. A request that is not there is an answer.
func retry(fn func() error) error {
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err = fn(); err == nil || errors.Is(err, queue.ErrNotFound) {
			return err
		}
	}
	return err
}
