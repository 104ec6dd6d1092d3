// Package failover owns the try loop: every route that calls an Endpoint hands its call to Caller.Call, which
// tries the Endpoint's targets by the rules of docs/routing.md until one answers. It asks gatewayd/tryplan for
// the order and each next target, gatewayd/provider for each target's request and wire, gatewayd/upstream to
// send it, and gatewayd/cooldown for each target's state, which it updates after each try. The caller charges
// limits, usage and billing once for the whole call, from the Result.
package failover

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/modelgate/modelgate/api/tracing"
	"github.com/modelgate/modelgate/gatewayd/cooldown"
	"github.com/modelgate/modelgate/gatewayd/provider"
	"github.com/modelgate/modelgate/gatewayd/tryplan"
	"github.com/modelgate/modelgate/gatewayd/upstream"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// Options configure a Caller.
type Options struct {
	Upstream *upstream.Client
	Cooldown *cooldown.Registry
	// Now is the clock of cooldowns; time.Now when nil.
	Now func() time.Time
	// Rand draws the weighted order of the targets; math/rand/v2's when nil.
	Rand tryplan.Rand
	// Tracer gives each try a client span and its traceparent; no spans when nil.
	Tracer *tracing.Tracer
}

// Caller runs the tries of Endpoint calls.
type Caller struct {
	up   *upstream.Client
	cool *cooldown.Registry
	now  func() time.Time
	rand tryplan.Rand
	tr   *tracing.Tracer
}

// New returns a Caller.
func New(opts Options) *Caller {
	c := &Caller{up: opts.Upstream, cool: opts.Cooldown, now: opts.Now, rand: opts.Rand, tr: opts.Tracer}
	if c.now == nil {
		c.now = time.Now
	}
	if c.rand == nil {
		c.rand = rand.IntN
	}
	return c
}

// Call is one client call of an Endpoint.
type Call struct {
	provider.Call
	// Namespace is the Endpoint's workspace.
	Namespace string
	Endpoint  *view.Endpoint
	// Header holds the headers every try sends (Content-Type, Accept, the request id).
	Header http.Header
	// StreamUsage: the client asked for a stream's usage chunk.
	StreamUsage bool
}

// Result is what a call did.
type Result struct {
	upstream.Result
	// Target is the target of the last try, which answered the client; nil when no try was made.
	Target *view.Target
	// Attempts is the number of tries made.
	Attempts int
}

// Call tries call's Endpoint until a try answers, and relays that answer into sink. A try fails on a refused or
// reset connection, a timeout before the answer's first byte, unreadable credentials, or a status of the
// Endpoint's retry.onStatus; then the next try goes to the target tryplan.Pick names, up to 1 + attempts tries.
// Nothing reaches sink from a failed try but the last: once a byte of an answer is written, no other try is made.
// The error is the last try's, as upstream.Client.Forward gives it (an *upstream.Error, nothing written), or a
// *provider.Unsupported when no target's provider serves the route.
func (c *Caller) Call(ctx context.Context, call *Call, sink upstream.Sink) (Result, error) {
	ep := call.Endpoint
	n := len(ep.Targets)
	var orderBuf [tryplan.MaxTargets]int
	order := tryplan.Order(ep.Plan, c.rand, &orderBuf)
	var stateBuf [tryplan.MaxTargets]tryplan.State
	state := stateBuf[:n]
	var healthBuf [tryplan.MaxTargets]*cooldown.Target
	health := healthBuf[:n]
	for i := range health {
		t := &ep.Targets[i]
		health[i] = c.cool.Target(cooldown.Name{Key: t.Key, Workspace: call.Namespace, Slug: ep.Slug, TargetName: t.Name})
	}
	policy := cooldown.Policy{Failures: ep.Policy.Failures, Duration: ep.Policy.Cooldown}
	tries := 1 + ep.Policy.Attempts
	var res Result
	var lastErr error
	for res.Attempts < tries {
		if n > 1 {
			now := c.now()
			for i := range state {
				state[i].Cooling = state[i].Tried >= excluded || health[i].Cooling(now)
			}
		}
		i := tryplan.Pick(order, state)
		if state[i].Tried >= excluded {
			// Every target left is one whose provider cannot serve the route.
			break
		}
		t := &ep.Targets[i]
		p, url, body, err := request(t, call.Call)
		if err != nil {
			if !unsupported(err) {
				return res, err
			}
			state[i].Tried = excluded
			if res.Attempts == 0 {
				lastErr = err
			}
			continue
		}
		res.Attempts++
		last := res.Attempts == tries
		req := upstream.Request{
			Target: upstream.Target{URL: url, Name: ep.Slug, Namespace: call.Namespace, Secret: t.Secret, Timeout: ep.Timeout},
			Body:   bytes.NewReader(body), ContentLength: int64(len(body)), Header: call.Header,
			Stream: call.Stream, StreamUsage: call.StreamUsage, Usage: true, Dialect: p, Payload: body,
		}
		if tr, ok := p.(provider.Translator); ok {
			req.Translation = tr.Translation(t, call.Call)
			if hs, ok := tr.(provider.Headers); ok {
				req.Header = hs.Headers(req.Header)
			}
		}
		if td, ok := p.(provider.TargetDialect); ok {
			req.Dialect = td.Dialect(t)
		}
		if !last {
			req.Fail = &ep.Policy.Fail
		}
		tryCtx, span := c.tr.StartUnder(ctx, "upstream try", trace.SpanKindClient)
		// The upstream's spans join the try's: a traceparent of this try on every try, sampled or not.
		// Into the try's own headers: a provider with headers of its own (provider.Headers) sends a copy of the call's.
		c.tr.Inject(tryCtx, req.Header)
		res.Result, err = c.up.Forward(tryCtx, req, sink)
		res.Target = t
		now := c.now()
		outcome, retryAfter := classify(ctx, res.Result, err, &ep.Policy.Fail, sink, now)
		health[i].Record(outcome, now, policy, retryAfter)
		if span.IsRecording() {
			endTry(span, call, t, url, res.Attempts, res.Result, err, outcome)
		}
		span.End()
		state[i].Tried++
		if !outcome.Failed() || last || err == nil {
			// An answer; or a failed try that wrote to the client (the last try, or an answer cut after its first
			// byte), which is the client's answer.
			return res, err
		}
		// A failed try that wrote nothing: on to the next.
		lastErr = err
	}
	if lastErr == nil {
		lastErr = errors.New("no target of the Endpoint could be tried")
	}
	return res, lastErr
}

