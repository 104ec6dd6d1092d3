package async_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/modelgate/modelgate/gatewayd/async"
	"github.com/modelgate/modelgate/gatewayd/async/queue"
)

// TestExpired: a request whose deployment never gets a ready address expires once max_time_in_queue_seconds
// passed on the (fake) clock, with a webhook that then delivers nothing (CANCELED).
func TestExpired(t *testing.T) {
	backends(t, func(t *testing.T, backend string) {
		clk := clocktesting.NewFakeClock(time.Date(2026, 3, 16, 10, 0, 0, 0, time.UTC))
		f := newFx(t, fxOpts{backend: backend, clock: clk, notReady: true, config: async.Config{AllowInternalWebhooks: true}})
		rc := newReceiver(t, func(int) bool { return false })
		id := f.enqueue(`{"model_input": 1, "max_time_in_queue_seconds": 10, "webhook_endpoint": "` + rc.srv.URL + `"}`)
		clk.Step(9 * time.Second)
		time.Sleep(100 * time.Millisecond) // several sweeps at 9 s: not yet
		if s := f.status(id); s.Status != queue.Queued || s.WebhookStatus != queue.HookPending {
			t.Fatalf("at 9 s: %+v", s)
		}
		clk.Step(time.Second)
		f.waitStored(id, func(r *queue.Request) bool { return r.Status == queue.Expired })
		s := f.status(id)
		if s.Status != queue.Expired || s.WebhookStatus != queue.HookCanceled || !s.StatusAt.Equal(s.CreatedAt.Add(10*time.Second)) {
			t.Fatalf("expired: %+v", s)
		}
		f.ready()
		time.Sleep(100 * time.Millisecond)
		if n := len(f.model.calls()); n != 0 {
			t.Fatalf("an expired request reached the model (%d calls)", n)
		}
		if a, _, _ := rc.snapshot(); a != 0 {
			t.Fatalf("an expired request delivered %d webhooks", a)
		}
		if n := f.waitMetric(1, "modelgate_async_requests_expired_total"); n != 1 {
			t.Fatalf("expired metric %v, want 1", n)
		}
	})
}

// TestCancel: DELETE cancels a QUEUED request, which then never runs; an IN_PROGRESS one answers canceled:
// false with a message and runs to its end.
func TestCancel(t *testing.T) {
	backends(t, func(t *testing.T, backend string) {
		release := make(chan struct{})
		f := newFx(t, fxOpts{backend: backend, model: func(n int, _ []byte, w http.ResponseWriter) {
			if n == 1 {
				<-release
			}
			_, _ = w.Write([]byte(`{}`))
		}})
		running := f.enqueue(`{"model_input": "first"}`)
		f.waitStored(running, func(r *queue.Request) bool { return r.Status == queue.InProgress })
		waiting := f.enqueue(`{"model_input": "second"}`)
		a := f.do(http.MethodDelete, "/models/sentiment/async_request/"+waiting, "Api-Key "+f.keys["invoke"], nil)
		got := a.json(t)
		if a.status != http.StatusOK || got["canceled"] != true || got["request_id"] != waiting || got["message"] == "" {
			t.Fatalf("cancel of a queued request: %d %s", a.status, a.body)
		}
		a = f.do(http.MethodDelete, "/models/sentiment/async_request/"+running, "Bearer "+f.keys["invoke2"], nil)
		got = a.json(t)
		if a.status != http.StatusOK || got["canceled"] != false || !strings.Contains(got["message"].(string), "IN_PROGRESS") {
			t.Fatalf("cancel of a running request: %d %s", a.status, a.body)
		}
		close(release)
		f.waitStored(running, terminal)
		time.Sleep(50 * time.Millisecond)
		if s := f.status(waiting); s.Status != queue.Canceled || s.WebhookStatus != queue.HookNone {
			t.Fatalf("canceled: %+v", s)
		}
		if s := f.status(running); s.Status != queue.Succeeded {
			t.Fatalf("running one: %+v", s)
		}
		if calls := f.model.calls(); len(calls) != 1 || calls[0] != `"first"` {
			t.Fatalf("model calls %q: the canceled request ran", calls)
		}
		if a := f.do(http.MethodDelete, "/models/sentiment/async_request/nope", "Bearer "+f.keys["invoke"], nil); a.status != http.StatusNotFound {
			t.Fatalf("unknown id: %d", a.status)
		}
		if n := f.waitMetric(1, "modelgate_async_requests_canceled_total"); n != 1 {
			t.Fatalf("canceled metric %v, want 1", n)
		}
	})
}

