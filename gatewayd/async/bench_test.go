package async_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/modelgate/modelgate/gatewayd/async"
	"github.com/modelgate/modelgate/gatewayd/async/queue"
	"github.com/modelgate/modelgate/test/testutil"
)

// unbounded lifts the per-key rate and queue cap of async_predict for the benchmarks, which send as fast as one
// key can.
var unbounded = async.Config{PredictPerSecond: 1 << 30, MaxQueuedPerKey: 1 << 30}

// BenchmarkAsyncAccept measures accepted async_predict calls per second on one in-process gatewayd (real
// sockets), per store: the 201 means the request is durable. The deployment is not ready, so nothing is
// dispatched and only acceptance is measured.
func BenchmarkAsyncAccept(b *testing.B) {
	for _, backend := range []string{"bolt", "redis-standalone"} {
		b.Run(backend, func(b *testing.B) {
			// One key sends every call and nothing is dispatched: the per-key rate and cap would measure themselves.
			f := newFx(b, fxOpts{backend: backend, notReady: true, config: unbounded})
			body := []byte(`{"model_input": {"text": "benchmark input of a typical size, a sentence or two long"}, "priority": 1}`)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			url := f.url + "/models/sentiment/production/async_predict"
			start := time.Now()
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
					req.Header.Set("Authorization", "Api-Key "+f.keys["invoke"])
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					resp.Body.Close()
					if resp.StatusCode != http.StatusCreated {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "accepted/s")
		})
	}
}

// stamped records when each accepted request's durable write returned, for BenchmarkAsyncQueueOverhead.
type stamped struct {
	queue.Store
	at    chan time.Time
	write []time.Duration
}

func (s *stamped) Enqueue(ctx context.Context, r *queue.Request) error {
	start := time.Now()
	err := s.Store.Enqueue(ctx, r)
	s.done(start)
	return err
}

func (s *stamped) done(start time.Time) {
	now := time.Now()
	s.write = append(s.write, now.Sub(start))
	s.at <- now
}

// stampedDirect is stamped over a store that can enqueue and claim in one write (queue.Direct).
type stampedDirect struct{ *stamped }

func (s stampedDirect) EnqueueClaimed(ctx context.Context, r *queue.Request, owner string, now time.Time, lease time.Duration, maxInProgress int) (bool, error) {
	start := time.Now()
	claimed, err := s.Store.(queue.Direct).EnqueueClaimed(ctx, r, owner, now, lease, maxInProgress)
	s.done(start)
	return claimed, err
}

// BenchmarkAsyncQueueOverhead measures the queue's overhead with an idle model, the time from enqueue to
// dispatch: from the durable write's return to the model receiving the call (commit-p50-ms, commit-p99-ms; the
// target is at most 5 ms). It also reports the client's view, from sending async_predict to the model receiving
// the call (p50-ms, p99-ms: the accept's HTTP, checks and durable write come first), and the durable write alone
// (write-p50-ms, write-p99-ms). Requests are sent one at a time; each waits until the previous one's outcome is
// recorded, so the model and the queue are idle when it is sent. make bench writes these figures into
// docs/benchmarks.md.
func BenchmarkAsyncQueueOverhead(b *testing.B) {
	for _, backend := range []string{"bolt", "redis-standalone"} {
		b.Run(backend, func(b *testing.B) {
			arrived := make(chan time.Time, 1)
			st := &stamped{at: make(chan time.Time, 1)}
			// gatewayd's own dispatcher and sweeper periods, not the tests' short ones.
			c := unbounded
			c.Poll, c.SweepEvery = async.DefaultPoll, async.DefaultSweepEvery
			f := newFx(b, fxOpts{backend: backend, config: c,
				model: func(_ int, _ []byte, w http.ResponseWriter) {
					arrived <- time.Now()
					_, _ = w.Write([]byte(`{}`))
				},
				wrap: func(s queue.Store) queue.Store {
					st.Store = s
					if _, ok := s.(queue.Direct); ok {
						return stampedDirect{st}
					}
					return st
				}})
			body := []byte(`{"model_input": 1}`)
			url := f.url + "/models/sentiment/production/async_predict"
			sent, committed := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
				req.Header.Set("Authorization", "Api-Key "+f.keys["invoke"])
				start := time.Now()
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					b.Fatalf("status %d", resp.StatusCode)
				}
				at, done := <-arrived, <-st.at
				sent, committed = append(sent, at.Sub(start)), append(committed, at.Sub(done))
				b.StopTimer()
				// Idle before the next request: the run's outcome is recorded.
				f.waitMetric(float64(i+1), "modelgate_async_duration_seconds")
				b.StartTimer()
			}
			b.StopTimer()
			b.ReportMetric(testutil.Millis(testutil.Percentile(sent, 0.50)), "p50-ms")
			b.ReportMetric(testutil.Millis(testutil.Percentile(sent, 0.99)), "p99-ms")
			b.ReportMetric(testutil.Millis(testutil.Percentile(committed, 0.50)), "commit-p50-ms")
			b.ReportMetric(testutil.Millis(testutil.Percentile(committed, 0.99)), "commit-p99-ms")
			b.ReportMetric(testutil.Millis(testutil.Percentile(st.write, 0.50)), "write-p50-ms")
			b.ReportMetric(testutil.Millis(testutil.Percentile(st.write, 0.99)), "write-p99-ms")
		})
	}
}
