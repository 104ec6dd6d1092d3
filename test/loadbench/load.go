package loadbench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelgate/modelgate/test/testutil"
	"github.com/modelgate/modelgate/test/upstream"
)

// Target is one thing the load generator drives: an OpenAI-compatible chat completions route.
type Target struct {
	// Name labels the target in the report.
	Name string
	// URL is the full chat completions URL.
	URL string
	// Auth is the Authorization header value.
	Auth string
	// Header holds further request headers (a peer's routing headers), or nil.
	Header http.Header
	// Model is the body's model field for plain and streamed calls.
	Model, StreamModel string
	// Charged, when set, returns the tokens the target has charged to its accounting so far, so a run can check
	// that the target billed exactly what the upstream reported.
	Charged func(ctx context.Context) (int64, error)
	// Billed, when set, returns the tokens of every billing event the target recorded, to check against all the
	// tokens it ever answered with (CheckBilling).
	Billed func(ctx context.Context) (int64, error)

	client   *http.Client
	answered atomic.Int64
}

// Expect is what the fake upstream reports for the harness's request, so every answer can be checked.
type Expect struct {
	PromptTokens, CompletionTokens int64
	// StreamChunks is the number of SSE data events of a streamed answer, [DONE] excluded.
	StreamChunks int
	// StreamDelay is the paced upstream's time between two content chunks.
	StreamDelay time.Duration
	// PlainContent is the JSON string (quotes included) of a plain answer's message content; empty skips the
	// check. Content chunk i of a stream carries "tok<i> ".
	PlainContent string
}

// Violations counts answers that break the harness's correctness rules. Any non-zero count fails the run.
type Violations struct {
	// Status counts answers other than 200 and 429, and transport errors.
	Status atomic.Int64
	// Throttled counts 429 answers: the limits are set never to trigger.
	Throttled atomic.Int64
	// Tokens counts answers whose usage differs from what the upstream reported.
	Tokens atomic.Int64
	// Chunks counts streams whose number of chunks differs from the upstream's.
	Chunks atomic.Int64
	// Body counts answers whose content differs from what the upstream wrote.
	Body atomic.Int64
	// Accounting counts runs after which the target's charged tokens differ from the tokens it answered with.
	Accounting atomic.Int64

	mu       sync.Mutex
	examples []string
}

// Total is the sum of every count.
func (v *Violations) Total() int64 {
	return v.Status.Load() + v.Throttled.Load() + v.Tokens.Load() + v.Chunks.Load() + v.Body.Load() + v.Accounting.Load()
}

// Examples returns up to ten descriptions of violations, oldest first.
func (v *Violations) Examples() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.examples)
}

func (v *Violations) note(c *atomic.Int64, format string, args ...any) {
	c.Add(1)
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.examples) < 10 {
		v.examples = append(v.examples, fmt.Sprintf(format, args...))
	}
}

// String summarises the counts.
func (v *Violations) String() string {
	return fmt.Sprintf("status=%d throttled=%d tokens=%d chunks=%d body=%d accounting=%d",
		v.Status.Load(), v.Throttled.Load(), v.Tokens.Load(), v.Chunks.Load(), v.Body.Load(), v.Accounting.Load())
}

// Result is one run of one target.
type Result struct {
	Requests  int
	Elapsed   time.Duration
	Latencies []time.Duration
	// Tokens is the sum of the total tokens the target answered with.
	Tokens int64
	// Streaming only: time to first chunk per stream, gaps between consecutive chunks, chunks per stream.
	TTFT   []time.Duration
	Gaps   []time.Duration
	Chunks []int
	// GapGrowth is, per pair of consecutive chunks, the gap at the client minus the gap at which the upstream
	// wrote them (from the upstream's stamps): what the path added to a gap, without the upstream's own jitter.
	GapGrowth []time.Duration
	// MidGrowth and EndGrowth split GapGrowth: the gaps into the content chunks before the last, and the gap into
	// each stream's last content chunk, which the upstream follows at once with the finish and usage chunks and
	// [DONE].
	MidGrowth, EndGrowth []time.Duration
	// CPU is the CPU time the whole harness process used during the run: load generator, target and upstream.
	// Per request, and compared between targets of one round, it is the target's own cost, and it swings far
	// less than wall time with the load of a shared machine.
	CPU time.Duration
}

// CPUPerRequest is the harness process's CPU time per request of the run.
func (r Result) CPUPerRequest() time.Duration {
	if r.Requests == 0 {
		return 0
	}
	return r.CPU / time.Duration(r.Requests)
}

// Throughput is requests per second.
func (r Result) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}

// prompt has five words, so the fake upstream reports five prompt tokens.
const prompt = "measure the gateway hot path"

func (t *Target) body(stream bool) []byte {
	if stream {
		return []byte(`{"model":"` + t.StreamModel + `","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"` + prompt + `"}]}`)
	}
	return []byte(`{"model":"` + t.Model + `","messages":[{"role":"user","content":"` + prompt + `"}]}`)
}