// TestWebhookFailed: a receiver that always fails gets exactly WebhookAttempts attempts, then the request is
// WEBHOOK_FAILED with webhook_status FAILED and its output dropped.
func TestWebhookFailed(t *testing.T) {
	backends(t, func(t *testing.T, backend string) {
		f := newFx(t, fxOpts{backend: backend, config: async.Config{AllowInternalWebhooks: true, WebhookAttempts: 3}})
		rc := newReceiver(t, func(int) bool { return true })
		id := f.enqueue(`{"model_input": 1, "webhook_endpoint": "` + rc.srv.URL + `"}`)
		r := f.waitStored(id, terminal)
		if r.Status != queue.WebhookFailed || r.WebhookStatus != queue.HookFailed || r.Output != nil {
			t.Fatalf("request %+v", r)
		}
		if s := f.status(id); s.Status != "WEBHOOK_FAILED" || s.WebhookStatus != "FAILED" {
			t.Fatalf("status %+v", s)
		}
		if n, _, bad := rc.snapshot(); n != 3 || bad != 0 {
			t.Fatalf("receiver saw %d attempts (%d bad signatures), want 3", n, bad)
		}
		if g, fl := f.waitMetric(1, "modelgate_async_webhook_deliveries_total", "outcome", "gave_up"), f.waitMetric(2, "modelgate_async_webhook_deliveries_total", "outcome", "failed"); g != 1 || fl != 2 {
			t.Fatalf("webhook metrics: gave_up %v, failed %v; want 1 and 2", g, fl)
		}
	})
}

// TestReceiverFailingFirstAttemptsGetsEveryResult: a receiver failing its first 3 attempts receives every
// result, each signed.
func TestReceiverFailingFirstAttemptsGetsEveryResult(t *testing.T) {
	backends(t, func(t *testing.T, backend string) {
		f := newFx(t, fxOpts{backend: backend, config: async.Config{AllowInternalWebhooks: true}})
		rc := newReceiver(t, func(n int) bool { return n <= 3 })
		var ids []string
		for i := range 5 {
			ids = append(ids, f.enqueue(fmt.Sprintf(`{"model_input": {"i": %d}, "webhook_endpoint": "%s"}`, i, rc.srv.URL)))
		}
		for _, id := range ids {
			if r := f.waitStored(id, terminal); r.Status != queue.Succeeded || r.WebhookStatus != queue.HookSucceeded {
				t.Fatalf("request %+v", r)
			}
		}
		n, got, bad := rc.snapshot()
		if len(got) != 5 || bad != 0 || n < 8 {
			t.Fatalf("received %d results in %d attempts, %d bad signatures", len(got), n, bad)
		}
		for i, id := range ids {
			if string(got[id].Data) != fmt.Sprintf(`{"echo":{"i":%d}}`, i) {
				t.Fatalf("result of %s: %s", id, got[id].Data)
			}
		}
	})
}

// TestPriorityOrder: with one slot, priorities 2, 0, 1 enqueued in that order run as 0, 1, 2.
func TestPriorityOrder(t *testing.T) {
	backends(t, func(t *testing.T, backend string) {
		f := newFx(t, fxOpts{backend: backend, notReady: true})
		for _, p := range []int{2, 0, 1} {
			f.enqueue(fmt.Sprintf(`{"model_input": "p%d", "priority": %d}`, p, p))
		}
		a := f.do(http.MethodGet, "/models/sentiment/production/async_queue_status", "Api-Key "+f.keys["invoke"], nil)
		if got := a.json(t); a.status != 200 || got["num_queued_requests"] != 3.0 || got["num_in_progress_requests"] != 0.0 ||
			got["model_id"] != "sentiment" || got["deployment_id"] != "v1" {
			t.Fatalf("queue status %d %s", a.status, a.body)
		}
		// The depth gauge, counted by the sweeper loop, shows the three.
		deadline := time.Now().Add(10 * time.Second)
		for f.metric("modelgate_async_queue_depth", "namespace", f.ns, "deployment", "v1", "state", "queued") != 3 {
			if time.Now().After(deadline) {
				t.Fatal("queue depth gauge never showed 3 queued requests")
			}
			time.Sleep(10 * time.Millisecond)
		}
		f.ready() // a url deployment: maxReplica 1 x concurrencyTarget 1 = one slot
		deadline = time.Now().Add(30 * time.Second)
		for len(f.model.calls()) < 3 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if got := strings.Join(f.model.calls(), " "); got != `"p0" "p1" "p2"` {
			t.Fatalf("ran in order %s", got)
		}

	})
}

