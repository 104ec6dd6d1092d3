package inference

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgate/modelgate/api/snapshot"
	"github.com/modelgate/modelgate/gatewayd/httperr"
)

// heldServer runs handler behind a real HTTP server and returns its address.
func heldServer(t *testing.T, handler http.HandlerFunc) string {
	t.Helper()
	s := httptest.NewServer(handler)
	t.Cleanup(s.Close)
	return s.Listener.Addr().String()
}

// TestHeldBodyForwardsIntact: what the held body read during the hold and what arrives after it reach the
// forward byte for byte, and the bytes reserved while holding are all returned.
func TestHeldBodyForwardsIntact(t *testing.T) {
	payload := make([]byte, 300<<10) // more than heldReadAhead, so the read-ahead bound is crossed
	_, _ = rand.Read(payload)
	var reserved atomic.Int64
	got := make(chan []byte, 1)
	proceed := make(chan struct{})
	addr := heldServer(t, func(w http.ResponseWriter, r *http.Request) {
		hb := newHeldBody(r.Body, func(n int64) bool { reserved.Add(n); return true }, func(n int64) { reserved.Add(-n) })
		defer hb.stop(http.NewResponseController(w))
		<-proceed // the hold: the client sends while nobody forwards
		hb.endHold()
		b, err := io.ReadAll(hb)
		if err != nil {
			t.Errorf("reading the held body: %v", err)
		}
		got <- b
	})
	pr, pw := io.Pipe()
	go func() {
		_, _ = pw.Write(payload[:100<<10]) // during the hold
		close(proceed)
		_, _ = pw.Write(payload[100<<10:]) // after it, streamed
		_ = pw.Close()
	}()
	resp, err := http.Post("http://"+addr, "application/octet-stream", pr)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if b := <-got; !bytes.Equal(b, payload) {
		t.Fatalf("forwarded %d bytes, want the %d sent, identical", len(b), len(payload))
	}
	if n := reserved.Load(); n != 0 {
		t.Fatalf("%d bytes still reserved after the call", n)
	}
}

// TestHeldBodyRefusals: a key past its held bytes fails the held read with errHeldBytes, and a body past the cap
// fails it with the MaxBytesError that the hold answers 413 for; both close failed.
func TestHeldBodyRefusals(t *testing.T) {
	for _, tc := range []struct {
		name    string
		acquire func(int64) bool
		cap     int64
		want    func(error) bool
	}{
		{"held bytes", func(int64) bool { return false }, 1 << 20, func(err error) bool { return errors.Is(err, errHeldBytes) }},
		{"body cap", func(int64) bool { return true }, 10, func(err error) bool {
			var tooBig *http.MaxBytesError
			return errors.As(err, &tooBig)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := make(chan error, 1)
			addr := heldServer(t, func(w http.ResponseWriter, r *http.Request) {
				hb := newHeldBody(http.MaxBytesReader(w, r.Body, tc.cap), tc.acquire, func(int64) {})
				defer hb.stop(http.NewResponseController(w))
				select {
				case <-hb.failed:
					errs <- hb.readErr()
				case <-time.After(30 * time.Second):
					errs <- errors.New("the held read did not fail")
				}
			})
			resp, err := http.Post("http://"+addr, "text/plain", strings.NewReader(strings.Repeat("x", 100)))
			if err == nil {
				resp.Body.Close()
			}
			if err := <-errs; !tc.want(err) {
				t.Fatalf("held read error = %v", err)
			}
		})
	}
}

// TestHeldBodyStopUnblocks: stop returns while the client is still sending (its read is blocked on the
// connection), and a forward that still reads afterwards gets an error, not a wait.
func TestHeldBodyStopUnblocks(t *testing.T) {
	stopped := make(chan error, 1)
	addr := heldServer(t, func(w http.ResponseWriter, r *http.Request) {
		hb := newHeldBody(r.Body, func(int64) bool { return true }, func(int64) {})
		hb.endHold()
		buf := make([]byte, 4)
		if _, err := io.ReadFull(hb, buf); err != nil {
			stopped <- err
			return
		}
		hb.stop(http.NewResponseController(w))
		_, err := hb.Read(buf)
		stopped <- err
	})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A chunked body whose first chunk arrives and whose end never does.
	_, _ = conn.Write([]byte("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n"))
	select {
	case err := <-stopped:
		if err == nil {
			t.Fatal("Read after stop = nil error, want an error")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("stop did not return while the client was still sending")
	}
}

// TestHoldVerdict: why a hold ended decides the answer.
func TestHoldVerdict(t *testing.T) {
	d := &snapshot.Deployment{ID: "d1"}
	live, gone := context.Background(), canceled()
	for _, tc := range []struct {
		name       string
		client     context.Context
		cause      error
		status     int
		code       string
		retryAfter int64
	}{
		{"hold timeout", live, errHoldTimeout, 503, httperr.CodeModelNotReady, holdRetryAfter},
		{"body over the cap", live, &http.MaxBytesError{Limit: 10}, 413, httperr.CodePayloadTooLarge, 0},
		{"key holds too many bytes", live, errHeldBytes, 429, httperr.CodeRateLimited, 1},
		{"client left", gone, context.Canceled, statusClientClosed, httperr.CodeClientError, 0},
		{"connection failed", gone, io.ErrUnexpectedEOF, statusClientClosed, httperr.CodeClientError, 0},
		{"broken chunked body", live, errors.New("malformed chunked encoding"), 400, httperr.CodeClientError, 0},
	} {
		e := holdVerdict(tc.client, tc.cause, d, time.Minute, 1<<20, 1<<27)
		if e.Status != tc.status || e.Code != tc.code || e.RetryAfter != tc.retryAfter {
			t.Errorf("%s: %d %s Retry-After %d, want %d %s %d", tc.name, e.Status, e.Code, e.RetryAfter, tc.status, tc.code, tc.retryAfter)
		}
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
