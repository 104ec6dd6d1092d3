package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/modelgate/modelgate/gatewayd/async/queue"
	"github.com/modelgate/modelgate/gatewayd/state/redistest"
)

// The contract suite: every backend runs the same table of behaviours, with times passed in (a fake clock).

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func backends(t *testing.T) map[string]func(t *testing.T) queue.Store {
	out := map[string]func(t *testing.T) queue.Store{
		"bolt": func(t *testing.T) queue.Store {
			db, err := bolt.Open(filepath.Join(t.TempDir(), "q.db"), 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			s, err := queue.NewBolt(db)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
	// Redis on each deployment gatewayd runs on: standalone, Sentinel and Cluster.
	for _, mode := range redistest.Modes {
		out["redis-"+mode] = func(t *testing.T) queue.Store {
			return queue.NewRedis(redistest.StartDeployment(t, mode).Client(), "")
		}
	}
	return out
}

func eachBackend(t *testing.T, f func(t *testing.T, s queue.Store)) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) { f(t, open(t)) })
	}
}

func req(id string, prio int, created time.Time, webhook string) *queue.Request {
	return &queue.Request{
		ID: id, Namespace: "ns", ModelID: "m", DeploymentID: "d", Input: json.RawMessage(`{"x": [1, 2.50, "é"]}`),
		Webhook: webhook, Priority: prio, MaxTimeInQueueSeconds: 600,
		Retry:  queue.RetryConfig{MaxAttempts: 3, InitialDelayMs: 1000, MaxDelayMs: 5000},
		Status: queue.Queued, WebhookStatus: map[bool]string{true: queue.HookNone, false: queue.HookPending}[webhook == ""],
		CreatedAt: created, StatusAt: created, Errors: []queue.Error{},
	}
}