// TestOneSlotRunsOneAtATime: concurrencyTarget 2 on a url deployment runs at most two requests at once.
func TestSlotsBoundConcurrency(t *testing.T) {
	var mu sync.Mutex
	running, peak := 0, 0
	f := newFx(t, fxOpts{notReady: true, model: func(_ int, _ []byte, w http.ResponseWriter) {
		mu.Lock()
		running++
		peak = max(peak, running)
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
		_, _ = w.Write([]byte(`{}`))
	}})
	var ids []string
	for range 8 {
		ids = append(ids, f.enqueue(`{"model_input": 1}`))
	}
	f.snap.Deployments[0].ConcurrencyTarget = 2
	f.ready()
	for _, id := range ids {
		f.waitStored(id, terminal)
	}
	if peak != 2 {
		t.Fatalf("peak concurrency %d, want 2", peak)
	}
}

// TestStatusRateLimit: the 21st status call of a key within one second answers 429 with Retry-After; another
// key is not affected. The clock stands still, so all calls fall in one second.
func TestStatusRateLimit(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 3, 16, 10, 0, 0, 0, time.UTC))
	f := newFx(t, fxOpts{clock: clk, notReady: true})
	id := f.enqueue(`{"model_input": 1}`)
	f.exhaust(http.MethodGet, "/models/sentiment/async_request/"+id, async.StatusCallsPerSecond)
	if a := f.do(http.MethodGet, "/models/sentiment/async_request/"+id, "Api-Key "+f.keys["invoke2"], nil); a.status != http.StatusOK {
		t.Fatalf("another key: %d", a.status)
	}
	// The window rolls (the limit engine's sliding window has fully moved on after two seconds).
	clk.Step(2 * time.Second)
	if a := f.do(http.MethodGet, "/models/sentiment/async_request/"+id, "Api-Key "+f.keys["invoke"], nil); a.status != http.StatusOK {
		t.Fatalf("two seconds later: %d", a.status)
	}
}

// TestStatusPollsDoNotBlockCancel: status and cancel are counted apart. A key that has used up its status budget
// still cancels, and the cancels have a budget of their own,
// whose use leaves status polls refused as before and no more. The clock stands still, so all calls fall in one
// second.
func TestStatusPollsDoNotBlockCancel(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 3, 16, 10, 0, 0, 0, time.UTC))
	f := newFx(t, fxOpts{clock: clk, notReady: true})
	id := f.enqueue(`{"model_input": 1}`)
	status := "/models/sentiment/async_request/" + id
	f.exhaust(http.MethodGet, status, async.StatusCallsPerSecond)
	a := f.do(http.MethodDelete, status, "Api-Key "+f.keys["invoke"], nil)
	if a.status != http.StatusOK || a.json(t)["canceled"] != true {
		t.Fatalf("cancel after a burst of status polls: %d %s, want 200 canceled", a.status, a.body)
	}
	// The cancel budget is its own, and limited too.
	f.exhaust(http.MethodDelete, status, async.CancelCallsPerSecond-1)
	if a := f.do(http.MethodGet, status, "Api-Key "+f.keys["invoke"], nil); a.status != http.StatusTooManyRequests {
		t.Fatalf("status after the cancels: %d %s, want 429 still", a.status, a.body)
	}
}

// exhaust makes n calls of method on path as the invoke key, each answered 200, and then one more, which must
// be the 429 rate_limited with Retry-After that names the method's budget.
func (f *fx) exhaust(method, path string, n int) {
	f.t.Helper()
	for i := range n {
		if a := f.do(method, path, "Api-Key "+f.keys["invoke"], nil); a.status != http.StatusOK {
			f.t.Fatalf("%s call %d: %d %s", method, i+1, a.status, a.body)
		}
	}
	a := f.do(method, path, "Api-Key "+f.keys["invoke"], nil)
	want := map[string]string{http.MethodGet: "status", http.MethodDelete: "cancel"}[method]
	if a.status != http.StatusTooManyRequests || a.header.Get("Retry-After") == "" || a.json(f.t)["error_code"] != "rate_limited" ||
		!strings.Contains(a.json(f.t)["error"].(string), want) {
		f.t.Fatalf("%s call %d: %d %s, want 429 naming the %s budget", method, n+1, a.status, a.body, want)
	}
}

