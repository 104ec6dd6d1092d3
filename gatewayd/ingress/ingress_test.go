package ingress_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/ingress"
)

// patience bounds how long a test waits for an answer: far past every deadline the tests configure, so a pass
// never depends on timing, and a server that holds the connection fails the test instead of hanging it.
const patience = 20 * time.Second

// serve runs h under Guard with timeout on a real listener; GET /probe answers 200 at once.
func serve(t *testing.T, timeout time.Duration, h http.HandlerFunc) string {
	t.Helper()
	s := httptest.NewServer(ingress.Guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/probe" {
			return
		}
		h(w, r)
	}), timeout))
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://")
}

// send writes a request's head and the start of its body on a new connection, then stalls; it returns the
// answer's status, whether it said Connection: close, and, when probe is set, whether the server closed the
// connection after it (a second request on it gets no answer).
func send(t *testing.T, addr, head, body string, probe bool) (int, bool, bool) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, head+"\r\n"+body); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(patience))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if !probe {
		return resp.StatusCode, resp.Close, false
	}
	_, _ = io.WriteString(conn, "GET /probe HTTP/1.1\r\nHost: x\r\n\r\n")
	next, err := http.ReadResponse(br, nil)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the server held the connection open for %s after its answer", patience)
	}
	if err == nil {
		next.Body.Close()
	}
	return resp.StatusCode, resp.Close, err != nil
}

// TestRefusalLeavesBeforeTheBody: an answer written before the body arrived (a 401 of a route that checks the key
// first) is sent at once and closes the connection, though the body's deadline is an hour away: net/http would
// otherwise read the rest of the body first, and a client that never sends it would never see the 401.
func TestRefusalLeavesBeforeTheBody(t *testing.T) {
	addr := serve(t, time.Hour, func(w http.ResponseWriter, r *http.Request) {
		httperr.Write(w, http.StatusUnauthorized, httperr.CodeUnauthorized, "No key.", nil)
	})
	for name, head := range map[string]string{
		"declared length": "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n",
		"chunked":         "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n",
	} {
		code, saidClose, _ := send(t, addr, head, "{", false)
		if code != http.StatusUnauthorized || !saidClose {
			t.Errorf("%s: status %d, Connection: close %v; want 401, close", name, code, saidClose)
		}
	}
}

// TestStalledBodyIsCut: a body that stalls fails its read at the deadline, and the route answers it by
// ReadFailed: 408, never a 2xx.
func TestStalledBodyIsCut(t *testing.T) {
	addr := serve(t, 200*time.Millisecond, func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			httperr.WriteError(w, ingress.ReadFailed(err))
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	code, _, closed := send(t, addr, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n", "{\"a\":", true)
	if code != http.StatusRequestTimeout || !closed {
		t.Fatalf("status %d, closed %v; want 408 and the connection closed", code, closed)
	}
}

// TestDeadlineEndsWithTheBody: once the body is in hand the deadline no longer applies, so an answer that takes
// longer than it (a slow model) is neither cut nor cancelled, and the connection stays open for the next call.
func TestDeadlineEndsWithTheBody(t *testing.T) {
	const timeout = 100 * time.Millisecond
	addr := serve(t, timeout, func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			httperr.WriteError(w, ingress.ReadFailed(err))
			return
		}
		select {
		case <-r.Context().Done():
			w.WriteHeader(http.StatusServiceUnavailable)
		case <-time.After(3 * timeout):
			w.WriteHeader(http.StatusOK)
		}
	})
	code, saidClose, closed := send(t, addr, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n", "{}", true)
	if code != http.StatusOK || saidClose || closed {
		t.Fatalf("status %d, Connection: close %v, closed %v; want 200 on a connection kept open", code, saidClose, closed)
	}
}

// TestLimit: a declared length over the cap is 413 before a byte is read; a chunked body is cut at the cap with
// 413; a body within the cap reads whole.
func TestLimit(t *testing.T) {
	const max = 16
	read := make(chan bool, 3)
	addr := serve(t, time.Hour, func(w http.ResponseWriter, r *http.Request) {
		if e := ingress.Limit(w, r, max); e != nil {
			read <- false
			httperr.WriteError(w, e)
			return
		}
		read <- true
		if _, err := io.ReadAll(r.Body); err != nil {
			httperr.WriteError(w, ingress.ReadFailed(err))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	if code, saidClose, _ := send(t, addr, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n", "", false); code != http.StatusRequestEntityTooLarge || !saidClose || <-read {
		t.Errorf("declared 17 bytes: status %d, Connection: close %v; want 413 before the body was read, closing", code, saidClose)
	}
	chunk := fmt.Sprintf("%x\r\n%s\r\n", 20, strings.Repeat("a", 20))
	if code, _, _ := send(t, addr, "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n", chunk, false); code != http.StatusRequestEntityTooLarge || !<-read {
		t.Errorf("chunked 20 bytes: status %d; want 413 once the stream passed the cap", code)
	}
	if code, _, closed := send(t, addr, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 16\r\n", strings.Repeat("a", 16), true); code != http.StatusNoContent || closed || !<-read {
		t.Errorf("16 bytes: status %d, closed %v; want 204 on a connection kept open", code, closed)
	}
}

// TestRoutesKeepsPatterns: Routes lists what was registered on it, in order, and serves it.
func TestRoutesKeepsPatterns(t *testing.T) {
	m := ingress.NewRoutes()
	m.HandleFunc("GET /a", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	m.Handle("POST /b/{id}", http.NotFoundHandler())
	if got := m.Patterns(); !slices.Equal(got, []string{"GET /a", "POST /b/{id}"}) {
		t.Fatalf("patterns %q", got)
	}
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/a", nil))
	if rec.Code != http.StatusTeapot {
		t.Fatalf("GET /a: %d", rec.Code)
	}
}

// TestBodyRefusalsNameTheBody: each refusal of a body names it in the list of {field, message} that every
// envelope carries for a refused field.
func TestBodyRefusalsNameTheBody(t *testing.T) {
	for name, e := range map[string]*httperr.Error{
		"too large": ingress.TooLarge(8),
		"too slow":  ingress.ReadFailed(os.ErrDeadlineExceeded),
		"cut":       ingress.ReadFailed(io.ErrUnexpectedEOF),
	} {
		fields, ok := e.Detail.([]httperr.FieldError)
		if !ok || len(fields) != 1 || fields[0].Field != "body" || fields[0].Message == "" {
			t.Errorf("%s: detail %#v, want one FieldError naming body", name, e.Detail)
		}
	}
}