func enqueue(t *testing.T, s queue.Store, rs ...*queue.Request) {
	t.Helper()
	for _, r := range rs {
		if err := s.Enqueue(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
}

func get(t *testing.T, s queue.Store, id string) *queue.Request {
	t.Helper()
	r, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return r
}

func claim(t *testing.T, s queue.Store, owner string, now time.Time, max int) (*queue.Request, int) {
	t.Helper()
	r, expired, err := s.Claim(context.Background(), queue.QueueOf("ns", "d"), owner, now, 30*time.Second, max)
	if err != nil {
		t.Fatal(err)
	}
	return r, expired
}

const q = "ns/d"

func TestStoreContract(t *testing.T) {
	ctx := context.Background()
	eachBackend(t, func(t *testing.T, s queue.Store) {
		t.Run("enqueue and get keep the request as sent", func(t *testing.T) {
			enqueue(t, s, func() *queue.Request {
				r := req("keep", 1, t0, "https://hook.example.com/x")
				r.Environment = "staging"
				return r
			}())
			r := get(t, s, "keep")
			if string(r.Input) != `{"x": [1, 2.50, "é"]}` || r.Status != queue.Queued || r.Priority != 1 || r.Webhook != "https://hook.example.com/x" ||
				r.Retry.MaxAttempts != 3 || r.Environment != "staging" || !r.CreatedAt.Equal(t0) || r.Queue() != q {
				t.Fatalf("got %+v", r)
			}
			if _, err := s.Get(ctx, "nope"); !errors.Is(err, queue.ErrNotFound) {
				t.Fatalf("unknown id: %v", err)
			}
			if _, ok, err := s.Cancel(ctx, "keep", t0); err != nil || !ok {
				t.Fatal(ok, err)
			}
		})
	})
}

func TestPriorityThenFIFO(t *testing.T) {
	eachBackend(t, func(t *testing.T, s queue.Store) {
		enqueue(t, s, req("p2", 2, t0, ""), req("p0", 0, t0.Add(time.Millisecond), ""), req("p1", 1, t0.Add(2*time.Millisecond), ""),
			req("p0-later", 0, t0.Add(3*time.Millisecond), ""))
		var got []string
		for {
			r, _ := claim(t, s, "w", t0.Add(time.Second), 0)
			if r == nil {
				break
			}
			got = append(got, r.ID)
		}
		if fmt.Sprint(got) != "[p0 p0-later p1 p2]" {
			t.Fatalf("claim order %v", got)
		}
	})
}

func TestClaimRespectsMaxInProgress(t *testing.T) {
	eachBackend(t, func(t *testing.T, s queue.Store) {
		enqueue(t, s, req("a", 0, t0, ""), req("b", 0, t0.Add(time.Millisecond), ""))
		if r, _ := claim(t, s, "w", t0, 1); r == nil || r.ID != "a" || r.Status != queue.InProgress || r.Owner != "w" {
			t.Fatalf("first claim %+v", r)
		}
		if r, _ := claim(t, s, "w", t0, 1); r != nil {
			t.Fatalf("claimed %s past the cap", r.ID)
		}
		if qn, run, err := s.Depth(context.Background(), q); err != nil || qn != 1 || run != 1 {
			t.Fatalf("depth %d %d %v", qn, run, err)
		}
		if r, _ := claim(t, s, "w", t0, 2); r == nil || r.ID != "b" {
			t.Fatalf("second claim %+v", r)
		}
	})
}

func TestCancelOnlyQueued(t *testing.T) {
	ctx := context.Background()
	eachBackend(t, func(t *testing.T, s queue.Store) {
		enqueue(t, s, req("run", 0, t0, ""), req("wait", 0, t0.Add(time.Millisecond), "https://h.example.com"))
		claim(t, s, "w", t0, 0)
		r, ok, err := s.Cancel(ctx, "run", t0.Add(time.Second))
		if err != nil || ok || r.Status != queue.InProgress {
			t.Fatalf("cancel of a running request: %v %v %+v", ok, err, r)
		}
		r, ok, err = s.Cancel(ctx, "wait", t0.Add(time.Second))
		if err != nil || !ok || r.Status != queue.Canceled || r.WebhookStatus != queue.HookCanceled || !r.StatusAt.Equal(t0.Add(time.Second)) {
			t.Fatalf("cancel of a queued request: %v %v %+v", ok, err, r)
		}
		if r, _ := claim(t, s, "w", t0.Add(2*time.Second), 0); r != nil {
			t.Fatalf("claimed canceled %s", r.ID)
		}
		if _, ok, _ := s.Cancel(ctx, "wait", t0.Add(3*time.Second)); ok {
			t.Fatal("a second cancel canceled again")
		}
		if _, _, err := s.Cancel(ctx, "none", t0); !errors.Is(err, queue.ErrNotFound) {
			t.Fatalf("cancel of an unknown id: %v", err)
		}
	})
}

func TestExpiry(t *testing.T) {
	ctx := context.Background()
	eachBackend(t, func(t *testing.T, s queue.Store) {
		short := req("short", 0, t0, "https://h.example.com")
		short.MaxTimeInQueueSeconds = 10
		sweep := req("swept", 0, t0, "")
		sweep.DeploymentID, sweep.MaxTimeInQueueSeconds = "other", 10
		enqueue(t, s, short, sweep, req("long", 1, t0, ""))
		// Not yet: 9.999 s in.
		if r, exp := claim(t, s, "w", t0.Add(9999*time.Millisecond), 1); r == nil || r.ID != "short" || exp != 0 {
			t.Fatalf("before the deadline: %+v %d", r, exp)
		}
		if err := s.Finish(ctx, "short", "w", t0.Add(9999*time.Millisecond), queue.Outcome{Status: queue.Failed}); err != nil {
			t.Fatal(err)
		}
		enqueue(t, s, func() *queue.Request { r := req("short2", 0, t0, ""); r.MaxTimeInQueueSeconds = 10; return r }())
		r, exp := claim(t, s, "w", t0.Add(10*time.Second), 0)
		if r == nil || r.ID != "long" || exp != 1 {
			t.Fatalf("claim at the deadline: %+v, %d expired", r, exp)
		}
		if g := get(t, s, "short2"); g.Status != queue.Expired || g.WebhookStatus != queue.HookNone {
			t.Fatalf("short2 %+v", g)
		}
		sw, err := s.Sweep(ctx, t0.Add(10*time.Second), time.Hour)
		if err != nil || sw.Expired != 1 {
			t.Fatalf("sweep %+v %v", sw, err)
		}
		if g := get(t, s, "swept"); g.Status != queue.Expired {
			t.Fatalf("swept %+v", g)
		}
		if n, _, _ := s.Depth(ctx, "ns/other"); n != 0 {
			t.Fatalf("expired still counted: %d", n)
		}
	})
}

func TestLeases(t *testing.T) {
	ctx := context.Background()
	eachBackend(t, func(t *testing.T, s queue.Store) {
		enqueue(t, s, req("a", 0, t0, ""), req("b", 0, t0.Add(time.Millisecond), ""))
		claim(t, s, "w1", t0, 0) // a, lease to t0+30s
		claim(t, s, "w1", t0, 0) // b
		if err := s.Heartbeat(ctx, "b", "w1", t0.Add(60*time.Second)); err != nil {
			t.Fatal(err)
		}
		if err := s.Heartbeat(ctx, "b", "w2", t0.Add(60*time.Second)); !errors.Is(err, queue.ErrLeaseLost) {
			t.Fatalf("heartbeat of another owner: %v", err)
		}
		sw, err := s.Sweep(ctx, t0.Add(30*time.Second), time.Hour)
		if err != nil || sw.Requeued != 1 {
			t.Fatalf("sweep %+v %v", sw, err)
		}
		if g := get(t, s, "a"); g.Status != queue.Queued || g.Owner != "" {
			t.Fatalf("a after its lease expired: %+v", g)
		}
		if g := get(t, s, "b"); g.Status != queue.InProgress {
			t.Fatalf("b, heartbeated: %+v", g)
		}
		// The lost worker's outcome is refused; the new owner's is kept.
		if err := s.Finish(ctx, "a", "w1", t0.Add(31*time.Second), queue.Outcome{Status: queue.Succeeded}); !errors.Is(err, queue.ErrLeaseLost) {
			t.Fatalf("finish by the lost worker: %v", err)
		}
		r, _ := claim(t, s, "w2", t0.Add(31*time.Second), 0)
		if r == nil || r.ID != "a" || r.Owner != "w2" {
			t.Fatalf("reclaim %+v", r)
		}
		if err := s.Finish(ctx, "a", "w2", t0.Add(32*time.Second), queue.Outcome{Status: queue.Succeeded, Attempts: 1}); err != nil {
			t.Fatal(err)
		}
		if g := get(t, s, "a"); g.Status != queue.Succeeded || g.Attempts != 1 || g.WebhookStatus != queue.HookNone || g.Output != nil {
			t.Fatalf("a %+v", g)
		}
	})
}

func TestRetryDelay(t *testing.T) {
	ctx := context.Background()
	eachBackend(t, func(t *testing.T, s queue.Store) {
		enqueue(t, s, req("a", 0, t0, ""))
		claim(t, s, "w", t0, 0)
		errs := []queue.Error{{Code: queue.CodePredictError, Message: "model answered 503"}}
		if err := s.Retry(ctx, "a", "w", t0, t0.Add(2*time.Second), 1, errs); err != nil {
			t.Fatal(err)
		}
		if g := get(t, s, "a"); g.Status != queue.Queued || g.Attempts != 1 || len(g.Errors) != 1 {
			t.Fatalf("after retry %+v", g)
		}
		if n, _, _ := s.Depth(ctx, q); n != 1 {
			t.Fatalf("a delayed request counts as queued: %d", n)
		}
		if r, _ := claim(t, s, "w", t0.Add(1999*time.Millisecond), 0); r != nil {
			t.Fatal("claimed before its retry delay")
		}
		if r, _ := claim(t, s, "w", t0.Add(2*time.Second), 0); r == nil || r.Attempts != 1 {
			t.Fatalf("claim after the delay %+v", r)
		}
	})
}

func TestWebhookOutbox(t *testing.T) {
	ctx := context.Background()
	eachBackend(t, func(t *testing.T, s queue.Store) {
		enqueue(t, s, req("ok", 0, t0, "https://h.example.com"), req("bad", 0, t0.Add(time.Millisecond), "https://h.example.com"))
		claim(t, s, "w", t0, 0)
		claim(t, s, "w", t0, 0)
		for _, id := range []string{"ok", "bad"} {
			if err := s.Finish(ctx, id, "w", t0, queue.Outcome{Status: queue.Succeeded, Output: json.RawMessage(`{"y":1}`), Attempts: 1}); err != nil {
				t.Fatal(err)
			}
		}
		if g := get(t, s, "ok"); g.WebhookStatus != queue.HookPending || string(g.Output) != `{"y":1}` {
			t.Fatalf("pending %+v", g)
		}
		due, err := s.DueWebhooks(ctx, t0, 10*time.Second, 10)
		if err != nil || len(due) != 2 {
			t.Fatalf("due %d %v", len(due), err)
		}
		if again, _ := s.DueWebhooks(ctx, t0.Add(time.Second), 10*time.Second, 10); len(again) != 0 {
			t.Fatalf("held webhooks handed out again: %d", len(again))
		}
		if err := s.WebhookDone(ctx, "ok", t0.Add(time.Second), queue.Delivered, time.Time{}); err != nil {
			t.Fatal(err)
		}
		if err := s.WebhookDone(ctx, "bad", t0.Add(time.Second), queue.RetryLater, t0.Add(3*time.Second)); err != nil {
			t.Fatal(err)
		}
		if g := get(t, s, "ok"); g.Status != queue.Succeeded || g.WebhookStatus != queue.HookSucceeded || g.Output != nil {
			t.Fatalf("delivered %+v", g)
		}
		if due, _ := s.DueWebhooks(ctx, t0.Add(2*time.Second), 10*time.Second, 10); len(due) != 0 {
			t.Fatal("retry handed out early")
		}
		due, _ = s.DueWebhooks(ctx, t0.Add(3*time.Second), 10*time.Second, 10)
		if len(due) != 1 || due[0].ID != "bad" || due[0].WebhookAttempts != 1 || string(due[0].Output) != `{"y":1}` {
			t.Fatalf("retry due %+v", due)
		}
		// Retention never removes a result still owed to its webhook.
		if sw, _ := s.Sweep(ctx, t0.Add(48*time.Hour), time.Hour); sw.Removed != 1 {
			t.Fatalf("sweep removed %d, want only the delivered one", sw.Removed)
		}
		if err := s.WebhookDone(ctx, "bad", t0.Add(49*time.Hour), queue.GiveUp, time.Time{}); err != nil {
			t.Fatal(err)
		}
		if g := get(t, s, "bad"); g.Status != queue.WebhookFailed || g.WebhookStatus != queue.HookFailed || g.Output != nil {
			t.Fatalf("given up %+v", g)
		}
		if sw, _ := s.Sweep(ctx, t0.Add(50*time.Hour+time.Second), time.Hour); sw.Removed != 1 {
			t.Fatalf("sweep after give-up removed %d", sw.Removed)
		}
		if _, err := s.Get(ctx, "bad"); !errors.Is(err, queue.ErrNotFound) {
			t.Fatalf("removed request: %v", err)
		}
	})
}

// TestConcurrentClaimsTakeEachRequestOnce: several workers (replicas, for Redis) claim at once; each request is
// claimed exactly once.
func TestConcurrentClaimsTakeEachRequestOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, s queue.Store) {
		const n = 200
		for i := range n {
			enqueue(t, s, req(fmt.Sprintf("r%03d", i), i%3, t0.Add(time.Duration(i)*time.Millisecond), ""))
		}
		var mu sync.Mutex
		seen := map[string]int{}
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					r, _, err := s.Claim(context.Background(), q, fmt.Sprint("w", w), t0.Add(time.Second), time.Minute, 0)
					if err != nil {
						t.Error(err)
						return
					}
					if r == nil {
						return
					}
					mu.Lock()
					seen[r.ID]++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(seen) != n {
			t.Fatalf("claimed %d distinct requests, want %d", len(seen), n)
		}
		for id, c := range seen {
			if c != 1 {
				t.Fatalf("%s claimed %d times", id, c)
			}
		}
	})
}

