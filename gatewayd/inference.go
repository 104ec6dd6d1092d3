package gatewayd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/modelgate/modelgate/gatewayd/billing"
	"github.com/modelgate/modelgate/gatewayd/limits"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// codeLimitsUnavailable answers a limited call when the limit store cannot be reached (fail closed).
const codeLimitsUnavailable = "limits_unavailable"

// maxCapturedBody bounds how much of a non-streamed answer is kept to read its usage; the client gets all of it.
const maxCapturedBody = 16 << 20

// call is the bookkeeping of one inference call, for metrics.
type call struct {
	entity, model string
	status        int
}

// inference serves one OpenAI route: suffix is appended to the Endpoint's base URL.
func (g *Gateway) inference(suffix string) http.Handler {
	route := "/v1" + suffix
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		c := &call{}
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			code := strconv.Itoa(sw.code())
			g.metrics.requests.WithLabelValues(c.entity, c.model, code).Inc()
			g.metrics.requestDuration.WithLabelValues(route, code).Observe(time.Since(start).Seconds())
		}()
		g.serveInference(sw, r, suffix, c)
	})
}

func (g *Gateway) serveInference(w *statusWriter, r *http.Request, suffix string, c *call) {
	ctx := r.Context()
	log := logr.FromContextOrDiscard(ctx)
	v := g.loader.View()
	key := federatedKey(w, r, v)
	if key == nil {
		return
	}
	c.entity = key.Group.ExternalEntityID
	var u usage
	if g.billing != nil {
		w.Header().Set("X-Request-Id", billing.NewID("req_"))
		defer func() { g.recordBilling(key, c, w, u) }()
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.opts.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, codeTooLarge,
				fmt.Sprintf("Request body exceeds %d bytes.", g.opts.MaxBodyBytes), "")
			return
		}
		writeError(w, http.StatusBadRequest, codeClientError, "Failed to read the request body.", err.Error())
		return
	}
	var req inferenceRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, codeClientError, "The request body must be a JSON object.", err.Error())
		return
	}
	model := key.Group.Models[req.Model]
	if model == nil {
		writeError(w, http.StatusNotFound, codeModelDoesNotExist,
			"The model does not exist or this key may not call it.", "model: not in the key's group's models")
		return
	}
	c.model = model.Slug
	ns := v.Namespace(key.Group.Namespace)
	ep := ns.Endpoints[model.Slug]
	if ep == nil {
		writeError(w, http.StatusServiceUnavailable, codeModelNotReady, "No Endpoint routes this model yet.", "model: "+model.Slug)
		return
	}
	out, err := rewriteBody(body, ep.TargetModel, req.Stream)
	if err != nil {
		writeError(w, http.StatusBadRequest, codeClientError, "The request body must be a JSON object.", err.Error())
		return
	}
	if !g.admit(w, r, model) {
		return
	}
	// Whatever usage the upstream reported is charged, even when the relay to the client was cut short.
	u, _ = g.forward(w, r, key.Group.Namespace, ep, suffix, out, &req)
	if n := u.total(); n > 0 {
		if err := g.opts.Store.Settle(context.WithoutCancel(ctx), model.Plan, n, g.opts.Clock.Now()); err != nil {
			log.Error(err, "Failed to charge tokens", "group", key.Group.ID, "slug", model.Slug, "prefix", key.Prefix)
		}
	}
	g.metrics.tokens.WithLabelValues(c.entity, c.model, "input").Add(float64(u.PromptTokens))
	g.metrics.tokens.WithLabelValues(c.entity, c.model, "output").Add(float64(u.CompletionTokens))
}

