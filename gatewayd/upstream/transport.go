package upstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// IdleConnsPerHost is how many idle connections gatewayd keeps to each upstream. Go's default of 2 makes every
// call beyond the second concurrent one to an upstream open a new connection and leave it in TIME_WAIT, which
// costs a handshake per call and, under load, can exhaust the ephemeral ports of the pod.
const IdleConnsPerHost = 256

// MaxResponseHeaderBytes bounds the status line and headers of an upstream's answer on a pooled connection.
const MaxResponseHeaderBytes = 1 << 20

// Transport is gatewayd's way to the upstreams. A call to a plain-HTTP upstream that no proxy stands in front of
// (a model server in the cluster, reached at a pod's address) runs on a pooled HTTP/1.1 connection in the
// caller's goroutine: the request is written with net/http's own writer (http.Request.Write) and the answer read
// with its own parser (http.ReadResponse), without the two goroutines and the channel hand-offs an http.Transport
// adds to every call on a connection. Everything else (https, a proxy from the environment) goes to Fallback.
//
// What an http.Transport's reading goroutine notices on an idle connection, a Transport checks when it takes
// one: a connection its server closed, or on which it sent anything unasked, is dropped and not used.
type Transport struct {
	// Fallback carries the calls this Transport does not: its Proxy decides which go through a proxy, and its
	// IdleConnTimeout is also how long a pooled connection is kept idle here.
	Fallback *http.Transport
	dialer   net.Dialer

	mu    sync.Mutex
	idle  map[string][]*pooledConn // by host:port, the most recently used last
	sweep *time.Timer              // armed while any connection is idle
}

// NewTransport is gatewayd's transport to the upstreams: pooled connections in the caller's goroutine for plain
// HTTP, and http.DefaultTransport's dialer, proxy, TLS and timeouts for the rest, with IdleConnsPerHost idle
// connections kept per upstream on both.
func NewTransport() *Transport {
	fb := http.DefaultTransport.(*http.Transport).Clone()
	fb.MaxIdleConnsPerHost = IdleConnsPerHost
	fb.MaxIdleConns = 4 * IdleConnsPerHost
	return &Transport{Fallback: fb, dialer: net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}}
}

// pooledConn is one connection to an upstream, with its buffers.
type pooledConn struct {
	conn net.Conn
	lim  limitedReader // what br reads: the connection, capped while a status line and headers are read
	br   *bufio.Reader
	out  countingWriter // what bw writes to: the connection, counting the bytes of the current request
	bw   *bufio.Writer
	used time.Time // when it was last put back idle
	idle *peeker   // checks, when it is taken from the pool, that its server did not close it
}

// limitedReader reads from r while n > 0; n is only lowered while an answer's head is read.
type limitedReader struct {
	r io.Reader
	n int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, fmt.Errorf("upstream's answer has more than %d bytes of status line and headers", MaxResponseHeaderBytes)
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

const unlimited = 1<<63 - 1

// brokenReadTimeout bounds the read of an answer after the request could not be written whole.
const brokenReadTimeout = time.Second

// countingWriter writes to w, counting what it took and keeping its first failure.
type countingWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" {
		return t.Fallback.RoundTrip(req)
	}
	if t.Fallback.Proxy != nil {
		proxy, err := t.Fallback.Proxy(req)
		if err != nil {
			closeBody(req)
			return nil, err
		}
		if proxy != nil {
			return t.Fallback.RoundTrip(req)
		}
	}
	if err := validHeader(req.Header); err != nil {
		closeBody(req)
		return nil, err
	}
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		closeBody(req)
		return nil, err
	}
	addr := hostPort(req)
	pc, reused, err := t.conn(ctx, addr)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	resp, err := t.exchange(ctx, addr, pc, req)
	if err != nil && reused && unsent(err) && req.GetBody != nil && ctx.Err() == nil {
		// A reused connection that failed before any of the request was written (its server had reset it): the
		// server never saw it. Once more, on a new connection, as http.Transport does.
		body, gerr := req.GetBody()
		if gerr != nil {
			return nil, err
		}
		retry := req.Clone(ctx)
		retry.Body = body
		if pc, err = t.dial(ctx, addr); err != nil {
			_ = body.Close()
			return nil, err
		}
		resp, err = t.exchange(ctx, addr, pc, retry)
	}
	return resp, err
}

// writeError is a failure to send the request, before any of the answer was read; nothingWritten when not one
// byte of it reached the connection.
type writeError struct {
	err            error
	nothingWritten bool
}

func (e writeError) Error() string { return "failed to send the request upstream: " + e.err.Error() }
func (e writeError) Unwrap() error { return e.err }

