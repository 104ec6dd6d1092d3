// Package tracing sets up and holds the OpenTelemetry tracer of gatewayd and the manager (shared by both planes,
// as api/netguard is): the OTLP exporter (gRPC or HTTP), the sampler and the resource, from the standard OTEL_*
// environment variables (the chart's tracing values set them) or a Config. Tracing is off unless OTEL_TRACES_EXPORTER is otlp; then the Tracer is nil, and
// every method of a nil *Tracer does nothing and allocates nothing, so a call site costs one pointer check
// (docs/operations.md "Traces"). The W3C traceparent is the one propagation format, in both directions.
package tracing

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Exporters and protocols, as OTEL_TRACES_EXPORTER and OTEL_EXPORTER_OTLP_PROTOCOL name them.
const (
	ExporterOTLP = "otlp"
	ExporterNone = "none"
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// Config is what New sets up. Its zero value is tracing off.
type Config struct {
	// Exporter is "otlp" for tracing on; "" or "none" for off.
	Exporter string
	// Protocol is "grpc" or "http/protobuf" (the default).
	Protocol string
	// Endpoint is the collector's base URL, as OTEL_EXPORTER_OTLP_ENDPOINT (http://host:4317 for gRPC,
	// http://host:4318 for HTTP, whose exporter appends /v1/traces). Empty: the exporter reads
	// OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_TRACES_ENDPOINT itself, or uses its default on localhost.
	Endpoint string
	// Sampler and SamplerArg are OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG: always_on, always_off,
	// traceidratio, parentbased_always_on (the default), parentbased_always_off, parentbased_traceidratio; the
	// ratio's argument is between 0 and 1 (1 when empty).
	Sampler, SamplerArg string
	// Service is service.name, unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES names another.
	Service string
}

// FromEnv is the Config the OTEL_* variables give a process whose service name is service by default. Only the
// trace variables are read here; the exporter reads its endpoint, headers, TLS and timeout variables itself.
func FromEnv(getenv func(string) string, service string) Config {
	c := Config{
		Exporter:   strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")),
		Protocol:   strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")),
		Sampler:    strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER")),
		SamplerArg: strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG")),
		Service:    service,
	}
	if c.Protocol == "" {
		c.Protocol = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		c.Exporter = ExporterNone
	}
	return c
}

// Tracer starts the spans of one process. A nil *Tracer is tracing off.
type Tracer struct {
	tracer   trace.Tracer
	provider *sdktrace.TracerProvider
}

// propagator reads and writes the W3C traceparent (and tracestate) headers.
var propagator = propagation.TraceContext{}

// off is the span every Start of a nil Tracer returns: it records nothing, and is held as an interface already,
// so returning it allocates nothing.
var off trace.Span = noop.Span{}

// New sets up tracing as cfg says: nil when it is off. Shutdown flushes what is left.
func New(ctx context.Context, cfg Config) (*Tracer, error) {
	switch strings.ToLower(cfg.Exporter) {
	case "", ExporterNone:
		return nil, nil
	case ExporterOTLP:
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER %q is not supported: use otlp, or none for no traces", cfg.Exporter)
	}
	sampler, err := Sampler(cfg.Sampler, cfg.SamplerArg)
	if err != nil {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	switch strings.ToLower(cfg.Protocol) {
	case ProtocolGRPC:
		var opts []otlptracegrpc.Option
		if cfg.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(cfg.Endpoint))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	case "", ProtocolHTTP:
		var opts []otlptracehttp.Option
		if cfg.Endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimSuffix(cfg.Endpoint, "/")+"/v1/traces"))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q is not supported: use grpc or http/protobuf", cfg.Protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("failed to set up the OTLP trace exporter: %w", err)
	}
	// The service name given first, so OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override it.
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", cfg.Service)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("failed to describe the traced process: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithSampler(sampler), sdktrace.WithResource(res),
		sdktrace.WithIDGenerator(ids{}))
	return &Tracer{tracer: tp.Tracer("github.com/modelgate/modelgate"), provider: tp}, nil
}

// ids draws trace and span ids from math/rand/v2's per-thread generator. The SDK's default draws them under one
// mutex, which every call of a busy gatewayd then waits on, sampled or not. Ids need to be unique, not secret.
type ids struct{}