// admit charges the REQUEST limits of the call, or writes the 429 of the first limit hit.
func (g *Gateway) admit(w http.ResponseWriter, r *http.Request, m *view.Model) bool {
	if m.Plan.Empty() {
		return true
	}
	res, err := g.opts.Store.Admit(r.Context(), m.Plan, g.opts.Clock.Now())
	if err != nil {
		logr.FromContextOrDiscard(r.Context()).Error(err, "Failed to check limits", "slug", m.Slug)
		writeError(w, http.StatusServiceUnavailable, codeLimitsUnavailable, "Limits could not be checked; retry shortly.", "")
		return false
	}
	if res.Allowed {
		return true
	}
	l := m.Plan.Limits[res.Hit]
	code, kind := codeRateLimited, "Rate limit"
	if l.Key.Unit == limits.Day {
		code, kind = codeUsageLimitExceeded, "Usage limit"
	}
	w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Max(1, math.Ceil(res.RetryAfter.Seconds()))), 10))
	writeError(w, http.StatusTooManyRequests, code,
		fmt.Sprintf("%s exceeded: %d %s per %s on model %s, set by group %s.", kind, l.Threshold, l.Key.Type, l.Key.Unit, m.Slug, l.SourceGroup),
		limitDetail{Slug: m.Slug, Type: l.Key.Type.String(), Unit: l.Key.Unit.String(), Threshold: l.Threshold, SourceGroup: l.SourceGroup})
	return false
}

// recordBilling queues the billing event of one call; it goes to the webhook outbox when the workspace names
// a billing webhook.
func (g *Gateway) recordBilling(key *view.Key, c *call, w *statusWriter, u usage) {
	ns := key.Group.Namespace
	n := g.loader.View().Namespace(ns)
	reqID := w.Header().Get("X-Request-Id")
	g.billing.Record(billing.Record{
		Namespace: ns,
		Deliver:   n != nil && n.Snapshot != nil && n.Snapshot.Workspace.BillingWebhook != nil,
		Event: billing.Event{
			IdempotencyKey: "evt_" + strings.TrimPrefix(reqID, "req_"), Timestamp: g.opts.Clock.Now().UTC(),
			RequestID: reqID, ModelSlug: c.model, ExternalEntityID: key.Group.ExternalEntityID, GroupID: key.Group.ID,
			APIKeyPrefix: key.Prefix, StatusCode: w.code(),
			Tokens: billing.Tokens{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens},
		},
	})
}

// billingCaller authenticates GET /v1/gateway/events with a workspace key allowed to manage the gateway, as
// the other /v1/gateway routes do.
func (g *Gateway) billingCaller(r *http.Request) (string, bool, bool) {
	scheme, raw, _ := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !strings.EqualFold(scheme, "Bearer") && !strings.EqualFold(scheme, "Api-Key") {
		return "", false, false
	}
	ns, k, ok := directory{g.loader}.WorkspaceKey(strings.TrimSpace(raw))
	if !ok {
		return "", false, false
	}
	return ns, true, k.Type == "WORKSPACE_MANAGE_ALL" || (k.Type == "PERSONAL" && k.Owner != nil && k.Owner.Role == "ADMIN")
}

// billingTargets are the billing webhooks of the served workspaces, with their signing secrets read lazily.
func (g *Gateway) billingTargets() map[string]billing.Target {
	v := g.loader.View()
	out := map[string]billing.Target{}
	for _, name := range v.Namespaces() {
		n := v.Namespace(name)
		if n == nil || n.Snapshot == nil || n.Snapshot.Workspace.BillingWebhook == nil {
			continue
		}
		hook := n.Snapshot.Workspace.BillingWebhook
		ref := hook.Secret
		out[name] = billing.Target{URL: hook.URL, Secret: func(ctx context.Context) (string, error) {
			return g.secrets.get(ctx, name, &ref)
		}}
	}
	return out
}

type limitDetail struct {
	Slug        string `json:"slug"`
	Type        string `json:"type"`
	Unit        string `json:"unit"`
	Threshold   int64  `json:"threshold"`
	SourceGroup string `json:"source_group"`
}

// deadline cancels an upstream call after timeout; Reset pushes it back (once per streamed chunk).
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

func (g *Gateway) timeoutOf(ep *view.Endpoint) time.Duration {
	if ep.Timeout > 0 {
		return ep.Timeout
	}
	return g.opts.UpstreamTimeout
}

