package loadbench

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/modelgate/modelgate/gatewayd/billing"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/gatewayd/state/redistest"
	"github.com/modelgate/modelgate/test/testutil"
	"github.com/modelgate/modelgate/test/upstream"
)

func TestMain(m *testing.M) {
	// The scale measurement re-executes this binary as its child gatewayd.
	ChildMain()
	os.Exit(m.Run())
}

// TestQuickRunEndToEnd runs every phase of the harness with small counts against a real stack and checks that
// it measured each figure without a correctness violation, and that it rewrites only its section of the docs.
func TestQuickRunEndToEnd(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: the harness needs envtest binaries (make envtest)")
	}
	cfg := QuickConfig()
	cfg.Log = testr.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	var out bytes.Buffer
	rep.Print(&out)
	t.Log("\n" + out.String())
	if rep.Failed() {
		t.Fatalf("correct targets produced violations or phase errors: %s: %v %v", rep.Violations.String(), rep.Violations.Examples(), rep.Errors)
	}
	for _, figure := range []string{
		"added latency p50, concurrency 1", "added latency p99, concurrency 1", "throughput gatewayd ÷ bare proxy",
		"added time to first token", "added p99 gap between chunks", "chunks per stream equal", "limiter check",
		"resident memory of gatewayd", "propagation of a limit change p50", "propagation of a limit change p99",
		"correctness violations", "added latency p50, concurrency 1 (/production/predict", "added latency p99, concurrency 1 (/production/predict",
		"throughput /production/predict ÷ bare proxy", "throughput tracing on at 1% ÷ tracing off",
	} {
		row, ok := rep.Row(figure)
		if !ok {
			t.Errorf("the report has no row %q", figure)
			continue
		}
		if row.Verdict == NotRun || row.Value == "" {
			t.Errorf("row %q was not measured: %q", figure, row.Value)
		}
	}
	if row, _ := rep.Row("chunks per stream equal"); row.Verdict != Pass {
		t.Errorf("streams through gatewayd lost or gained chunks: %s", row.Value)
	}
	// Redis rows are measured exactly when redis-server was there.
	row, _ := rep.Row("throughput gatewayd+Redis")
	if ran := rep.RedisNotRun == ""; ran != (row.Verdict != NotRun) {
		t.Errorf("Redis row is %q (%s) although RedisNotRun is %q", row.Verdict, row.Value, rep.RedisNotRun)
	}

	doc := filepath.Join(t.TempDir(), "benchmarks.md")
	before := "# Benchmarks\n\nIntro.\n\n" + StartMarker + "\nold figures\n" + EndMarker + "\n\n## Other section\n"
	if err := os.WriteFile(doc, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	rep.Command = "go test ./test/loadbench/"
	if err := rep.WriteDocs(doc); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(doc)
	s := string(after)
	if strings.Contains(s, "old figures") || !strings.Contains(s, "| figure | value | target | pass/fail |") {
		t.Errorf("the results section was not rewritten:\n%s", s)
	}
	if !strings.HasPrefix(s, "# Benchmarks\n\nIntro.\n\n"+StartMarker) || !strings.HasSuffix(s, EndMarker+"\n\n## Other section\n") {
		t.Errorf("text outside the markers changed:\n%s", s)
	}
	for _, want := range []string{"Machine: ", "Commit: `", "go test ./test/loadbench/", "nproc"} {
		if !strings.Contains(s, want) {
			t.Errorf("the results section lacks %q", want)
		}
	}
}