func (ids) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	var t trace.TraceID
	binary.LittleEndian.PutUint64(t[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(t[8:], rand.Uint64())
	return t, ids{}.NewSpanID(ctx, t)
}

func (ids) NewSpanID(context.Context, trace.TraceID) trace.SpanID {
	var s trace.SpanID
	for s == (trace.SpanID{}) {
		binary.LittleEndian.PutUint64(s[:], rand.Uint64())
	}
	return s
}

// Sampler is the sampler OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG name; parentbased_always_on when name
// is empty.
func Sampler(name, arg string) (sdktrace.Sampler, error) {
	ratio := func() (float64, error) {
		if arg == "" {
			return 1, nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return 0, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG %q must be a ratio between 0 and 1", arg)
		}
		return r, nil
	}
	switch strings.ToLower(name) {
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		r, err := ratio()
		return sdktrace.TraceIDRatioBased(r), err
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "parentbased_traceidratio":
		r, err := ratio()
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), err
	}
	return nil, fmt.Errorf("OTEL_TRACES_SAMPLER %q is not supported: use always_on, always_off, traceidratio or their parentbased_ forms", name)
}

// Idle is a span that records nothing, for a call site with nothing to trace.
func Idle() trace.Span { return off }

// On reports whether t traces.
func (t *Tracer) On() bool { return t != nil }

// Start starts a span of kind under ctx's span. With tracing off it returns ctx and a span that records nothing.
func (t *Tracer) Start(ctx context.Context, name string, kind trace.SpanKind, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if t == nil {
		return ctx, off
	}
	if len(opts) == 0 {
		return t.tracer.Start(ctx, name, kindOnly(kind)...)
	}
	return t.tracer.Start(ctx, name, append(opts, trace.WithSpanKind(kind))...)
}

// kindOptions hold, for each span kind, the start options of a span with no other: made once, so that the span
// every model call starts, sampled or not, costs no allocation to describe.
var kindOptions = func() (o [trace.SpanKindConsumer + 1][]trace.SpanStartOption) {
	for k := range o {
		o[k] = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKind(k))}
	}
	return o
}()

// kindOnly is the start options of a span of kind and nothing else.
func kindOnly(kind trace.SpanKind) []trace.SpanStartOption {
	if int(kind) < len(kindOptions) {
		return kindOptions[kind]
	}
	return []trace.SpanStartOption{trace.WithSpanKind(kind)}
}

// StartUnder starts a span of kind under ctx's span only when that span is sampled, and otherwise returns ctx and
// a span that records nothing: a child of an unsampled span is never sampled under the parent-based samplers
// (the default and the chart's), nor under traceidratio, which decides by the trace id the child shares, so
// skipping its start spares a call that is not traced the SDK's work. A traceparent injected from the returned
// context still carries the trace and its unsampled flag.
func (t *Tracer) StartUnder(ctx context.Context, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	if t == nil || !trace.SpanContextFromContext(ctx).IsSampled() {
		return ctx, off
	}
	return t.tracer.Start(ctx, name, kindOnly(kind)...)
}

// Extract is ctx with the remote span that h's traceparent names as its parent; ctx when h names none or
// tracing is off.
func (t *Tracer) Extract(ctx context.Context, h http.Header) context.Context {
	if t == nil {
		return ctx
	}
	return propagator.Extract(ctx, headerCarrier(h))
}

// Inject writes ctx's span into h as a traceparent, so the next hop's spans join the trace; nothing when
// tracing is off.
func (t *Tracer) Inject(ctx context.Context, h http.Header) {
	if t == nil {
		return
	}
	propagator.Inject(ctx, headerCarrier(h))
}

// headerCarrier is an http.Header as the propagator's carrier. propagation.HeaderCarrier canonicalizes the
// propagator's lower-case names on every Get and Set, an allocation each; this one knows the canonical form of the
// W3C headers, so extracting from a call that carries no traceparent allocates nothing.
type headerCarrier http.Header

// canonicalKey is the header name under which http.Header keeps the propagator's key k.
func canonicalKey(k string) string {
	switch k {
	case "traceparent":
		return "Traceparent"
	case "tracestate":
		return "Tracestate"
	}
	return http.CanonicalHeaderKey(k)
}

func (c headerCarrier) Get(k string) string {
	if v := c[canonicalKey(k)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c headerCarrier) Set(k, v string) { c[canonicalKey(k)] = []string{v} }

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// TraceParent is ctx's span as a traceparent value, for a span continued later (an async request's dispatch);
// "" when tracing is off or ctx has no span.
func (t *Tracer) TraceParent(ctx context.Context) string {
	if t == nil {
		return ""
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c["traceparent"]
}

// FromTraceParent is ctx under the span a TraceParent value names; ctx when tp is empty or tracing is off.
func (t *Tracer) FromTraceParent(ctx context.Context, tp string) context.Context {
	if t == nil || tp == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": tp})
}

// Flush exports the spans ended so far.
func (t *Tracer) Flush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.ForceFlush(ctx)
}

// Shutdown exports the spans still buffered and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if err := t.provider.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("failed to flush the last spans: %w", err)
	}
	return nil
}

// Fail marks span as failed with a short reason (never a body, a header or a key).
func Fail(span trace.Span, reason string) {
	span.SetStatus(codes.Error, reason)
}
