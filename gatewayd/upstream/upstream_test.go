package upstream

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/gatewayd/tryplan"
)

// TestForwardWithoutClient forwards into a plain buffer, as a queue worker with no client connection does, over
// real sockets, and reads each failure back as a typed error with nothing written to the sink.
func TestForwardWithoutClient(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The server notices a client that left only once it has read the request body.
		_, _ = io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/hang":
			<-r.Context().Done()
		case "/redirect":
			http.Redirect(w, r, "/ok", http.StatusTemporaryRedirect)
		case "/text-404":
			http.Error(w, "404 page not found", http.StatusNotFound)
		case "/text-429":
			w.Header().Set("Retry-After", "7")
			http.Error(w, "slow down", http.StatusTooManyRequests)
		case "/json-429":
			w.Header().Set("Retry-After", "3")
			w.Header().Set("Retry-After-Ms", "2500")
			w.Header().Set("X-Internal", "not for the client")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"error":{"message":"rate limited"}}`))
		case "/json-400":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":{"message":"bad"}}`))
		default:
			if r.Header.Get("Content-Type") != "application/json" {
				http.Error(w, "content type not forwarded", http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"choices":[{}],"usage":{"prompt_tokens":2,"completion_tokens":3}}`))
		}
	}))
	defer srv.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := "http://" + ln.Addr().String()
	_ = ln.Close()

	c := New(Options{Timeout: time.Second})
	json := http.Header{"Content-Type": {"application/json"}}
	for _, tc := range []struct {
		name     string
		target   Target
		kind     Kind
		wantBody string
	}{
		{"answer", Target{URL: srv.URL + "/ok"}, 0, `"prompt_tokens":2`},
		{"hang", Target{URL: srv.URL + "/hang", Timeout: 50 * time.Millisecond}, KindTimeout, ""},
		{"down", Target{URL: closed}, KindUnavailable, ""},
		{"text error", Target{URL: srv.URL + "/text-404"}, KindStatus, ""},
		// A redirect is refused, not followed (the upstream's key would go where it points).
		{"redirect", Target{URL: srv.URL + "/redirect"}, KindUnavailable, ""},
		{"no secret reader", Target{URL: srv.URL, Secret: &snapshot.SecretRef{Name: "s"}}, KindCredentials, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sink := httptest.NewRecorder()
			res, err := c.Forward(context.Background(), Request{Target: tc.target, Body: strings.NewReader("{}"), ContentLength: 2, Header: json, Usage: true, Dialect: testDialect{}}, sink)
			if tc.kind == 0 {
				if err != nil || res.Status != 200 || !res.Complete || res.Usage.Total() != 5 || !strings.Contains(sink.Body.String(), tc.wantBody) {
					t.Fatalf("got %+v, %v, body %q", res, err, sink.Body.String())
				}
				// The answer keeps the upstream's length, so a client can tell a cut answer from a whole one.
				if got, want := sink.Header().Get("Content-Length"), strconv.Itoa(sink.Body.Len()); got != want {
					t.Errorf("Content-Length %q, want the upstream's %s", got, want)
				}
				return
			}
			var ue *Error
			if !errors.As(err, &ue) || ue.Kind != tc.kind {
				t.Fatalf("got %v, want an error of kind %d", err, tc.kind)
			}
			if sink.Body.Len() != 0 || len(sink.Header()) != 0 {
				t.Errorf("the sink was written: %q %v", sink.Body.String(), sink.Header())
			}
		})
	}
	// A JSON error answer is the upstream's own and is relayed as it is.
	sink := httptest.NewRecorder()
	res, err := c.Forward(context.Background(), Request{Target: Target{URL: srv.URL + "/json-400"}}, sink)
	if err != nil || res.Status != 400 || sink.Code != 400 || sink.Body.String() != `{"error":{"message":"bad"}}` {
		t.Fatalf("JSON error: %+v, %v, relayed %d %q", res, err, sink.Code, sink.Body.String())
	}
	// When to retry travels with an error answer: relayed with a JSON one, carried by the error of a text one.
	sink = httptest.NewRecorder()
	res, err = c.Forward(context.Background(), Request{Target: Target{URL: srv.URL + "/json-429"}}, sink)
	if err != nil || res.Status != 429 || sink.Header().Get("Retry-After") != "3" || sink.Header().Get("Retry-After-Ms") != "2500" ||
		sink.Header().Get("X-Internal") != "" {
		t.Fatalf("JSON 429: %+v, %v, relayed headers %v", res, err, sink.Header())
	}
	// A try whose status fails it (Request.Fail) relays nothing, JSON or not: the caller tries elsewhere, and has
	// the status and when to retry in the error.
	var fail tryplan.StatusSet
	fail.Add(429)
	sink = httptest.NewRecorder()
	_, err = c.Forward(context.Background(), Request{Target: Target{URL: srv.URL + "/json-429"}, Fail: &fail}, sink)
	if ue := (*Error)(nil); !errors.As(err, &ue) || ue.Kind != KindStatus || ue.Status != 429 || ue.Header.Get("Retry-After") != "3" ||
		sink.Body.Len() != 0 || len(sink.Header()) != 0 {
		t.Fatalf("JSON 429 that fails the try: got %#v, sink %v %q", err, sink.Header(), sink.Body.String())
	}
	if res, err := c.Forward(context.Background(), Request{Target: Target{URL: srv.URL + "/json-400"}, Fail: &fail}, httptest.NewRecorder()); err != nil || res.Status != 400 {
		t.Fatalf("a status outside Fail is relayed: %+v, %v", res, err)
	}
	_, err = c.Forward(context.Background(), Request{Target: Target{URL: srv.URL + "/text-429"}}, httptest.NewRecorder())
	if ue := (*Error)(nil); !errors.As(err, &ue) || ue.Kind != KindStatus || ue.Status != 429 || ue.Header.Get("Retry-After") != "7" {
		t.Fatalf("text 429: got %#v, want KindStatus 429 with its Retry-After", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	_, err = c.Forward(ctx, Request{Target: Target{URL: srv.URL + "/hang"}}, httptest.NewRecorder())
	if ue := (*Error)(nil); !errors.As(err, &ue) || ue.Kind != KindCanceled {
		t.Fatalf("a caller that leaves: got %v, want KindCanceled", err)
	}
}

// TestForwardRelaysLongAnswers: answers shorter and longer than what is read before the first write reach the
// sink whole, with their usage read and their length, also when the upstream sends them in chunks.
func TestForwardRelaysLongAnswers(t *testing.T) {
	for _, size := range []int{10, wholeAnswer - 100, wholeAnswer + 1, 3 * wholeAnswer} {
		answer := `{"choices":[{"message":{"content":"` + strings.Repeat("x", size) + `"}}],"usage":{"prompt_tokens":2,"completion_tokens":3}}`
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			// Written in pieces and flushed: chunked, as a server that streams its JSON out sends it.
			for b := []byte(answer); len(b) > 0; b = b[min(len(b), 5000):] {
				_, _ = w.Write(b[:min(len(b), 5000)])
				w.(http.Flusher).Flush()
			}
		}))
		sink := httptest.NewRecorder()
		res, err := New(Options{Timeout: 10 * time.Second}).Forward(context.Background(), Request{Target: Target{URL: srv.URL}, Usage: true, Dialect: testDialect{}}, sink)
		srv.Close()
		if err != nil || !res.Complete || res.Usage.Total() != 5 || sink.Body.String() != answer {
			t.Fatalf("%d bytes: %+v, %v, relayed %d bytes", size, res, err, sink.Body.Len())
		}
		if got := sink.Header().Get("Content-Length"); size < wholeAnswer-200 && got != strconv.Itoa(len(answer)) {
			t.Errorf("%d bytes: Content-Length %q, want %d: an answer read whole has its length", size, got, len(answer))
		}
	}
}

// TestRetryAfter: the headers that say when to try again, as the async queue and the cooldown of Endpoint
// targets read them.
func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 16, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		h    http.Header
		want time.Duration
	}{
		{http.Header{"Retry-After": {"3"}}, 3 * time.Second},
		{http.Header{"Retry-After": {"soon"}}, 0},
		{http.Header{"Retry-After": {"-4"}}, 0},
		{http.Header{"Retry-After": {now.Add(90 * time.Second).Format(http.TimeFormat)}}, 90 * time.Second},
		{http.Header{"Retry-After-Ms": {"2500"}, "Retry-After": {"7"}}, 2500 * time.Millisecond},
		{nil, 0},
	} {
		if got := RetryAfter(tc.h, now); got != tc.want {
			t.Errorf("RetryAfter(%v) = %v, want %v", tc.h, got, tc.want)
		}
	}
}
