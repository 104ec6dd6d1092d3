// Package upstream is gatewayd's forwarding core: it sends one call to a model server or an OpenAI-compatible
// upstream and relays the answer into a Sink, under the deadline rules, with the SSE relay and its pooled
// buffers, reading upstream keys from their Secrets. It never writes an error answer of its own: failures before
// the upstream answered come back as an *Error of a Kind, and the caller maps them to its envelope. So the HTTP
// handlers (the OpenAI, predict and run_remote routes) and the async queue worker, which has no client connection,
// all call the same Forward.
package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelgate/modelgate/api/snapshot"

	"github.com/modelgate/modelgate/gatewayd/tryplan"
)

// maxCapturedBody bounds how much of a non-streamed answer is kept to read its usage; the sink gets all of it.
const maxCapturedBody = 16 << 20

// Sink receives an upstream's answer: a client's http.ResponseWriter, or a buffer of a worker with no client.
type Sink interface {
	Header() http.Header
	WriteHeader(status int)
	Write(b []byte) (int, error)
	// Flush sends what was written so far, for streams.
	Flush()
}

// Target is where a call goes.
type Target struct {
	// URL is the full address of the call.
	URL string
	// Name names the target in logs (a model slug or a model id).
	Name string
	// Namespace is the workspace of Secret.
	Namespace string
	// Secret holds the upstream's key, sent as the Request's Dialect says; nil when the upstream needs none.
	Secret *snapshot.SecretRef
	// Timeout bounds the call (see Client.Forward); the client's default when zero.
	Timeout time.Duration
}

// Request is one call to forward.
type Request struct {
	Target Target
	Body   io.Reader
	// ContentLength of Body; -1, or 0 with a Body, when unknown.
	ContentLength int64
	// Header holds the headers to send (Content-Type, Accept).
	Header http.Header
	// Stream relays an event-stream answer event by event, reads its usage from the final usage chunk, and
	// drops that chunk unless StreamUsage.
	Stream      bool
	StreamUsage bool
	// Usage reads the usage of a non-streamed JSON answer.
	Usage bool
	// Dialect authenticates the call and reads its answer's usage; nil for a model deployment, whose call carries
	// no key and whose usage is not read.
	Dialect Dialect
	// Translation, when set, turns the provider's answer into OpenAI's (only a provider that speaks another wire
	// sets it); nil relays the answer as it is.
	Translation Translation
	// Payload is the bytes Body reads, when they are at hand, for a Dialect that is a Signer.
	Payload []byte
	// Fail, when set, holds the statuses that fail this try: an answer with one of them is not relayed but
	// returned as an *Error of KindStatus, so the caller can try elsewhere. The last try of a call leaves it nil,
	// and its answer is relayed whatever it is.
	Fail *tryplan.StatusSet
}

// Result is what a forwarded call did.
type Result struct {
	// Status is the upstream's status, relayed to the sink.
	Status int
	// Usage is what the upstream reported, even for an answer cut short.
	Usage Usage
	// Complete is false when the relay of the answer was cut (the client left, the upstream broke off, or a
	// stream stalled past the timeout).
	Complete bool
	// Duration is the time from sending the call to the end of the answer.
	Duration time.Duration
}

// Kind classifies a failure before the upstream answered.
type Kind int

// Kinds of Error.
const (
	// KindTimeout: no answer within the timeout.
	KindTimeout Kind = iota + 1
	// KindUnavailable: the upstream could not be reached.
	KindUnavailable
	// KindCredentials: the upstream's key could not be read.
	KindCredentials
	// KindCanceled: the caller's context ended first (a client that left).
	KindCanceled
	// KindStatus: the upstream answered an error status with a body that is not JSON (a proxy's or a web
	// server's page, say). It is not relayed: the caller answers in its own envelope. JSON error bodies, such
	// as an OpenAI-compatible server's, are relayed as they are.
	KindStatus
)

// maxErrorSnippet bounds the part of a non-JSON error body kept in an Error.
const maxErrorSnippet = 256