// TestPredictRateLimit: past PredictPerSecond async_predict calls of a key within one second, the next answers
// 429 rate_limited with Retry-After in the error envelope, and stores nothing; another key is not affected. The
// clock stands still, so all calls fall in one second.
func TestPredictRateLimit(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 3, 16, 10, 0, 0, 0, time.UTC))
	f := newFx(t, fxOpts{clock: clk, notReady: true, config: async.Config{PredictPerSecond: 5}})
	for range 5 {
		f.enqueue(`{"model_input": 1}`)
	}
	a := f.do(http.MethodPost, "/models/sentiment/production/async_predict", "Api-Key "+f.keys["invoke"], []byte(`{"model_input": 1}`))
	if a.status != http.StatusTooManyRequests || a.header.Get("Retry-After") == "" || a.json(t)["error_code"] != "rate_limited" {
		t.Fatalf("6th call: %d %s", a.status, a.body)
	}
	if queued, _, err := f.store.Depth(context.Background(), queue.QueueOf(f.ns, "v1")); err != nil || queued != 5 {
		t.Fatalf("%d queued (%v), want 5: a refused call stored a request", queued, err)
	}
	if a := f.do(http.MethodPost, "/models/sentiment/production/async_predict", "Api-Key "+f.keys["invoke2"], []byte(`{"model_input": 1}`)); a.status != http.StatusCreated {
		t.Fatalf("another key: %d %s", a.status, a.body)
	}
	clk.Step(2 * time.Second)
	f.enqueue(`{"model_input": 1}`)
}

// TestQueueCapPerKey: a key may have at most MaxQueuedPerKey requests queued or in progress; the next answers
// 429 rate_limited with Retry-After and stores nothing, another key is not affected, and a request that ends
// (here canceled) frees a place. On bbolt and on Redis standalone, Sentinel and Cluster.
func TestQueueCapPerKey(t *testing.T) {
	for _, backend := range append([]string{"bolt"}, redisBackends()...) {
		t.Run(backend, func(t *testing.T) {
			f := newFx(t, fxOpts{backend: backend, notReady: true, config: async.Config{MaxQueuedPerKey: 3}})
			var ids []string
			for range 3 {
				ids = append(ids, f.enqueue(`{"model_input": 1}`))
			}
			a := f.do(http.MethodPost, "/models/sentiment/production/async_predict", "Api-Key "+f.keys["invoke"], []byte(`{"model_input": 1}`))
			if a.status != http.StatusTooManyRequests || a.header.Get("Retry-After") == "" || a.json(t)["error_code"] != "rate_limited" {
				t.Fatalf("4th request: %d %s", a.status, a.body)
			}
			if queued, _, err := f.store.Depth(context.Background(), queue.QueueOf(f.ns, "v1")); err != nil || queued != 3 {
				t.Fatalf("%d queued (%v), want 3", queued, err)
			}
			if a := f.do(http.MethodPost, "/models/sentiment/production/async_predict", "Api-Key "+f.keys["invoke2"], []byte(`{"model_input": 1}`)); a.status != http.StatusCreated {
				t.Fatalf("another key: %d %s", a.status, a.body)
			}
			if a := f.do(http.MethodDelete, "/models/sentiment/async_request/"+ids[0], "Api-Key "+f.keys["invoke"], nil); a.status != http.StatusOK {
				t.Fatalf("cancel: %d %s", a.status, a.body)
			}
			f.enqueue(`{"model_input": 1}`)
		})
	}
}