// unsent tells whether err is a failure to send a request of which nothing was written: the server never saw it.
func unsent(err error) bool {
	var w writeError
	return errors.As(err, &w) && w.nothingWritten
}

// exchange writes req on pc and reads the answer's head. The connection is closed by ctx ending until the answer's
// body is read or closed; it goes back to the pool when its body was read to the end and both sides keep it open.
func (t *Transport) exchange(ctx context.Context, addr string, pc *pooledConn, req *http.Request) (*http.Response, error) {
	stop := context.AfterFunc(ctx, func() { _ = pc.conn.Close() })
	fail := func(err error) (*http.Response, error) {
		stop()
		_ = pc.conn.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return nil, err
	}
	pc.out.n, pc.out.err = 0, nil
	bw := requestWriter(pc, req.ContentLength)
	werr := req.Write(bw) // closes req.Body
	if werr == nil {
		werr = bw.Flush()
	}
	if bw != pc.bw {
		bw.Reset(nil)
		largeWriters.Put(bw)
	}
	if werr != nil && pc.out.err == nil {
		// Not the connection's failure (the request's body could not be read, say): the server may be waiting
		// for the rest, so there is no answer to read. (net/http reports a failed write in the middle of the
		// body as a failure to read it; the connection's own writes tell the two apart.)
		return fail(werr)
	}
	if werr != nil {
		// A connection that failed while writing is broken: what the server sent before it (a refusal) is read,
		// and then the read fails too. The deadline only guards against a connection that did not break; it is
		// never reused.
		_ = pc.conn.SetReadDeadline(time.Now().Add(brokenReadTimeout))
	}
	pc.lim.n = MaxResponseHeaderBytes
	resp, err := readResponse(pc.br, req)
	pc.lim.n = unlimited
	switch {
	case werr != nil && err == nil:
		// The server answered before it read the whole request (a refusal): its answer stands, the connection
		// does not (reusable below).
	case werr != nil:
		return fail(writeError{err: pc.out.err, nothingWritten: pc.out.n == 0})
	case err != nil:
		return fail(err)
	}
	b := &answerBody{t: t, addr: addr, pc: pc, stop: stop, rc: resp.Body, reusable: werr == nil && !resp.Close && !req.Close}
	if resp.Body == http.NoBody {
		b.finish(true)
		return resp, nil
	}
	resp.Body = b
	return resp, nil
}

// largeWriteSize is the buffer of a request whose body does not fit the connection's own 4 KiB one: net/http
// copies a body of known length through the buffer, one write each time it fills, so a 20 KiB chat history went
// upstream in five writes and a 200 KiB one in 51, each a system call, and each a wake-up of the model server.
// Through this buffer a request of up to 64 KiB, head and body, leaves in one write and a larger one in a write
// per 64 KiB. It matches the largest body a predict call reads before it forwards it (inference's
// maxPrereadBody).
const largeWriteSize = 64 << 10

// headRoom is what a request's head is allowed beside its body when choosing its writer.
const headRoom = 2 << 10

var largeWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, largeWriteSize) }}

// requestWriter is the writer a request of contentLength bytes of body goes through: the connection's own when
// head and body fit it (or the length is unknown, when net/http flushes each chunk anyway), a pooled larger one
// otherwise. The caller puts a pooled one back.
func requestWriter(pc *pooledConn, contentLength int64) *bufio.Writer {
	if contentLength <= 0 || contentLength+headRoom <= int64(pc.bw.Available()) {
		return pc.bw
	}
	bw := largeWriters.Get().(*bufio.Writer)
	bw.Reset(&pc.out)
	return bw
}

// readResponse reads an answer's head, past any informational (1xx) answers before it.
func readResponse(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	for {
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			return nil, err
		}
		switch {
		case resp.StatusCode == http.StatusSwitchingProtocols:
			return nil, errors.New("the upstream switched protocols, which a model call never asks for")
		case resp.StatusCode >= 100 && resp.StatusCode < 200:
			continue
		}
		return resp, nil
	}
}

// answerBody is an answer's body on a pooled connection.
type answerBody struct {
	t        *Transport
	addr     string
	pc       *pooledConn
	stop     func() bool
	rc       io.ReadCloser
	reusable bool
	done     atomic.Bool
}

func (b *answerBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		b.finish(true)
	case err != nil:
		b.finish(false)
	}
	return n, err
}

// Close before the end gives up the connection: the rest of the answer is not read for it.
func (b *answerBody) Close() error {
	b.finish(false)
	return nil
}