// TestEnqueueClaimed: the bbolt fast path claims a request at once only when its queue is empty and a slot is
// free, so it never overtakes a waiting request.
func TestEnqueueClaimed(t *testing.T) {
	s := backends(t)["bolt"](t).(queue.Direct)
	st := s.(queue.Store)
	ctx := context.Background()
	ok, err := s.EnqueueClaimed(ctx, req("a", 0, t0, ""), "w", t0, time.Minute, 1)
	if err != nil || !ok {
		t.Fatalf("idle queue: %v %v", ok, err)
	}
	if g := get(t, st, "a"); g.Status != queue.InProgress || g.Owner != "w" {
		t.Fatalf("a %+v", g)
	}
	if ok, _ := s.EnqueueClaimed(ctx, req("b", 0, t0, ""), "w", t0, time.Minute, 1); ok {
		t.Fatal("claimed past the slot")
	}
	if ok, _ := s.EnqueueClaimed(ctx, req("c", 0, t0, ""), "w", t0, time.Minute, 5); ok {
		t.Fatal("claimed ahead of a waiting request")
	}
	if q, run, _ := st.Depth(ctx, q); q != 2 || run != 1 {
		t.Fatalf("depth %d %d", q, run)
	}
	// The lease of a fast-path claim is swept like any other.
	if sw, _ := st.Sweep(ctx, t0.Add(time.Minute), time.Hour); sw.Requeued != 1 {
		t.Fatalf("sweep %+v", sw)
	}
}