// upstreamRequest builds the call to ep with its key from the Secret.
func (g *Gateway) upstreamRequest(ctx context.Context, namespace string, ep *view.Endpoint, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.BaseURL+path, body)
	if err != nil {
		return nil, fmt.Errorf("failed to build the upstream request of %s: %w", ep.Slug, err)
	}
	if ep.Secret != nil {
		key, err := g.secrets.get(ctx, namespace, ep.Secret)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+key)
	}
	return req, nil
}

// do sends req and maps transport failures to model-call errors. It returns nil after writing the error.
func (g *Gateway) do(w http.ResponseWriter, r *http.Request, req *http.Request, d *deadline, slug string) *http.Response {
	resp, err := g.client.Do(req)
	if err == nil {
		return resp
	}
	log := logr.FromContextOrDiscard(r.Context())
	switch {
	case d.fired.Load():
		writeError(w, http.StatusGatewayTimeout, codeTimeout, "The model did not answer in time.", "timeout: "+d.timeout.String())
	case r.Context().Err() != nil:
		// The client left; nobody reads an answer. 499 in the metrics, as nginx records it.
		w.WriteHeader(499)
	default:
		log.Error(err, "Upstream unreachable", "slug", slug)
		writeError(w, http.StatusBadGateway, codeModelUnavailable, "The model is unavailable.", "upstream unreachable")
	}
	return nil
}

// forward sends body to the upstream and relays the answer. It returns the usage the upstream reported and
// whether the call succeeded.
func (g *Gateway) forward(w *statusWriter, r *http.Request, namespace string, ep *view.Endpoint, suffix string, body []byte, in *inferenceRequest) (usage, bool) {
	log := logr.FromContextOrDiscard(r.Context())
	// The upstream call lives in the client's context: a client that disconnects cancels it.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	d := newDeadline(g.timeoutOf(ep), cancel)
	defer d.timer.Stop()
	req, err := g.upstreamRequest(ctx, namespace, ep, suffix, bytes.NewReader(body))
	if err != nil {
		log.Error(err, "Failed to prepare the upstream call", "slug", ep.Slug)
		writeError(w, http.StatusBadGateway, codeModelUnavailable, "The model is unavailable.", "upstream credentials unavailable")
		return usage{}, false
	}
	req.Header.Set("Content-Type", "application/json")
	if a := r.Header.Get("Accept"); a != "" {
		req.Header.Set("Accept", a)
	}
	start := time.Now()
	resp := g.do(w, r, req, d, ep.Slug)
	if resp == nil {
		return usage{}, false
	}
	defer resp.Body.Close()
	defer func() { g.metrics.upstream.WithLabelValues(ep.Slug).Observe(time.Since(start).Seconds()) }()
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	if resp.StatusCode >= 400 {
		// Upstream errors pass through as they are: status and body.
		w.WriteHeader(resp.StatusCode)
		_, _ = copyAnswer(w, resp.Body)
		return usage{}, false
	}
	if in.Stream && isEventStream(resp) {
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Accel-Buffering", "no")
		w.WriteHeader(resp.StatusCode)
		w.Flush()
		return relayStream(w, resp.Body, d, in.wantsUsage())
	}
	// Non-streamed: the whole answer is bounded by the deadline set above.
	w.WriteHeader(resp.StatusCode)
	var captured bytes.Buffer
	_, err = copyAnswer(w, io.TeeReader(resp.Body, &limitedWriter{w: &captured, n: maxCapturedBody}))
	if err != nil {
		log.V(1).Info("Upstream answer cut short", "slug", ep.Slug, "reason", err.Error())
	}
	u, _, _ := usageOf(captured.Bytes())
	return u, err == nil
}

func isEventStream(resp *http.Response) bool {
	return bytes.HasPrefix([]byte(resp.Header.Get("Content-Type")), []byte("text/event-stream"))
}

// limitedWriter keeps at most n bytes and silently drops the rest.
type limitedWriter struct {
	w *bytes.Buffer
	n int
}

