package upstream

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// countingServer is an httptest server that counts the connections it accepted.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

// rawServer answers each connection with answer, a raw HTTP/1.1 exchange written by the test, after reading one
// request's head; it counts connections and closes each after answering when closeAfter is set.
type rawServer struct {
	addr     string
	conns    atomic.Int32
	requests atomic.Int32
	closed   chan struct{} // a connection was closed by the server
}

func newRawServer(t *testing.T, answer string, closeAfter bool) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{addr: ln.Addr().String(), closed: make(chan struct{}, 16)}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					s.requests.Add(1)
					if _, err := io.WriteString(c, answer); err != nil {
						return
					}
					if closeAfter {
						_ = c.Close()
						s.closed <- struct{}{}
						return
					}
				}
			}()
		}
	}()
	return s
}

func post(t *testing.T, tr http.RoundTripper, ctx context.Context, u string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return tr.RoundTrip(req)
}

// call posts to u and returns the answer's body, failing the test on any error.
func call(t *testing.T, tr http.RoundTripper, u, what string) string {
	t.Helper()
	resp, err := post(t, tr, context.Background(), u)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return readAll(t, resp)
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	return string(b)
}

// TestTransportReusesConnection: calls one after the other share one connection, answers with a length and
// chunked ones alike, and each answer arrives whole.
func TestTransportReusesConnection(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/chunked" {
			_, _ = w.Write([]byte("part one, "))
			w.(http.Flusher).Flush()
		}
		_, _ = w.Write(append([]byte("got "), b...))
	})
	tr := NewTransport()
	defer tr.CloseIdleConnections()
	for i := range 6 {
		path, want := "/length", `got {"model":"m"}`
		if i%2 == 1 {
			path, want = "/chunked", `part one, got {"model":"m"}`
		}
		if got := call(t, tr, srv.URL+path, fmt.Sprintf("call %d", i)); got != want {
			t.Fatalf("call %d answered %q, want %q", i, got, want)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("six calls in a row opened %d connections, want 1", n)
	}
}

// TestTransportDropsConnectionsItCannotReuse: an idle connection the server closed, one after an answer the
// caller left unread, and one on which the server sent bytes nobody asked for are never used again; each next
// call opens a new connection and succeeds.
func TestTransportDropsConnectionsItCannotReuse(t *testing.T) {
	const ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	t.Run("closed by the server while idle", func(t *testing.T) {
		s := newRawServer(t, ok, true)
		tr := NewTransport()
		defer tr.CloseIdleConnections()
		for i := range 3 {
			if got := call(t, tr, "http://"+s.addr+"/", fmt.Sprintf("call %d after the server closed the last connection", i)); got != "ok" {
				t.Fatalf("call %d answered %q", i, got)
			}
			<-s.closed
			waitServerClosed(t, tr, s.addr)
		}
		if n := s.conns.Load(); n != 3 {
			t.Fatalf("%d connections for 3 calls, want 3", n)
		}
	})
	t.Run("answer left unread", func(t *testing.T) {
		srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(strings.Repeat("x", 64<<10)))
		})
		tr := NewTransport()
		defer tr.CloseIdleConnections()
		resp, err := post(t, tr, context.Background(), srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadFull(resp.Body, make([]byte, 10))
		_ = resp.Body.Close()
		if got := call(t, tr, srv.URL, "the call after an unread answer"); len(got) != 64<<10 {
			t.Fatalf("answer after an unread one has %d bytes, want %d", len(got), 64<<10)
		}
		if n := conns.Load(); n != 2 {
			t.Fatalf("%d connections, want 2: the first, with its answer unread, cannot carry another call", n)
		}
	})
	t.Run("bytes after the answer", func(t *testing.T) {
		s := newRawServer(t, ok+"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nextra", false)
		tr := NewTransport()
		defer tr.CloseIdleConnections()
		for i := range 2 {
			if got := call(t, tr, "http://"+s.addr+"/", fmt.Sprintf("call %d", i)); got != "ok" {
				t.Fatalf("call %d answered %q, want the answer to its own request", i, got)
			}
		}
		if n := s.conns.Load(); n != 2 {
			t.Fatalf("%d connections, want 2: the one with bytes after its answer is not reused", n)
		}
	})
}

// waitServerClosed waits until the idle connection to addr has seen its server's close, so the next call finds
// a closed connection in the pool, which is what it must not use.
func waitServerClosed(t *testing.T, tr *Transport, addr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tr.mu.Lock()
		conns := tr.idle[addr]
		closed := len(conns) == 1 && !conns[0].idle.stillOpen()
		tr.mu.Unlock()
		if closed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pooled connection to %s never saw its server's close (%d idle)", addr, len(conns))
		}
		time.Sleep(time.Millisecond)
	}
}