// httpClient is a keep-alive client sized for concurrency, built once per target so connections stay warm
// across rounds.
func (t *Target) httpClient() *http.Client {
	if t.client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = 256
		tr.MaxIdleConnsPerHost = 256
		t.client = &http.Client{Transport: tr, Timeout: time.Minute}
	}
	return t.client
}

// Drive drives t with concurrency workers for d (or until ctx ends), each sending one request after the other
// on a kept-alive connection, and checks every answer against want.
//
// Streaming workers start want.StreamDelay/concurrency apart. Started together, they stay in step (every stream
// lasts the same), so every chunk of every stream, and every stream's end with the next one's start, would reach
// the path in one burst per StreamDelay, which independent clients do not send; the burst's queueing, not the
// path, then set the gaps' tail for every target alike.
func Drive(ctx context.Context, t *Target, concurrency int, d time.Duration, stream bool, want Expect, v *Violations) Result {
	body := t.body(stream)
	before := t.charged(ctx, v)
	deadline := time.Now().Add(d)
	parts := make([]Result, concurrency)
	var wg sync.WaitGroup
	cpu := testutil.ProcessCPU()
	start := time.Now()
	for w := range concurrency {
		wg.Go(func() {
			r := &parts[w]
			if stream {
				select {
				case <-time.After(time.Duration(w) * want.StreamDelay / time.Duration(concurrency)):
				case <-ctx.Done():
				}
			}
			for ctx.Err() == nil && time.Now().Before(deadline) {
				if stream {
					t.stream(ctx, body, want, v, r)
				} else {
					t.plain(ctx, body, want, v, r)
				}
			}
		})
	}
	wg.Wait()
	out := Result{Elapsed: time.Since(start), CPU: testutil.ProcessCPU() - cpu}
	for _, p := range parts {
		out.Requests += p.Requests
		out.Tokens += p.Tokens
		out.Latencies = append(out.Latencies, p.Latencies...)
		out.TTFT = append(out.TTFT, p.TTFT...)
		out.Gaps = append(out.Gaps, p.Gaps...)
		out.GapGrowth = append(out.GapGrowth, p.GapGrowth...)
		out.MidGrowth = append(out.MidGrowth, p.MidGrowth...)
		out.EndGrowth = append(out.EndGrowth, p.EndGrowth...)
		out.Chunks = append(out.Chunks, p.Chunks...)
	}
	t.answered.Add(out.Tokens)
	t.checkAccounting(ctx, before, out.Tokens, v)
	return out
}

// CheckBilling compares the tokens of the target's billing events with every token it answered with, once its
// recorder has flushed.
func (t *Target) CheckBilling(ctx context.Context, v *Violations) {
	if t.Billed == nil {
		return
	}
	want := t.answered.Load()
	var got int64
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := t.Billed(ctx)
		if err != nil {
			v.note(&v.Accounting, "%s: failed to read billing events: %v", t.Name, err)
			return
		}
		if got = n; got == want || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got != want {
		v.note(&v.Accounting, "%s: billing events carry %d tokens, the answers %d", t.Name, got, want)
	}
}

func (t *Target) charged(ctx context.Context, v *Violations) int64 {
	if t.Charged == nil {
		return 0
	}
	n, err := t.Charged(ctx)
	if err != nil {
		v.note(&v.Accounting, "%s: failed to read charged tokens: %v", t.Name, err)
	}
	return n
}