func (l *limitedWriter) Write(b []byte) (int, error) {
	if room := l.n - l.w.Len(); room > 0 {
		l.w.Write(b[:min(room, len(b))])
	}
	return len(b), nil
}

var (
	dataPrefix   = []byte("data:")
	promptTokens = []byte(`"prompt_tokens"`)
)

// relayStream copies an SSE stream event by event. Each event leaves as soon as it is complete, so nothing but
// the current event is buffered; events that arrived together leave in one write. It reads the usage from the
// final usage chunk and drops that chunk when the client did not ask for it. Each event pushes the deadline
// back: for streams the timeout bounds the gap between chunks, not the whole answer.
func relayStream(w *statusWriter, body io.Reader, d *deadline, clientWantsUsage bool) (usage, bool) {
	buf := streamBuffers.Get().(*streamBuffer)
	defer buf.release()
	br := buf.reader
	br.Reset(body)
	event := buf.event[:0]
	defer func() { buf.event = event }()
	var u usage
	unflushed := false
	// send passes the event on. It leaves it in the response buffer only while the next event is already
	// complete in hand, so events that arrived together leave in one write and none waits on the upstream.
	send := func() bool {
		if len(event) > 0 {
			d.reset()
			keep := true
			if bytes.Contains(event, promptTokens) {
				if got, ok, noChoices := usageOf(eventData(event)); ok {
					u = got
					keep = !noChoices || clientWantsUsage
				}
			}
			if keep {
				if _, err := w.Write(event); err != nil {
					return false
				}
				unflushed = true
			}
			event = event[:0]
		}
		if unflushed && !eventBuffered(br) {
			w.Flush()
			unflushed = false
		}
		return true
	}
	for {
		line, err := br.ReadSlice('\n')
		event = append(event, line...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == nil && len(bytes.TrimRight(line, "\r\n")) == 0 {
			if !send() {
				return u, false
			}
			continue
		}
		if err != nil {
			ok := send()
			return u, ok && errors.Is(err, io.EOF)
		}
	}
}

// eventBuffered reports whether br already holds a complete SSE event: a line followed by an empty line.
func eventBuffered(br *bufio.Reader) bool {
	b, _ := br.Peek(br.Buffered())
	return bytes.Contains(b, []byte("\n\n")) || bytes.Contains(b, []byte("\n\r\n"))
}

// copyBuffers and streamBuffers keep the relay buffers of finished calls for the next ones: allocating them per
// call cost about 15% of a plain call's CPU, most of it zeroing 32 KiB, and drove garbage collection.
var (
	copyBuffers   = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
	streamBuffers = sync.Pool{New: func() any { return &streamBuffer{reader: bufio.NewReaderSize(nil, 64<<10)} }}
)

// copyAnswer copies an upstream answer to the client through a pooled buffer.
func copyAnswer(dst io.Writer, src io.Reader) (int64, error) {
	b := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(b)
	return io.CopyBuffer(dst, src, *b)
}

// streamBuffer is relayStream's line reader and event buffer.
type streamBuffer struct {
	reader *bufio.Reader
	event  []byte
}

// maxPooledEvent bounds the event buffer a pooled streamBuffer keeps; a rare huge event is not held forever.
const maxPooledEvent = 64 << 10

func (b *streamBuffer) release() {
	b.reader.Reset(nil)
	if cap(b.event) > maxPooledEvent {
		b.event = nil
	}
	streamBuffers.Put(b)
}

// eventData joins the data lines of one SSE event.
func eventData(event []byte) []byte {
	var out []byte
	for line := range bytes.Lines(event) {
		if rest, ok := bytes.CutPrefix(line, dataPrefix); ok {
			out = append(out, bytes.TrimSpace(rest)...)
		}
	}
	return out
}

// statusWriter remembers the status written, for metrics, and passes flushes through.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	if code != 499 {
		s.ResponseWriter.WriteHeader(code)
	}
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusWriter) code() int {
	if s.status == 0 {
		return http.StatusOK
	}
	return s.status
}
