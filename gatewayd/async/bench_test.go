package async_test

import (
	"bytes"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"
)

// BenchmarkAsyncAccept measures accepted async_predict calls per second on one in-process gatewayd (real
// sockets), per store: the 201 means the request is durable. The deployment is not ready, so nothing is
// dispatched and only acceptance is measured.
func BenchmarkAsyncAccept(b *testing.B) {
	for _, backend := range []string{"bolt", "redis"} {
		b.Run(backend, func(b *testing.B) {
			f := newFx(b, fxOpts{backend: backend, notReady: true})
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

// BenchmarkAsyncQueueOverhead measures, with an idle model, the time from sending async_predict to the model
// receiving the call: acceptance, the durable write, the dispatcher's claim and the forward. p50 and p99 are
// reported; the target is at most 5 ms.
func BenchmarkAsyncQueueOverhead(b *testing.B) {
	for _, backend := range []string{"bolt", "redis"} {
		b.Run(backend, func(b *testing.B) {
			arrived := make(chan time.Time, 1)
			f := newFx(b, fxOpts{backend: backend, model: func(_ int, _ []byte, w http.ResponseWriter) {
				arrived <- time.Now()
				_, _ = w.Write([]byte(`{}`))
			}})
			body := []byte(`{"model_input": 1}`)
			url := f.url + "/models/sentiment/production/async_predict"
			var lat []time.Duration
			var mu sync.Mutex
			b.ResetTimer()
			for range b.N {
				req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
				req.Header.Set("Authorization", "Api-Key "+f.keys["invoke"])
				sent := time.Now()
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
				at := <-arrived
				mu.Lock()
				lat = append(lat, at.Sub(sent))
				mu.Unlock()
			}
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