// TestTransportCancelMidAnswer: a call whose context ends while the answer streams stops reading at once, and
// its connection is not reused.
func TestTransportCancelMidAnswer(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/ok" {
			_, _ = w.Write([]byte("ok"))
			return
		}
		_, _ = w.Write([]byte("data: first\n\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	tr := NewTransport()
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := post(t, tr, ctx, srv.URL+"/stream")
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, len("data: first\n\n"))
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatalf("first event: %v", err)
	}
	cancel()
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("reading past a canceled call's first event ended without an error")
	}
	_ = resp.Body.Close()
	if got := call(t, tr, srv.URL+"/ok", "the call after a canceled one"); got != "ok" {
		t.Fatalf("answered %q", got)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2: a canceled call's connection is not reused", n)
	}
}

// TestTransportAnswerHead: informational answers before the answer are skipped, an answer's head past
// MaxResponseHeaderBytes is refused, and a header value that would break the request's framing is refused
// before anything is sent.
func TestTransportAnswerHead(t *testing.T) {
	t.Run("informational first", func(t *testing.T) {
		s := newRawServer(t, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false)
		tr := NewTransport()
		defer tr.CloseIdleConnections()
		resp, err := post(t, tr, context.Background(), "http://"+s.addr+"/")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d, want 200", resp.StatusCode)
		}
		if got := readAll(t, resp); got != "ok" {
			t.Fatalf("answered %q", got)
		}
	})
	t.Run("head too large", func(t *testing.T) {
		s := newRawServer(t, "HTTP/1.1 200 OK\r\nX-Big: "+strings.Repeat("a", MaxResponseHeaderBytes)+"\r\nContent-Length: 2\r\n\r\nok", false)
		tr := NewTransport()
		defer tr.CloseIdleConnections()
		resp, err := post(t, tr, context.Background(), "http://"+s.addr+"/")
		if err == nil {
			resp.Body.Close()
			t.Fatal("an answer with a head past MaxResponseHeaderBytes was accepted")
		}
		if !strings.Contains(err.Error(), "status line and headers") {
			t.Fatalf("error %q does not say what was too large", err)
		}
	})
	t.Run("line break in a header value", func(t *testing.T) {
		s := newRawServer(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false)
		tr := NewTransport()
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest(http.MethodPost, "http://"+s.addr+"/", strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer sk-123\r\nX-Smuggled: yes")
		resp, err := tr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
			t.Fatal("a header value with a line break was sent")
		}
		if strings.Contains(err.Error(), "sk-123") {
			t.Fatalf("the error %q quotes the value, which may be a key", err)
		}
		if n := s.conns.Load(); n != 0 {
			t.Fatalf("the server saw %d connections, want none", n)
		}
	})
}

// TestTransportFallback: https and calls through a proxy from the environment go to the fallback http.Transport.
func TestTransportFallback(t *testing.T) {
	t.Run("https", func(t *testing.T) {
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = fmt.Fprintf(w, "tls %v", r.TLS != nil)
		}))
		defer srv.Close()
		tr := NewTransport()
		defer tr.CloseIdleConnections()
		tr.Fallback.TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
		resp, err := post(t, tr, context.Background(), srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp); got != "tls true" {
			t.Fatalf("answered %q", got)
		}
	})
	t.Run("proxy", func(t *testing.T) {
		var proxied atomic.Int32
		proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			proxied.Add(1)
			_, _ = fmt.Fprintf(w, "proxied %s", r.URL.Host)
		}))
		defer proxy.Close()
		pu, _ := url.Parse(proxy.URL)
		tr := NewTransport()
		defer tr.CloseIdleConnections()
		tr.Fallback.Proxy = http.ProxyURL(pu)
		resp, err := post(t, tr, context.Background(), "http://model.example:8080/v1/chat/completions")
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp); got != "proxied model.example:8080" || proxied.Load() != 1 {
			t.Fatalf("answered %q after %d proxied calls, want the proxy's answer", got, proxied.Load())
		}
	})
}