// An idle replica polls the store several times a second (claim, due webhooks, sweep): polls that find nothing
// write nothing, so they neither hold the file's writer lock through two fdatasyncs nor delay an accept.
func TestBoltIdlePollsWriteNothing(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "q.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	s, err := queue.NewBolt(db)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	writes := func() int64 { st := db.Stats(); return st.TxStats.GetWrite() }
	poll := func(now time.Time) {
		t.Helper()
		if r, _ := claim(t, s, "w", now, 5); r != nil {
			t.Fatalf("claimed %s", r.ID)
		}
		if due, err := s.DueWebhooks(ctx, now, time.Minute, 10); err != nil || len(due) > 0 {
			t.Fatalf("due webhooks %v %v", due, err)
		}
		if sw, err := s.Sweep(ctx, now, time.Hour); err != nil || sw != (queue.Swept{}) {
			t.Fatalf("sweep %+v %v", sw, err)
		}
	}
	before := writes()
	poll(t0)
	if w := writes(); w != before {
		t.Fatalf("polls of an empty store wrote %d pages", w-before)
	}

	// A request running under a slot: a claim at the limit writes nothing either.
	enqueue(t, s, req("a", 0, t0, ""), req("b", 0, t0, ""))
	if r, _ := claim(t, s, "w", t0, 1); r == nil || r.ID != "a" {
		t.Fatalf("claim %+v", r)
	}
	before = writes()
	if r, _ := claim(t, s, "w", t0, 1); r != nil {
		t.Fatalf("claimed %s past the slot", r.ID)
	}
	if w := writes(); w != before {
		t.Fatalf("a claim at the limit wrote %d pages", w-before)
	}
	// Work found is written: the claim of b, and the sweep of a's expired lease.
	if r, _ := claim(t, s, "w", t0, 2); r == nil || r.ID != "b" {
		t.Fatalf("claim %+v", r)
	}
	if sw, err := s.Sweep(ctx, t0.Add(time.Minute), time.Hour); err != nil || sw.Requeued != 2 {
		t.Fatalf("sweep %+v %v", sw, err)
	}
	if w := writes(); w == before {
		t.Fatal("the claim and the sweep wrote nothing")
	}
	if g := get(t, s, "a"); g.Status != queue.Queued {
		t.Fatalf("a %+v", g)
	}
}