// Error is a failure before the upstream answered; nothing was written to the sink.
type Error struct {
	Kind    Kind
	Timeout time.Duration
	Err     error
	// Status, Header and Snippet are the upstream's status, headers (Retry-After, say) and the start of its
	// body, for KindStatus.
	Status  int
	Header  http.Header
	Snippet string
}

func (e *Error) Error() string {
	switch e.Kind {
	case KindTimeout:
		return "upstream timed out after " + e.Timeout.String()
	case KindCredentials:
		return "upstream credentials unavailable: " + e.Err.Error()
	case KindCanceled:
		return "call canceled: " + e.Err.Error()
	case KindStatus:
		return fmt.Sprintf("upstream answered %d", e.Status)
	}
	return "upstream unreachable: " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Options configure a Client.
type Options struct {
	// Transport reaches the upstreams; NewTransport() when nil.
	Transport http.RoundTripper
	// Secrets reads upstream keys; required when a Target names a Secret.
	Secrets *Secrets
	// Timeout is the default of a Target with none.
	Timeout time.Duration
}

// Client forwards calls.
type Client struct {
	transport http.RoundTripper
	secrets   *Secrets
	timeout   time.Duration
}

// New returns a Client.
func New(opts Options) *Client {
	if opts.Transport == nil {
		opts.Transport = NewTransport()
	}
	// The transport is called directly, not through an http.Client: a model call follows no redirect (an
	// upstream's redirect is refused, see Forward), so the client's request copy and redirect bookkeeping would be
	// about 20 allocations per call for nothing. Deadlines are per call, and streams may legitimately run long.
	return &Client{transport: opts.Transport, secrets: opts.Secrets, timeout: opts.Timeout}
}

// Forward sends req and relays the answer, whatever its status, into sink. The call lives in ctx: a caller that
// leaves cancels it. Its timeout bounds a non-streamed call as a whole, and a streamed one until its response
// headers and then each gap between two events, so long streams that keep flowing are not cut.
//
// An *Error means nothing was written to sink. Otherwise the answer was relayed, completely or not
// (Result.Complete).
func (c *Client) Forward(ctx context.Context, req Request, sink Sink) (Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	timeout := req.Target.Timeout
	if timeout <= 0 {
		timeout = c.timeout
	}
	d := newDeadline(timeout, cancel)
	defer d.timer.Stop()
	hreq, err := c.request(ctx, req)
	if err != nil {
		return Result{}, err
	}
	start := time.Now()
	resp, err := c.transport.RoundTrip(hreq)
	if err != nil {
		switch {
		case d.fired.Load():
			return Result{}, &Error{Kind: KindTimeout, Timeout: timeout, Err: err}
		case ctx.Err() != nil:
			return Result{}, &Error{Kind: KindCanceled, Err: err}
		}
		return Result{}, &Error{Kind: KindUnavailable, Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		// A redirect is not followed: the upstream's key would go where the redirect points, and the call would
		// reach a server the Endpoint does not name.
		return Result{}, &Error{Kind: KindUnavailable, Err: fmt.Errorf("upstream %s answered %d, a redirect, which gatewayd does not follow", req.Target.Name, resp.StatusCode)}
	}
	if resp.StatusCode >= 400 && (!isJSON(resp) || req.Fail != nil && req.Fail.Has(resp.StatusCode)) {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorSnippet))
		return Result{}, &Error{Kind: KindStatus, Status: resp.StatusCode, Header: resp.Header, Snippet: strings.ToValidUTF8(string(b), "?"),
			Err: fmt.Errorf("upstream %s answered %d", req.Target.Name, resp.StatusCode)}
	}
	if req.Translation != nil {
		res := translate(req.Translation, req.Stream, req.StreamUsage, resp, sink, d)
		res.Duration = time.Since(start)
		return res, nil
	}
	res := Result{Status: resp.StatusCode}
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		sink.Header().Set("Content-Type", ct)
	}
	relayed := !(req.Stream && isEventStream(resp))
	if relayed && resp.ContentLength >= 0 {
		// An answer relayed whole keeps the upstream's length: net/http then frames it without chunks, and an
		// answer the upstream cut short ends in a closed connection, never in a final chunk that would make the
		// client take it for complete.
		sink.Header().Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	switch {
	case resp.StatusCode >= 400:
		// JSON error answers pass through as they are, status and body: a client of an OpenAI-compatible
		// server reads its error object, and when to retry.
		CopyRetryHeaders(sink.Header(), resp.Header)
		sink.WriteHeader(resp.StatusCode)
		_, err = copyAnswer(sink, resp.Body)
		res.Complete = err == nil
	case !relayed:
		sink.Header().Set("Cache-Control", "no-cache")
		sink.Header().Set("X-Accel-Buffering", "no")
		sink.WriteHeader(resp.StatusCode)
		sink.Flush()
		res.Usage, res.Complete = relayStream(sink, resp.Body, d, req.Dialect, req.StreamUsage)
	case req.Usage && req.Dialect != nil:
		c := captures.Get().(*capture)
		c.sink, c.kept = sink, c.kept[:0]
		_, err = c.relay(resp.StatusCode, resp.Body)
		res.Usage, _ = req.Dialect.AnswerUsage(c.kept)
		c.release()
		res.Complete = err == nil
	default:
		sink.WriteHeader(resp.StatusCode)
		_, err = copyAnswer(sink, resp.Body)
		res.Complete = err == nil
	}
	res.Duration = time.Since(start)
	return res, nil
}