// TestTransportConcurrentCalls: many callers at once each get their own answer, and the pool keeps what it
// opened.
func TestTransportConcurrentCalls(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	})
	tr := NewTransport()
	defer tr.CloseIdleConnections()
	const callers, calls = 16, 50
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				want := fmt.Sprintf("caller %d call %d", c, i)
				req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(want))
				resp, err := tr.RoundTrip(req)
				if err != nil {
					errs <- err
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || string(b) != want {
					errs <- fmt.Errorf("answered %q (%v), want %q", b, err, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := conns.Load(); n > callers {
		t.Fatalf("%d callers opened %d connections: connections are not reused", callers, n)
	}
}

// failingWrites is a connection whose writes fail, as on a connection its server reset, after passing the first
// pass bytes on.
type failingWrites struct {
	net.Conn
	pass int
}

func (c *failingWrites) Write(p []byte) (int, error) {
	n := min(len(p), c.pass)
	if n > 0 {
		n, _ = c.Conn.Write(p[:n])
		c.pass -= n
	}
	if n == len(p) {
		return n, nil
	}
	_ = c.Conn.Close() // broken, as a reset connection is: reads fail too
	return n, &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}
}

// TestTransportRetriesOnlyUnsentCalls: a call on a pooled connection that fails before one byte of the request
// is written goes once more on a new connection, when its body can be read again; one that failed after part of
// it was written, or whose body cannot be read again, is not sent twice.
func TestTransportRetriesOnlyUnsentCalls(t *testing.T) {
	const ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	for _, tc := range []struct {
		name      string
		pass      int
		replay    bool
		wantRetry bool
	}{
		{"nothing written, body replayable", 0, true, true},
		{"part written", 10, true, false},
		{"body not replayable", 0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newRawServer(t, ok, false)
			tr := NewTransport()
			defer tr.CloseIdleConnections()
			c, err := net.Dial("tcp", s.addr)
			if err != nil {
				t.Fatal(err)
			}
			// Pooled as a connection that passed its check when taken: the failure comes with the write.
			tr.put(s.addr, newPooledConn(&failingWrites{Conn: c, pass: tc.pass}))
			var body io.Reader = strings.NewReader(`{"model":"m"}`)
			if !tc.replay {
				body = io.MultiReader(body) // no GetBody
			}
			req, _ := http.NewRequest(http.MethodPost, "http://"+s.addr+"/", body)
			resp, err := tr.RoundTrip(req)
			if !tc.wantRetry {
				if err == nil {
					resp.Body.Close()
					t.Fatal("the call was sent again")
				}
				if n := s.requests.Load(); n != 0 {
					t.Fatalf("the server got %d requests, want none whole", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("a call on a reset connection, nothing of it written, was not sent again: %v", err)
			}
			if got := readAll(t, resp); got != "ok" {
				t.Fatalf("answered %q", got)
			}
			if n := s.requests.Load(); n != 1 {
				t.Fatalf("the server got %d requests, want 1", n)
			}
		})
	}
}

// TestTransportEarlyRefusal: a server that refuses a request before reading its body (413) has its answer
// returned, not a failure to send the rest, and the connection is not reused.
func TestTransportEarlyRefusal(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ok" {
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = w.Write([]byte("ok"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		_, _ = w.Write([]byte(`{"error":"too large"}`))
	})
	tr := NewTransport()
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/big", strings.NewReader(strings.Repeat("x", 32<<20)))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("a refusal before the body was read came back as %v, want the 413", err)
	}
	if got := readAll(t, resp); resp.StatusCode != http.StatusRequestEntityTooLarge || got != `{"error":"too large"}` {
		t.Fatalf("answered %d %q, want the 413 and its body", resp.StatusCode, got)
	}
	if got := call(t, tr, srv.URL+"/ok", "the call after a refusal"); got != "ok" {
		t.Fatalf("answered %q", got)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2: the refused call's connection is not reused", n)
	}
}

// TestIdleCheckAllocatesNothing: the check of an idle connection taken from the pool, on a real socket, tells an
// open connection from one its server closed, and allocates nothing.
func TestIdleCheckAllocatesNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	server := <-accepted
	pc := newPooledConn(c)
	if !pc.idle.stillOpen() {
		t.Fatal("an open, quiet connection was taken as closed")
	}
	if n := testing.AllocsPerRun(100, func() { pc.idle.stillOpen() }); n != 0 {
		t.Errorf("the idle check allocated %v times", n)
	}
	_ = server.Close()
	deadline := time.Now().Add(10 * time.Second)
	for pc.idle.stillOpen() {
		if time.Now().After(deadline) {
			t.Fatal("a connection its server closed was still taken as open")
		}
		time.Sleep(time.Millisecond)
	}
}

// writeCounter counts the writes made on a connection.
type writeCounter struct {
	net.Conn
	writes int
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes++
	return w.Conn.Write(p)
}

// TestRequestLeavesInOneWrite: a request of up to largeWriteSize, head and body, leaves in one write on a real
// socket, also when its body is larger than the connection's own buffer; a larger one in a write per
// largeWriteSize.
func TestRequestLeavesInOneWrite(t *testing.T) {
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, n)
	})
	addr := strings.TrimPrefix(srv.URL, "http://")
	tr := NewTransport()
	for _, tc := range []struct {
		size   int
		writes int
	}{{1 << 10, 1}, {20 << 10, 1}, {largeWriteSize - headRoom, 1}, {200 << 10, 200<<10/largeWriteSize + 1}} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		wc := &writeCounter{Conn: c}
		body := strings.Repeat("x", tc.size)
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/", strings.NewReader(body))
		resp, err := tr.exchange(context.Background(), addr, newPooledConn(wc), req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		_ = c.Close()
		if string(got) != fmt.Sprint(tc.size) {
			t.Fatalf("%d bytes sent, the server read %s", tc.size, got)
		}
		if wc.writes != tc.writes {
			t.Errorf("a body of %d bytes left in %d writes, want %d", tc.size, wc.writes, tc.writes)
		}
	}
}
