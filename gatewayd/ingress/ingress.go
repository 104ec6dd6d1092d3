// Package ingress is how gatewayd takes a request in: the table of its routes (Routes, which every package
// registers on through Mux, so a test can walk them all) and the one body-reading policy of every route
// (docs/security.md "Request bodies"):
//
//   - headers and credentials are checked before the body is read, and an answer written before the body has
//     arrived closes the connection, so a refusal (401, 403, 413) leaves at once even when the body never comes
//     (net/http would otherwise read the rest of the body before it writes the answer);
//   - the body has a read deadline (Guard, the server-wide half); net/http clears it once the body has been read
//     whole (its background read of the connection starts there), so a long answer is never cut by it, and no
//     route may set it again after that;
//   - a declared Content-Length over the route family's cap is refused with 413 before a byte is read, and a body
//     that streams past the cap fails its read (Limit, the route half);
//   - a body whose read failed is answered by ReadFailed, never with a 2xx.
package ingress

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/modelgate/modelgate/gatewayd/httperr"
)

// DefaultBodyReadTimeout is how long a request body may take to arrive when Guard is given no timeout: the minute
// docs/security.md promises.
const DefaultBodyReadTimeout = time.Minute

// Mux is what a package registers its routes on: an *http.ServeMux, or Routes, which also keeps the patterns.
type Mux interface {
	Handle(pattern string, handler http.Handler)
	HandleFunc(pattern string, handler func(http.ResponseWriter, *http.Request))
}

// Routes is an http.ServeMux that keeps the patterns registered on it, in order: the one list of gatewayd's
// routes.
type Routes struct {
	*http.ServeMux
	patterns []string
}

// NewRoutes returns an empty Routes.
func NewRoutes() *Routes { return &Routes{ServeMux: http.NewServeMux()} }

// Handle registers handler at pattern and keeps the pattern.
func (m *Routes) Handle(pattern string, handler http.Handler) {
	m.ServeMux.Handle(pattern, handler)
	m.patterns = append(m.patterns, pattern)
}

// HandleFunc registers handler at pattern and keeps the pattern.
func (m *Routes) HandleFunc(pattern string, handler func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(handler))
}

// Patterns are the patterns registered, in order ("POST /v1/chat/completions", "/").
func (m *Routes) Patterns() []string { return slices.Clone(m.patterns) }

// Guard serves h under the server-wide half of the body policy. A request with a body (a Content-Length above
// zero, or a chunked body) gets a read deadline of timeout (DefaultBodyReadTimeout when zero), which net/http
// clears once the body has been read to its end; an answer that starts before then closes the connection, so it
// is sent at once and no later request is read after a body left half-read. The connection closes once the
// answer is sent and what is left of the body has been read, or its deadline has passed.
func Guard(h http.Handler, timeout time.Duration) http.Handler {
	if timeout <= 0 {
		timeout = DefaultBodyReadTimeout
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == 0 {
			h.ServeHTTP(w, r)
			return
		}
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(timeout))
		b := &guardedBody{ReadCloser: r.Body}
		// A copy of the request carries the guarded body: net/http reads the request it holds (and its own body
		// type) once the handler is done, to close the connection the way a half-read body needs.
		r = r.WithContext(r.Context())
		r.Body = b
		gw := &guardedWriter{ResponseWriter: w, body: b}
		h.ServeHTTP(gw, r)
		if !gw.wrote {
			// net/http writes the 200 of a handler that wrote nothing after this returns.
			gw.closeUnlessRead()
		}
	})
}

// guardedBody is a request body under Guard: it knows when the body has been read to its end.
type guardedBody struct {
	io.ReadCloser
	done atomic.Bool
}

func (b *guardedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.done.Store(true)
	}
	return n, err
}

// guardedWriter marks an answer that starts before its request's body was read whole Connection: close.
type guardedWriter struct {
	http.ResponseWriter
	body  *guardedBody
	wrote bool
}

func (w *guardedWriter) closeUnlessRead() {
	if !w.body.done.Load() {
		w.Header().Set("Connection", "close")
	}
}

func (w *guardedWriter) WriteHeader(code int) {
	if !w.wrote && code >= http.StatusOK {
		w.wrote = true
		w.closeUnlessRead()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *guardedWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.wrote = true
		w.closeUnlessRead()
	}
	return w.ResponseWriter.Write(p)
}

// Flush sends what is buffered (streamed answers).
func (w *guardedWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// Unwrap lets http.ResponseController reach the connection (read deadlines, flushes).
func (w *guardedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Limit is the route half of the body policy, for a route family whose bodies are at most max bytes: a declared
// Content-Length over max is refused (TooLarge) before a byte is read; otherwise r.Body fails its read once it
// passes max (ReadFailed answers that 413 too). Call it once the caller is authenticated, before reading.
func Limit(w http.ResponseWriter, r *http.Request, max int64) *httperr.Error {
	if r.ContentLength > max {
		return TooLarge(max)
	}
	r.Body = http.MaxBytesReader(w, r.Body, max)
	return nil
}

// TooLarge is the one answer to a body over its route family's cap: 413 payload_too_large whose detail names the
// body and the cap, [{"field": "body", "message": "must be at most <max> bytes"}].
func TooLarge(max int64) *httperr.Error {
	return httperr.New(http.StatusRequestEntityTooLarge, httperr.CodePayloadTooLarge,
		fmt.Sprintf("The request body exceeds %d bytes.", max),
		[]httperr.FieldError{{Field: "body", Message: fmt.Sprintf("must be at most %d bytes", max)}})
}

// ReadFailed is the answer to a body whose read failed with err: 413 past the cap (Limit), 408 when it did not
// arrive before its deadline (Guard), 400 when it was cut or malformed.
func ReadFailed(err error) *httperr.Error {
	var tooBig *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &tooBig):
		return TooLarge(tooBig.Limit)
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return httperr.New(http.StatusRequestTimeout, httperr.CodeTimeout, "The request body did not arrive in time.",
			[]httperr.FieldError{{Field: "body", Message: "must arrive within the body read deadline"}})
	}
	return httperr.New(http.StatusBadRequest, httperr.CodeClientError, "Failed to read the request body.",
		[]httperr.FieldError{{Field: "body", Message: err.Error()}})
}

// Extend moves the read deadline of r's body to until, for a route whose body may take longer than Guard's
// timeout once its caller is proven (a sandbox upload, until its signed URL expires).
func Extend(w http.ResponseWriter, until time.Time) {
	_ = http.NewResponseController(w).SetReadDeadline(until)
}