// retryHeaders are the headers of an upstream's error answer that gatewayd passes on: when to try again
// (Retry-After, and the Retry-After-Ms of OpenAI-compatible servers, which their SDKs read first).
var retryHeaders = []string{"Retry-After", "Retry-After-Ms"}

// CopyRetryHeaders sets on dst the headers of src that say when to try again. Forward relays them with a JSON
// error answer; a caller that answers a KindStatus error in its own envelope copies them from Error.Header.
func CopyRetryHeaders(dst, src http.Header) {
	for _, h := range retryHeaders {
		if v := src.Get(h); v != "" {
			dst.Set(h, v)
		}
	}
}

// RetryAfter is when an upstream's answer says to try again: its Retry-After-Ms (which OpenAI-compatible servers
// send and their SDKs read first), or else its Retry-After in seconds or as an HTTP date, counted from now; zero
// when it sends neither or they cannot be read.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	var d time.Duration
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil {
			d = time.Duration(ms * float64(time.Millisecond))
		}
	} else if v := h.Get("Retry-After"); v != "" {
		if s, err := strconv.ParseFloat(v, 64); err == nil {
			d = time.Duration(s * float64(time.Second))
		} else if at, err := http.ParseTime(v); err == nil {
			d = at.Sub(now)
		}
	}
	return max(d, 0)
}

// request builds the HTTP request of req, with the upstream's key from its Secret.
func (c *Client) request(ctx context.Context, req Request) (*http.Request, error) {
	t := req.Target
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL, req.Body)
	if err != nil {
		return nil, &Error{Kind: KindUnavailable, Err: fmt.Errorf("failed to build the upstream request of %s: %w", t.Name, err)}
	}
	hreq.ContentLength = req.ContentLength
	for h, vs := range req.Header {
		hreq.Header[h] = vs
	}
	if t.Secret != nil {
		if c.secrets == nil {
			return nil, &Error{Kind: KindCredentials, Err: errors.New("no Secret reader configured")}
		}
		if req.Dialect == nil {
			return nil, &Error{Kind: KindCredentials, Err: errors.New("no provider says how to send the key of " + t.Name)}
		}
		if s, ok := req.Dialect.(Signer); ok {
			data, err := c.secrets.UpstreamData(ctx, t.Namespace, t.Secret, t.URL)
			if err == nil {
				err = s.Sign(hreq, req.Payload, data)
			}
			if err != nil {
				return nil, &Error{Kind: KindCredentials, Err: err}
			}
			return hreq, nil
		}
		key, err := c.secrets.Upstream(ctx, t.Namespace, t.Secret, t.URL)
		if err != nil {
			return nil, &Error{Kind: KindCredentials, Err: err}
		}
		req.Dialect.Authorize(hreq.Header, key)
	}
	return hreq, nil
}