// TestViolationsCaught drives broken targets and checks that each kind of wrong answer is counted, so a fast
// but wrong gateway cannot post a good figure, while a correct target yields none.
func TestViolationsCaught(t *testing.T) {
	cfg := QuickConfig()
	plain := upstream.New(upstream.Options{CompletionTokens: completionTokens})
	defer plain.Close()
	paced := upstream.New(upstream.Options{CompletionTokens: completionTokens, StreamDeltas: cfg.StreamDeltas})
	defer paced.Close()
	want := expect(cfg)
	ctx := context.Background()
	const d = 50 * time.Millisecond

	serve := func(h http.Handler) string {
		s := httptest.NewServer(h)
		t.Cleanup(s.Close)
		return s.URL + "/v1/chat/completions"
	}
	rewriting := func(to, old, repl string) http.Handler {
		u, _ := url.Parse(to)
		p := httputil.NewSingleHostReverseProxy(u)
		p.ModifyResponse = func(resp *http.Response) error {
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			b = bytes.ReplaceAll(b, []byte(old), []byte(repl))
			resp.Body = io.NopCloser(bytes.NewReader(b))
			resp.ContentLength = int64(len(b))
			resp.Header.Del("Content-Length")
			return nil
		}
		return p
	}
	// dropping forwards a stream but leaves out its second content chunk.
	dropping := streamingProxy(paced, func(w http.ResponseWriter, sc *bufio.Scanner) {
		for sc.Scan() {
			if strings.Contains(sc.Text(), `"tok1 "`) {
				sc.Scan() // and the blank line after it
				continue
			}
			_, _ = w.Write(append(sc.Bytes(), '\n'))
		}
	})

	cases := []struct {
		name   string
		target *Target
		stream bool
		count  func(v *Violations) int64
	}{
		{"wrong completion tokens", &Target{URL: serve(rewriting(plain.URL, `"completion_tokens":16`, `"completion_tokens":15`))},
			false, func(v *Violations) int64 { return v.Tokens.Load() }},
		{"wrong total in a stream", &Target{URL: serve(rewriting(paced.URL, `"total_tokens":21`, `"total_tokens":20`))},
			true, func(v *Violations) int64 { return v.Tokens.Load() }},
		{"429", &Target{URL: serve(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, `{"error":"Rate limit exceeded."}`, http.StatusTooManyRequests)
		}))}, false, func(v *Violations) int64 { return v.Throttled.Load() }},
		{"502", &Target{URL: serve(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "bad gateway", http.StatusBadGateway)
		}))}, false, func(v *Violations) int64 { return v.Status.Load() }},
		{"dropped chunk", &Target{URL: serve(dropping)}, true, func(v *Violations) int64 { return v.Chunks.Load() }},
		{"charged less than answered", &Target{URL: plain.BaseURL() + "/chat/completions",
			Charged: func(context.Context) (int64, error) { return 0, nil }},
			false, func(v *Violations) int64 { return v.Accounting.Load() }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.target.Name, tc.target.Auth, tc.target.Model, tc.target.StreamModel = tc.name, "Bearer x", "echo", "echo"
			rep := &Report{}
			Drive(ctx, tc.target, 2, d, tc.stream, want, &rep.Violations)
			if tc.count(&rep.Violations) == 0 {
				t.Fatalf("not caught: %s", rep.Violations.String())
			}
			if !rep.Failed() {
				t.Error("a report with violations does not fail the run")
			}
		})
	}

	t.Run("correct targets", func(t *testing.T) {
		v := &Violations{}
		direct := &Target{Name: "direct", URL: plain.BaseURL() + "/chat/completions", Auth: "Bearer x", Model: "echo"}
		res := Drive(ctx, direct, 2, d, false, want, v)
		if res.Requests == 0 {
			t.Fatal("no request completed")
		}
		// A target that charged exactly what it answered is not flagged.
		direct.Charged = func(context.Context) (int64, error) { return res.Tokens, nil }
		direct.checkAccounting(ctx, 0, res.Tokens, v)
		stream := &Target{Name: "direct", URL: paced.BaseURL() + "/chat/completions", Auth: "Bearer x", StreamModel: "echo"}
		if sr := Drive(ctx, stream, 2, d, true, want, v); sr.Requests == 0 || len(sr.Chunks) == 0 {
			t.Fatal("no stream completed")
		}
		if v.Total() != 0 {
			t.Fatalf("correct targets were flagged: %s %v", v.String(), v.Examples())
		}
	})
}