// finish ends the call on the connection once: back to the pool when complete is true, the connection is
// reusable, nothing unasked follows the answer, and ctx did not close it; closed otherwise.
func (b *answerBody) finish(complete bool) {
	if b.done.Swap(true) {
		return
	}
	if b.stop() && complete && b.reusable && b.pc.br.Buffered() == 0 {
		b.t.put(b.addr, b.pc)
		return
	}
	_ = b.pc.conn.Close()
}

// conn takes an idle connection to addr that is still open, or dials one.
func (t *Transport) conn(ctx context.Context, addr string) (*pooledConn, bool, error) {
	for {
		pc := t.take(addr)
		if pc == nil {
			break
		}
		if time.Since(pc.used) < t.idleTimeout() && pc.idle.stillOpen() {
			return pc, true, nil
		}
		_ = pc.conn.Close()
	}
	pc, err := t.dial(ctx, addr)
	return pc, false, err
}

func (t *Transport) dial(ctx context.Context, addr string) (*pooledConn, error) {
	c, err := t.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return newPooledConn(c), nil
}

func newPooledConn(c net.Conn) *pooledConn {
	pc := &pooledConn{conn: c, lim: limitedReader{r: c, n: unlimited}, out: countingWriter{w: c}, idle: newPeeker(c)}
	pc.br = bufio.NewReaderSize(&pc.lim, 4<<10)
	pc.bw = bufio.NewWriterSize(&pc.out, 4<<10)
	return pc
}

func (t *Transport) take(addr string) *pooledConn {
	t.mu.Lock()
	defer t.mu.Unlock()
	conns := t.idle[addr]
	if len(conns) == 0 {
		return nil
	}
	pc := conns[len(conns)-1]
	conns[len(conns)-1] = nil
	if len(conns) == 1 {
		delete(t.idle, addr)
	} else {
		t.idle[addr] = conns[:len(conns)-1]
	}
	return pc
}

func (t *Transport) put(addr string, pc *pooledConn) {
	pc.used = time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.idle[addr]) >= IdleConnsPerHost {
		_ = pc.conn.Close()
		return
	}
	if t.idle == nil {
		t.idle = map[string][]*pooledConn{}
	}
	t.idle[addr] = append(t.idle[addr], pc)
	if t.sweep == nil {
		t.sweep = time.AfterFunc(t.idleTimeout()/2, t.closeExpired)
	}
}

// closeExpired closes the connections idle for longer than the idle timeout, and comes back while any remain,
// so connections to servers that are gone (a model's old pods) do not stay open.
func (t *Transport) closeExpired() {
	t.mu.Lock()
	defer t.mu.Unlock()
	timeout := t.idleTimeout()
	for addr, conns := range t.idle {
		kept := conns[:0]
		for _, pc := range conns {
			if time.Since(pc.used) >= timeout {
				_ = pc.conn.Close()
				continue
			}
			kept = append(kept, pc)
		}
		clear(conns[len(kept):])
		if len(kept) == 0 {
			delete(t.idle, addr)
		} else {
			t.idle[addr] = kept
		}
	}
	t.sweep = nil
	if len(t.idle) > 0 {
		t.sweep = time.AfterFunc(timeout/2, t.closeExpired)
	}
}

func (t *Transport) idleTimeout() time.Duration {
	if d := t.Fallback.IdleConnTimeout; d > 0 {
		return d
	}
	return 90 * time.Second
}

// CloseIdleConnections closes the idle connections of both paths.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	for _, conns := range t.idle {
		for _, pc := range conns {
			_ = pc.conn.Close()
		}
	}
	t.idle = nil
	if t.sweep != nil {
		t.sweep.Stop()
		t.sweep = nil
	}
	t.mu.Unlock()
	t.Fallback.CloseIdleConnections()
}

// hostPort is the address a plain-HTTP request dials.
func hostPort(req *http.Request) string {
	if port := req.URL.Port(); port != "" {
		return net.JoinHostPort(req.URL.Hostname(), port)
	}
	return net.JoinHostPort(req.URL.Hostname(), "80")
}

// validHeader refuses what http.Transport refuses: a header name or value that would break the request's framing
// (a key read from a Secret with a line break in it, for one).
func validHeader(h http.Header) error {
	for name, values := range h {
		if !httpguts.ValidHeaderFieldName(name) {
			return fmt.Errorf("invalid header field name %q", name)
		}
		for _, v := range values {
			if !httpguts.ValidHeaderFieldValue(v) {
				// The value is not quoted: it may be a key.
				return fmt.Errorf("invalid header field value for %q", name)
			}
		}
	}
	return nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