// request is the provider, URL and body of call's try on t: a *provider.Unsupported when t's provider cannot
// serve the route (or is unknown to this gatewayd), a *BodyError when it cannot send the client's body.
func request(t *view.Target, call provider.Call) (provider.Provider, string, []byte, error) {
	p, ok := provider.For(t.Provider)
	if !ok {
		return nil, "", nil, &provider.Unsupported{Provider: t.Provider, Route: call.Route}
	}
	url, body, err := p.Request(t, call)
	if err != nil && !unsupported(err) {
		err = &BodyError{Err: err}
	}
	return p, url, body, err
}

// endTry writes what a try did on its span: the GenAI client attributes (docs/operations.md "Traces"), the target,
// and the outcome as the routing rules judge it. The URL's host only: never its path, query or a header.
func endTry(span trace.Span, call *Call, t *view.Target, rawURL string, attempt int, res upstream.Result, err error, outcome cooldown.Outcome) {
	op := tracing.Operation(call.Route)
	model := t.TargetModel
	if model == "" {
		model = call.Endpoint.Slug
	}
	span.SetName(op + " " + model)
	status := res.Status
	var ue *upstream.Error
	if errors.As(err, &ue) && ue.Status != 0 {
		status = ue.Status
	}
	attrs := []attribute.KeyValue{
		attribute.String(tracing.OperationName, op),
		attribute.String(tracing.ProviderName, t.Provider),
		attribute.String(tracing.RequestModel, model),
		attribute.String(tracing.Target, t.Name),
		attribute.String(tracing.Outcome, outcome.String()),
		attribute.Int(tracing.Attempt, attempt),
	}
	if u, perr := url.Parse(rawURL); perr == nil {
		attrs = append(attrs, attribute.String("server.address", u.Hostname()))
		if p, perr := strconv.Atoi(u.Port()); perr == nil {
			attrs = append(attrs, attribute.Int("server.port", p))
		}
	}
	if status != 0 {
		attrs = append(attrs, attribute.Int("http.response.status_code", status))
	}
	if outcome == cooldown.OK && err == nil {
		attrs = append(attrs, attribute.Int64(tracing.InputTokens, res.Usage.PromptTokens),
			attribute.Int64(tracing.OutputTokens, res.Usage.CompletionTokens))
	}
	span.SetAttributes(attrs...)
	if outcome.Failed() {
		attrs = append(attrs[:0], attribute.String("error.type", outcome.String()))
		span.SetAttributes(attrs...)
		tracing.Fail(span, "try failed: "+outcome.String())
	}
}

// unsupported reports whether err is a *provider.Unsupported.
func unsupported(err error) bool {
	var us *provider.Unsupported
	return errors.As(err, &us)
}

// excluded marks a target whose provider cannot serve the call: counted as cooling and tried more than any
// other, Pick puts it last.
const excluded = 1 << 30

// BodyError is a client body that a provider could not turn into its request: the client's 400.
type BodyError struct{ Err error }

func (e *BodyError) Error() string { return "the request body cannot be sent: " + e.Err.Error() }
func (e *BodyError) Unwrap() error { return e.Err }

// classify is how a try ended, and the Retry-After of an upstream 429 (zero when none).
func classify(ctx context.Context, res upstream.Result, err error, fail *tryplan.StatusSet, sink upstream.Sink, now time.Time) (cooldown.Outcome, time.Duration) {
	if err == nil {
		switch {
		case fail.Has(res.Status):
			return cooldown.Status, rateLimitedFor(res.Status, sink.Header(), now)
		case !res.Complete && ctx.Err() != nil:
			return cooldown.Canceled, 0
		case !res.Complete:
			// The answer broke off after its first byte: relayed in part, and the target's failure.
			return cooldown.Unreachable, 0
		}
		return cooldown.OK, 0
	}
	var ue *upstream.Error
	if !errors.As(err, &ue) {
		return cooldown.Unreachable, 0
	}
	switch ue.Kind {
	case upstream.KindStatus:
		if !fail.Has(ue.Status) {
			return cooldown.OK, 0
		}
		return cooldown.Status, rateLimitedFor(ue.Status, ue.Header, now)
	case upstream.KindTimeout:
		return cooldown.Timeout, 0
	case upstream.KindCredentials:
		return cooldown.Credentials, 0
	case upstream.KindCanceled:
		return cooldown.Canceled, 0
	}
	return cooldown.Unreachable, 0
}

// maxRetryAfter bounds how long an upstream's Retry-After keeps a target out.
const maxRetryAfter = time.Hour

// rateLimitedFor is how long an upstream's 429 keeps its target out (upstream.RetryAfter, at most an hour); zero for
// any other status.
func rateLimitedFor(status int, h http.Header, now time.Time) time.Duration {
	if status != http.StatusTooManyRequests {
		return 0
	}
	return min(upstream.RetryAfter(h, now), maxRetryAfter)
}