func isJSON(resp *http.Response) bool {
	ct := resp.Header.Get("Content-Type")
	return strings.HasPrefix(ct, "application/json") || strings.HasPrefix(ct, "application/problem+json")
}

func isEventStream(resp *http.Response) bool {
	return bytes.HasPrefix([]byte(resp.Header.Get("Content-Type")), []byte("text/event-stream"))
}

// deadline cancels an upstream call after timeout; reset pushes it back (once per streamed event).
type deadline struct {
	timer   *time.Timer
	timeout time.Duration
	fired   atomic.Bool
}

func newDeadline(timeout time.Duration, cancel context.CancelFunc) *deadline {
	d := &deadline{timeout: timeout}
	d.timer = time.AfterFunc(timeout, func() { d.fired.Store(true); cancel() })
	return d
}

func (d *deadline) reset() { d.timer.Reset(d.timeout) }

// capture passes a non-streamed answer on to its sink and keeps its first maxCapturedBody bytes, to read the
// usage from. Captures are pooled: an answer's copy then allocates nothing.
type capture struct {
	sink Sink
	kept []byte
}

var captures = sync.Pool{New: func() any { return &capture{kept: make([]byte, 0, 4<<10)} }}

// wholeAnswer is how much of a non-streamed answer is read before any of it is written: an answer up to this size
// reaches the sink in one write, which net/http sends in one write to the client up to its 4 KiB connection buffer
// and in two above it. Written as it arrived, an answer went out in a write per piece read from the upstream,
// and an answer the upstream chunked also ended in a write of the final chunk alone.
const wholeAnswer = 64 << 10

// maxPooledCapture bounds the buffer a pooled capture keeps; a rare large answer's is not held forever.
const maxPooledCapture = wholeAnswer

// relay passes an answer of status and body on to the sink: its first wholeAnswer bytes (all of an answer up to
// that size, with its length when the upstream sent it in chunks) in one write, the rest as it comes, and keeps
// it all up to maxCapturedBody.
func (c *capture) relay(status int, body io.Reader) (int64, error) {
	var err error
	for len(c.kept) < wholeAnswer && err == nil {
		if len(c.kept) == cap(c.kept) {
			c.kept = slices.Grow(c.kept, min(cap(c.kept), wholeAnswer-len(c.kept)))
		}
		var n int
		n, err = body.Read(c.kept[len(c.kept):min(cap(c.kept), wholeAnswer)])
		c.kept = c.kept[:len(c.kept)+n]
	}
	if err == io.EOF && c.sink.Header().Get("Content-Length") == "" {
		// Read whole: its length is known, and net/http then sends it without chunks' framing.
		c.sink.Header().Set("Content-Length", strconv.Itoa(len(c.kept)))
	}
	c.sink.WriteHeader(status)
	written := int64(len(c.kept))
	if written > 0 {
		if _, werr := c.sink.Write(c.kept); werr != nil {
			return written, werr
		}
	}
	if err == io.EOF {
		return written, nil
	}
	if err != nil {
		return written, err
	}
	n, err := copyAnswer(c, body)
	return written + n, err
}

func (c *capture) Write(b []byte) (int, error) {
	if room := maxCapturedBody - len(c.kept); room > 0 {
		c.kept = append(c.kept, b[:min(room, len(b))]...)
	}
	return c.sink.Write(b)
}

func (c *capture) release() {
	c.sink = nil
	if cap(c.kept) > maxPooledCapture {
		c.kept = make([]byte, 0, 4<<10)
	}
	captures.Put(c)
}