// TestBareProxyKeepsEveryStream streams thousands of answers through the harness's bare proxy: none may be cut.
// The stock httputil.ReverseProxy cut about 1 stream in 1,000 (see startProxy), which failed whole runs.
func TestBareProxyKeepsEveryStream(t *testing.T) {
	cfg := QuickConfig()
	cfg.Log = testr.New(t)
	cfg.StreamDelay = time.Millisecond // a cut shows only while the answer is still coming
	u, err := startUpstreams(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer u.close()
	proxy := &Target{Name: "bare proxy", URL: u.pacedProxy + "/v1/chat/completions", Auth: "Bearer x", StreamModel: "echo"}
	v := &Violations{}
	res := Drive(context.Background(), proxy, 16, 3*time.Second, true, expect(cfg), v)
	t.Logf("%d streams", res.Requests)
	// About 3,400 on an idle 2-core machine; fewer on a busy one, which only makes a cut less likely to show.
	if res.Requests < 300 {
		t.Errorf("only %d streams in 3s: too few to catch a cut", res.Requests)
	}
	if v.Total() != 0 {
		t.Fatalf("%d of %d streams were wrong: %s %v", v.Total(), int64(res.Requests)+v.Total(), v.String(), v.Examples())
	}
}

// TestGapGrowthCatchesBatching: a proxy that passes chunks on two at a time grows every other gap by the
// upstream's pacing, and the gap figure shows it; direct calls yield growth samples for every gap.
func TestGapGrowthCatchesBatching(t *testing.T) {
	const delay = 5 * time.Millisecond
	cfg := QuickConfig()
	paced := upstream.New(upstream.Options{CompletionTokens: completionTokens, StreamDeltas: cfg.StreamDeltas, StreamDelay: delay, StampChunks: true})
	defer paced.Close()
	batching := httptest.NewServer(streamingProxy(paced, func(w http.ResponseWriter, sc *bufio.Scanner) {
		events := 0
		for sc.Scan() {
			_, _ = w.Write(append(sc.Bytes(), '\n'))
			if len(sc.Bytes()) == 0 {
				if events++; events%2 == 0 {
					w.(http.Flusher).Flush()
				}
			}
		}
	}))
	defer batching.Close()
	want := expect(cfg)
	v := &Violations{}
	drive := func(url string) Result {
		target := &Target{Name: url, URL: url + "/v1/chat/completions", Auth: "Bearer x", StreamModel: "echo"}
		return Drive(context.Background(), target, 2, 300*time.Millisecond, true, want, v)
	}
	direct, batched := drive(paced.URL), drive(batching.URL)
	if v.Total() != 0 {
		t.Fatalf("violations: %s %v", v.String(), v.Examples())
	}
	if gaps := direct.Requests * (want.StreamChunks - 1); len(direct.GapGrowth) != gaps {
		t.Errorf("direct: %d growth samples for %d gaps", len(direct.GapGrowth), gaps)
	}
	if g := testutil.Percentile(batched.GapGrowth, .99); g < delay/2 {
		t.Errorf("p99 gap growth through the batching proxy is %v, want at least %v", g, delay/2)
	}
	// The split: every stream has one gap into its last content chunk, and StreamChunks-4 before it (the first
	// chunk has no gap; the finish and usage chunks are neither).
	if n := len(direct.EndGrowth); n != direct.Requests {
		t.Errorf("direct: %d growth samples into a last content chunk for %d streams", n, direct.Requests)
	}
	if gaps := direct.Requests * (want.StreamChunks - 4); len(direct.MidGrowth) != gaps {
		t.Errorf("direct: %d mid-stream growth samples for %d gaps", len(direct.MidGrowth), gaps)
	}
	if g := testutil.Percentile(batched.MidGrowth, .99); g < delay/2 {
		t.Errorf("mid-stream p99 gap growth through the batching proxy is %v, want at least %v", g, delay/2)
	}
}

// TestStreamWorkersStartSpread: streaming workers start StreamDelay ÷ concurrency apart, so their chunks do not
// reach the target in one burst per StreamDelay. Without the spread, the four first requests arrive within the
// few milliseconds their dials take.
func TestStreamWorkersStartSpread(t *testing.T) {
	const workers, delay = 4, 40 * time.Millisecond
	cfg := QuickConfig()
	cfg.StreamDelay = delay
	paced := upstream.New(upstream.Options{CompletionTokens: completionTokens, StreamDeltas: cfg.StreamDeltas, StreamDelay: delay})
	defer paced.Close()
	var mu sync.Mutex
	var arrivals []time.Time
	relay := streamingProxy(paced, func(w http.ResponseWriter, sc *bufio.Scanner) {
		for sc.Scan() {
			_, _ = w.Write(append(sc.Bytes(), '\n'))
			w.(http.Flusher).Flush()
		}
	})
	recording := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
		relay.ServeHTTP(w, r)
	}))
	defer recording.Close()
	v := &Violations{}
	target := &Target{Name: "recording", URL: recording.URL + "/v1/chat/completions", Auth: "Bearer x", StreamModel: "echo"}
	// Long enough for the last worker to start (30 ms), short of a second stream (8 chunks 40 ms apart).
	Drive(context.Background(), target, workers, 60*time.Millisecond, true, expect(cfg), v)
	if v.Total() != 0 {
		t.Fatalf("violations: %s %v", v.String(), v.Examples())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(arrivals) != workers {
		t.Fatalf("%d requests arrived, want one per worker (%d)", len(arrivals), workers)
	}
	// The starts are 0, 10, 20 and 30 ms; allow half of that for dials that differ.
	if spread, want := arrivals[workers-1].Sub(arrivals[0]), (workers-1)*delay/workers/2; spread < want {
		t.Errorf("the first requests of %d streaming workers arrived within %v, want at least %v apart", workers, spread, want)
	}
}