// TestKeyCap: a key may have at most KeyCap requests QUEUED or IN_PROGRESS; past it Enqueue stores nothing and
// answers ErrKeyFull, and each way a request ends (cancel, finish, expiry) gives its place back. Other keys, and
// requests that name no key, are not counted against it.
func TestKeyCap(t *testing.T) {
	ctx := context.Background()
	eachBackend(t, func(t *testing.T, s queue.Store) {
		n := 0
		keyed := func(key string, created time.Time, mtq int64) *queue.Request {
			n++
			r := req(fmt.Sprintf("%s-%d", key, n), 0, created, "")
			r.Key, r.KeyCap, r.MaxTimeInQueueSeconds = "ns/"+key, 3, mtq
			return r
		}
		full := func(r *queue.Request) {
			t.Helper()
			if err := s.Enqueue(ctx, r); !errors.Is(err, queue.ErrKeyFull) {
				t.Fatalf("enqueue past the cap: %v, want ErrKeyFull", err)
			}
			if _, err := s.Get(ctx, r.ID); !errors.Is(err, queue.ErrNotFound) {
				t.Fatalf("a refused request was stored: %v", err)
			}
		}
		a, b, c := keyed("k", t0, 600), keyed("k", t0.Add(time.Millisecond), 600), keyed("k", t0.Add(2*time.Millisecond), 1)
		enqueue(t, s, a, b, c, keyed("other", t0, 600), req("nokey", 0, t0, ""))
		full(keyed("k", t0, 600))

		if _, ok, err := s.Cancel(ctx, b.ID, t0); err != nil || !ok {
			t.Fatal(ok, err)
		}
		enqueue(t, s, keyed("k", t0.Add(3*time.Millisecond), 600))
		full(keyed("k", t0, 600))

		// a runs, then finishes: a place comes back only once it ends.
		if r, _ := claim(t, s, "w", t0, 1); r == nil || r.ID != a.ID {
			t.Fatalf("claimed %+v, want %s", r, a.ID)
		}
		full(keyed("k", t0, 600))
		if err := s.Finish(ctx, a.ID, "w", t0, queue.Outcome{Status: queue.Succeeded, Attempts: 1}); err != nil {
			t.Fatal(err)
		}
		enqueue(t, s, keyed("k", t0.Add(4*time.Millisecond), 600))
		full(keyed("k", t0, 600))

		// c expires (max_time_in_queue 1 s) in the sweep.
		if _, err := s.Sweep(ctx, t0.Add(2*time.Second), time.Hour); err != nil {
			t.Fatal(err)
		}
		if r := get(t, s, c.ID); r.Status != queue.Expired {
			t.Fatalf("c is %s, want EXPIRED", r.Status)
		}
		enqueue(t, s, keyed("k", t0.Add(5*time.Millisecond), 600))
		full(keyed("k", t0, 600))
	})
}
