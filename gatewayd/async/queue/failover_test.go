package queue_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/modelgate/modelgate/gatewayd/async/queue"
	"github.com/modelgate/modelgate/gatewayd/state/redisclient"
	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

// TestRedisWaitOnEnqueue: with WAIT for one replica, on Sentinel and on Cluster, an accepted request is on the
// replica of the queue's primary when Enqueue answers; while that replica is stuck (SIGSTOP), an enqueue is still
// accepted after the timeout, stays on the primary, and is counted short. On a cluster this shows the WAIT went
// to the primary that took the write: a WAIT on any other node's connection has no write to wait for, and
// answers at once without counting short.
func TestRedisWaitOnEnqueue(t *testing.T) {
	for _, mode := range []string{redistest.Sentinel, redistest.Cluster} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			d := redistest.StartDeployment(t, mode)
			w := redisclient.NewWait(1, 200*time.Millisecond, logr.Discard())
			s := queue.NewRedis(d.Client(), "").WithWait(w)
			prefix := redisclient.Tag(mode == redistest.Cluster, "mg:async") + ":"
			primary := d.PrimaryOf(ctx, prefix+"queues")
			replica := d.ReplicaOf(ctx, primary)
			reader := replica.Reader()
			for i := range 20 {
				id := fmt.Sprintf("acked-%d", i)
				if err := s.Enqueue(ctx, req(id, 0, t0, "")); err != nil {
					t.Fatal(err)
				}
				if n, err := reader.Exists(ctx, prefix+"r:"+id).Result(); err != nil || n != 1 {
					t.Fatalf("request %s was accepted before its replica had it", id)
				}
			}
			if n := w.Shorts("async_request"); n != 0 {
				t.Fatalf("%.0f short WAITs with the replica up, want 0", n)
			}
			replica.Pause()
			if err := s.Enqueue(ctx, req("short", 0, t0, "")); err != nil {
				t.Fatalf("an enqueue whose replica did not acknowledge failed: %v; want it accepted", err)
			}
			if n := w.Shorts("async_request"); n != 1 {
				t.Errorf("%.0f short WAITs with the replica stuck, want 1", n)
			}
			replica.Resume()
			if _, err := s.Get(ctx, "short"); err != nil {
				t.Errorf("the request whose WAIT was short is not kept: %v", err)
			}
		})
	}
}

// TestRedisFailoverUnderEnqueues kills (SIGKILL) the primary that holds the queue while eight callers enqueue, on
// Sentinel and on Cluster, and keeps enqueueing until the replica has taken over. It fails when the store does not
// accept again, or when a request is half there after the failover (its hash without its place in the queue, or
// the other way round): each enqueue is one transaction. It reports the enqueues that failed meanwhile and the
// accepted requests (201s) the failover lost. Without WAIT, replication is asynchronous, so what the replica had
// not received at the kill is gone; with WAIT for one replica (--redis-wait-replicas=1) every accepted request
// was on the replica when it was accepted, and the test fails if one is lost (run it with -v;
// docs/operations.md, "Redis failover").
func TestRedisFailoverUnderEnqueues(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a primary and waits for the failover")
	}
	redistest.EachFailover(t, func(t *testing.T, d *redistest.Deployment, w *redisclient.Wait) {
		s := queue.NewRedis(d.Client(), "").WithWait(w)
		primary := d.PrimaryOf(context.Background(), "{mg:async}:queues")
		writes := redistest.KillUnderWrites(t, primary, func(ctx context.Context, id string) error {
			return s.Enqueue(ctx, req(id, 0, t0, ""))
		})
		accepted, refused := writes.Accepted, writes.Refused
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
		t.Logf("%s, wait=%t: %d enqueues failed during the failover (%d of them written all the same); %d accepted, %d of them lost, %d queued; %.0f short WAITs",
			d.Mode, w != nil, len(refused), landed, len(accepted), lost, queued, w.Shorts("async_request"))
		if w != nil && lost > 0 {
			t.Errorf("%d accepted requests lost with WAIT for one replica", lost)
		}
		if queued != len(accepted)-lost+landed {
			t.Errorf("%d requests queued, want the %d accepted less the %d lost, plus the %d failed enqueues written all the same: a request is half there",
				queued, len(accepted), lost, landed)
		}
	})
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

// BenchmarkRedisEnqueueWait is the cost of WAIT for one replica on an enqueue, one caller at a time, on Sentinel
// and on Cluster (docs/benchmarks.md, "Redis deployments").
func BenchmarkRedisEnqueueWait(b *testing.B) {
	for _, mode := range []string{redistest.Sentinel, redistest.Cluster} {
		for _, replicas := range []int{0, 1} {
			b.Run(fmt.Sprintf("%s/wait=%d", mode, replicas), func(b *testing.B) {
				s := queue.NewRedis(redistest.StartDeployment(b, mode).Client(), "").
					WithWait(redisclient.NewWait(replicas, time.Second, logr.Discard()))
				ctx := context.Background()
				for i := 0; b.Loop(); i++ {
					if err := s.Enqueue(ctx, req(fmt.Sprintf("bench-%d", i), 0, t0, "")); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