// checkAccounting waits briefly for the target to settle the last answers (settling follows the response), then
// compares what it charged during the run with what it answered.
func (t *Target) checkAccounting(ctx context.Context, before, answered int64, v *Violations) {
	if t.Charged == nil {
		return
	}
	var got int64
	for range 100 {
		n, err := t.Charged(ctx)
		if err != nil {
			v.note(&v.Accounting, "%s: failed to read charged tokens: %v", t.Name, err)
			return
		}
		if got = n - before; got == answered {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	v.note(&v.Accounting, "%s: charged %d tokens during the run, answered %d", t.Name, got, answered)
}

func (t *Target) send(ctx context.Context, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", t.Auth)
	for k, vs := range t.Header {
		req.Header[k] = vs
	}
	return t.httpClient().Do(req)
}

// status records a non-200 answer; it returns false when the answer is not usable.
func (t *Target) status(ctx context.Context, resp *http.Response, err error, v *Violations) bool {
	if err != nil {
		if ctx.Err() == nil {
			v.note(&v.Status, "%s: %v", t.Name, err)
		}
		return false
	}
	if resp.StatusCode == http.StatusOK {
		return true
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests {
		v.note(&v.Throttled, "%s: 429 %s", t.Name, msg)
	} else {
		v.note(&v.Status, "%s: %d %s", t.Name, resp.StatusCode, msg)
	}
	return false
}

func (t *Target) plain(ctx context.Context, body []byte, want Expect, v *Violations, r *Result) {
	start := time.Now()
	resp, err := t.send(ctx, body)
	if !t.status(ctx, resp, err, v) {
		return
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		if ctx.Err() == nil {
			v.note(&v.Status, "%s: failed to read the answer: %v", t.Name, err)
		}
		return
	}
	r.Latencies = append(r.Latencies, time.Since(start))
	r.Requests++
	total := checkUsage(t.Name, b, want, v)
	r.Tokens += total
	if want.PlainContent != "" && !bytes.Contains(b, []byte(want.PlainContent)) {
		v.note(&v.Body, "%s: answer does not carry the upstream's content %s: %.200s", t.Name, want.PlainContent, b)
	}
}

func (t *Target) stream(ctx context.Context, body []byte, want Expect, v *Violations, r *Result) {
	start := time.Now()
	resp, err := t.send(ctx, body)
	if !t.status(ctx, resp, err, v) {
		return
	}
	defer resp.Body.Close()
	br := bufio.NewReaderSize(resp.Body, 16<<10)
	var (
		chunks int
		last   time.Time
		total  int64
		usage  bool
		gaps   []time.Duration
		growth []time.Duration
		// mid and end split growth: see Result.MidGrowth.
		mid, end []time.Duration
		ttft     time.Duration
		// sent and lastSent are the upstream's stamps of this chunk and the one before (0: none).
		sent, lastSent int64
	)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if ctx.Err() == nil {
				v.note(&v.Status, "%s: stream ended without [DONE]: %v", t.Name, err)
			}
			return
		}
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		if bytes.HasPrefix(data, []byte("[DONE]")) {
			break
		}
		now := time.Now()
		sent = stamp(data)
		if chunks == 0 {
			ttft = now.Sub(start)
		} else {
			gaps = append(gaps, now.Sub(last))
			if sent != 0 && lastSent != 0 {
				g := now.Sub(last) - time.Duration(sent-lastSent)
				growth = append(growth, g)
				// The content chunks are all but the finish and usage chunks.
				switch lastContent := want.StreamChunks - 3; {
				case chunks < lastContent:
					mid = append(mid, g)
				case chunks == lastContent:
					end = append(end, g)
				}
			}
		}
		last, lastSent = now, sent
		if chunks < want.StreamChunks-2 && !bytes.Contains(data, []byte(`"tok`+strconv.Itoa(chunks)+` "`)) {
			v.note(&v.Body, "%s: content chunk %d does not carry the upstream's text \"tok%d \": %.200s", t.Name, chunks, chunks, data)
		}
		chunks++
		if bytes.Contains(data, []byte(`"total_tokens"`)) {
			usage = true
			total = checkUsage(t.Name, data, want, v)
		}
	}
	if !usage {
		v.note(&v.Tokens, "%s: stream carried no usage chunk", t.Name)
	}
	if chunks != want.StreamChunks {
		v.note(&v.Chunks, "%s: stream had %d chunks, the upstream sent %d", t.Name, chunks, want.StreamChunks)
	}
	r.Requests++
	r.Tokens += total
	r.Latencies = append(r.Latencies, time.Since(start))
	r.TTFT = append(r.TTFT, ttft)
	r.Gaps = append(r.Gaps, gaps...)
	r.GapGrowth = append(r.GapGrowth, growth...)
	r.MidGrowth = append(r.MidGrowth, mid...)
	r.EndGrowth = append(r.EndGrowth, end...)
	r.Chunks = append(r.Chunks, chunks)
}

// checkUsage compares the usage object of an answer with what the upstream reported and returns its total.
// It scans rather than decodes, so the load generator spends its time on the targets, not on JSON.
func checkUsage(name string, b []byte, want Expect, v *Violations) int64 {
	p, ok1 := intField(b, "prompt_tokens")
	c, ok2 := intField(b, "completion_tokens")
	total, ok3 := intField(b, "total_tokens")
	if !ok1 || !ok2 || !ok3 {
		v.note(&v.Tokens, "%s: answer has no usage: %.200s", name, b)
		return total
	}
	if p != want.PromptTokens || c != want.CompletionTokens || total != want.PromptTokens+want.CompletionTokens {
		v.note(&v.Tokens, "%s: usage prompt=%d completion=%d total=%d, upstream reported %d+%d", name, p, c, total,
			want.PromptTokens, want.CompletionTokens)
	}
	return total
}

// intField finds "name": <integer> in JSON bytes.
func intField(b []byte, name string) (int64, bool) {
	i := bytes.Index(b, []byte(`"`+name+`"`))
	if i < 0 {
		return 0, false
	}
	rest := bytes.TrimLeft(b[i+len(name)+2:], " \t")
	rest, ok := bytes.CutPrefix(rest, []byte(":"))
	if !ok {
		return 0, false
	}
	rest = bytes.TrimLeft(rest, " \t")
	end := 0
	for end < len(rest) && (rest[end] == '-' || rest[end] >= '0' && rest[end] <= '9') {
		end++
	}
	n, err := strconv.ParseInt(string(rest[:end]), 10, 64)
	return n, err == nil
}

var stampKey = []byte(`"` + upstream.StampField + `":`)

// stamp is the upstream's send time of a chunk (see upstream.Options.StampChunks), 0 when it has none.
func stamp(data []byte) int64 {
	i := bytes.Index(data, stampKey)
	if i < 0 {
		return 0
	}
	rest := data[i+len(stampKey):]
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	n, err := strconv.ParseInt(string(rest[:end]), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// median of float64s.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
