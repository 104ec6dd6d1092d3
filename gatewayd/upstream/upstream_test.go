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
			res, err := c.Forward(context.Background(), Request{Target: tc.target, Body: strings.NewReader("{}"), ContentLength: 2, Header: json, Usage: true}, sink)
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