// TestRefusals: every refusal names the field and the rule.
func TestRefusals(t *testing.T) {
	f := newFx(t, fxOpts{notReady: true})
	invoke := "Api-Key " + f.keys["invoke"]
	for _, tc := range []struct {
		name, body string
		status     int
		field      string
	}{
		{"private webhook", `{"model_input": 1, "webhook_endpoint": "https://10.0.0.7/hook"}`, 400, "webhook_endpoint"},
		{"link-local webhook", `{"model_input": 1, "webhook_endpoint": "https://169.254.169.254/latest"}`, 400, "webhook_endpoint"},
		{"loopback webhook", `{"model_input": 1, "webhook_endpoint": "http://127.0.0.1:9/hook"}`, 400, "webhook_endpoint"},
		{"http webhook", `{"model_input": 1, "webhook_endpoint": "http://hooks.example.com/hook"}`, 400, "webhook_endpoint"},
		{"priority", `{"model_input": 1, "priority": 3}`, 400, "priority"},
		{"max time", `{"model_input": 1, "max_time_in_queue_seconds": 5}`, 400, "max_time_in_queue_seconds"},
		{"attempts", `{"model_input": 1, "inference_retry_config": {"max_attempts": 11}}`, 400, "inference_retry_config.max_attempts"},
		{"no input", `{"priority": 1}`, 400, "model_input"},
		{"too large", `{"model_input": "` + strings.Repeat("a", 256<<10) + `"}`, 413, "body"},
	} {
		a := f.do(http.MethodPost, "/models/sentiment/production/async_predict", invoke, []byte(tc.body))
		got := a.json(t)
		detail, _ := got["fields"].(map[string]any)
		if a.status != tc.status || detail["field"] != tc.field || detail["message"] == "" || !strings.Contains(got["error"].(string), tc.field) && tc.status == 400 {
			t.Errorf("%s: %d %s; want %d naming %s", tc.name, a.status, a.body, tc.status, tc.field)
		}
	}
	if a := f.do(http.MethodPost, "/models/sentiment/production/async_predict", "", []byte(`{"model_input":1}`)); a.status != 401 {
		t.Errorf("no key: %d", a.status)
	}
	if a := f.do(http.MethodPost, "/models/sentiment/production/async_predict", "Bearer "+f.keys["metrics"], []byte(`{"model_input":1}`)); a.status != 403 {
		t.Errorf("metrics key: %d %s", a.status, a.body)
	}
	if a := f.do(http.MethodPost, "/models/nope/production/async_predict", invoke, []byte(`{"model_input":1}`)); a.status != 404 {
		t.Errorf("unknown model: %d", a.status)
	}
	// The deployment route and the queue status of the four prefixes.
	if a := f.do(http.MethodPost, "/models/sentiment/deployment/v1/async_predict", invoke, []byte(`{"model_input":1}`)); a.status != 201 {
		t.Errorf("deployment route: %d %s", a.status, a.body)
	}
	if a := f.do(http.MethodGet, "/models/sentiment/deployment/v1/async_queue_status", invoke, nil); a.status != 200 || !bytes.Contains(a.body, []byte(`"num_queued_requests":1`)) {
		t.Errorf("queue status: %d %s", a.status, a.body)
	}
}

// TestWebhookNeedsTheWorkspaceSecret: without Workspace.spec.asyncWebhook a webhook_endpoint is refused.
func TestWebhookNeedsTheWorkspaceSecret(t *testing.T) {
	f := newFx(t, fxOpts{noWebhookSecret: true, notReady: true})
	a := f.do(http.MethodPost, "/models/sentiment/production/async_predict", "Api-Key "+f.keys["invoke"],
		[]byte(`{"model_input": 1, "webhook_endpoint": "https://hooks.example.com/x"}`))
	if d, _ := a.json(t)["fields"].(map[string]any); a.status != 400 || d["field"] != "webhook_endpoint" || !strings.Contains(a.json(t)["error"].(string), "asyncWebhook") {
		t.Fatalf("%d %s", a.status, a.body)
	}
}

// TestRetryAfterPausesTheQueue: a model's 429, with a plain-text body or a JSON one, pauses its deployment's
// queue for the Retry-After the model sent, longer than the default first pause of 1 s, and counts no attempt;
// the request runs once the (fake) clock has passed it.
func TestRetryAfterPausesTheQueue(t *testing.T) {
	for _, kind := range []string{"text", "json"} {
		t.Run(kind, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Date(2026, 3, 16, 10, 0, 0, 0, time.UTC))
			f := newFx(t, fxOpts{clock: clk, model: func(n int, _ []byte, w http.ResponseWriter) {
				if n > 1 {
					_, _ = w.Write([]byte(`{"ok":true}`))
					return
				}
				w.Header().Set("Retry-After", "5")
				if kind == "text" {
					http.Error(w, "busy", http.StatusTooManyRequests)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusTooManyRequests)
				_, _ = w.Write([]byte(`{"error":"busy"}`))
			}})
			id := f.enqueue(`{"model_input": 1}`)
			f.waitStored(id, func(r *queue.Request) bool { return r.Status == queue.Queued && len(r.Errors) == 1 })
			clk.Step(2 * time.Second)
			time.Sleep(100 * time.Millisecond) // many dispatch rounds at +2 s: still within the model's 5 s
			if n := len(f.model.calls()); n != 1 {
				t.Fatalf("the model was called %d times within its Retry-After, want 1", n)
			}
			clk.Step(3 * time.Second)
			if r := f.waitStored(id, terminal); r.Status != queue.Succeeded || r.Attempts != 1 {
				t.Fatalf("after the Retry-After: %+v, want SUCCEEDED on its first counted attempt", r)
			}
			if n := len(f.model.calls()); n != 2 {
				t.Fatalf("the model was called %d times, want 2", n)
			}
		})
	}
}