// streamingProxy posts each request to up's chat completions and lets relay pass the answer's lines on.
func streamingProxy(up *upstream.Server, relay func(w http.ResponseWriter, lines *bufio.Scanner)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := http.Post(up.BaseURL()+"/chat/completions", "application/json", r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", "text/event-stream")
		relay(w, bufio.NewScanner(resp.Body))
	})
}

// TestOpenRedisCluster: the Redis Cluster phase's store, a 6-node cluster started through redistest outside a
// test, takes a charge and an event; the harness's close stops every node it started.
func TestOpenRedisCluster(t *testing.T) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Skip("SKIPPING: redis-cli is not installed; the Redis Cluster phase did NOT run")
	}
	ctx := context.Background()
	st, err := openRedisCluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	p := &limits.Plan{Limits: []limits.Limit{{Key: limits.BucketKey{Namespace: "ns", Group: "g", Slug: "s", Type: limits.Request, Unit: limits.Day}, Threshold: 10}}}
	if err := st.limits.Bind(p); err != nil {
		t.Fatal(err)
	}
	if res, err := st.limits.Admit(ctx, p, time.Now()); err != nil || !res.Allowed {
		t.Fatalf("admit on the cluster: %+v, %v", res, err)
	}
	if err := st.billing.Append(ctx, []billing.Record{{Namespace: "ns", Event: billing.Event{IdempotencyKey: "evt_1", Timestamp: time.Now()}}}); err != nil {
		t.Fatal(err)
	}

	h := &harness{}
	var d *redistest.Deployment
	if err := h.run(func() { d = redistest.StartDeployment(h, redistest.Standalone) }); err != nil {
		t.Fatal(err)
	}
	h.close()
	if c, err := net.Dial("tcp", d.Addrs[0]); err == nil {
		c.Close()
		t.Errorf("redis-server on %s still answers after the harness closed", d.Addrs[0])
	}
	if err := h.run(func() { h.Fatalf("stopped: %d", 1) }); err == nil || err.Error() != "stopped: 1" {
		t.Errorf("Fatalf in run answered %v, want its message", err)
	}
}
