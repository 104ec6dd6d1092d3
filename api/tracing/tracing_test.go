package tracing

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func TestFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, tc := range []struct {
		name string
		env  map[string]string
		want Config
	}{
		{"nothing set is off", nil, Config{Service: "gatewayd"}},
		{"otlp over grpc", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
			"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01"},
			Config{Exporter: "otlp", Protocol: "grpc", Sampler: "parentbased_traceidratio", SamplerArg: "0.01", Service: "gatewayd"}},
		{"the traces protocol wins", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, Config{Exporter: "otlp", Protocol: "http/protobuf", Service: "gatewayd"}},
		{"the SDK disabled", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"},
			Config{Exporter: "none", Service: "gatewayd"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := FromEnv(env(tc.env), "gatewayd"); got != tc.want {
				t.Errorf("FromEnv = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestNewRefuses(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Exporter: "zipkin"}, "OTEL_TRACES_EXPORTER"},
		{Config{Exporter: "otlp", Protocol: "thrift"}, "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{Config{Exporter: "otlp", Sampler: "sometimes"}, "OTEL_TRACES_SAMPLER"},
		{Config{Exporter: "otlp", Sampler: "traceidratio", SamplerArg: "2"}, "OTEL_TRACES_SAMPLER_ARG"},
	} {
		if _, err := New(context.Background(), tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	if tr, err := New(context.Background(), Config{Exporter: "none"}); tr != nil || err != nil {
		t.Errorf("New(none) = %v, %v; want tracing off", tr, err)
	}
}

// TestOffAllocatesNothing: with tracing off (a nil Tracer) a call site's Extract, Start, IsRecording, Inject and
// End allocate nothing (docs/operations.md "Traces").
func TestOffAllocatesNothing(t *testing.T) {
	var tr *Tracer
	h := http.Header{"Traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
	ctx := context.Background()
	n := testing.AllocsPerRun(100, func() {
		c, span := tr.Start(tr.Extract(ctx, h), "chat", trace.SpanKindServer)
		if span.IsRecording() {
			t.Fatal("a span of tracing off records")
		}
		tr.Inject(c, h)
		span.End()
	})
	if n != 0 {
		t.Errorf("tracing off allocates %v times per call, want 0", n)
	}
}

// TestUnsampledStartAllocations: with tracing on, the server span of a call that is not sampled costs the SDK's
// two allocations (the span that records nothing, and the context that carries it), none of this package's:
// the span's start options are made once per kind.
func TestUnsampledStartAllocations(t *testing.T) {
	tr, err := New(context.Background(), Config{Exporter: ExporterOTLP, Protocol: ProtocolHTTP, Endpoint: "http://127.0.0.1:1", Sampler: "always_off"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Shutdown(context.Background()) }()
	h := http.Header{}
	ctx := context.Background()
	n := testing.AllocsPerRun(100, func() {
		_, span := tr.Start(tr.Extract(ctx, h), "chat", trace.SpanKindServer)
		if span.IsRecording() {
			t.Fatal("an unsampled span records")
		}
		span.End()
	})
	if n > 2 {
		t.Errorf("an unsampled server span allocates %v times, want at most 2", n)
	}
}

// TestStartUnder: a child span starts under a sampled span only; under an unsampled one the context stays as it
// is, and a traceparent from it still names the trace, unsampled.
func TestStartUnder(t *testing.T) {
	for _, tc := range []struct {
		sampler   string
		recording bool
		flags     string
	}{{"always_on", true, "-01"}, {"always_off", false, "-00"}} {
		tr, err := New(context.Background(), Config{Exporter: ExporterOTLP, Protocol: ProtocolHTTP, Endpoint: "http://127.0.0.1:1", Sampler: tc.sampler})
		if err != nil {
			t.Fatal(err)
		}
		ctx, parent := tr.Start(context.Background(), "call", trace.SpanKindServer)
		child, span := tr.StartUnder(ctx, "try", trace.SpanKindClient)
		if span.IsRecording() != tc.recording || (!tc.recording && child != ctx) {
			t.Errorf("%s: the child records %v, want %v", tc.sampler, span.IsRecording(), tc.recording)
		}
		h := http.Header{}
		tr.Inject(child, h)
		if tp := h.Get("traceparent"); !strings.Contains(tp, parent.SpanContext().TraceID().String()) || !strings.HasSuffix(tp, tc.flags) {
			t.Errorf("%s: traceparent %q, want trace %s with flags %s", tc.sampler, tp, parent.SpanContext().TraceID(), tc.flags)
		}
		span.End()
		parent.End()
		_ = tr.Shutdown(context.Background())
	}
}

// TestHeaderRoundTrip: Inject writes the traceparent under http.Header's canonical name, where any server reads it,
// and Extract takes the parent back from a header a client wrote in either case.
func TestHeaderRoundTrip(t *testing.T) {
	tr, err := New(context.Background(), Config{Exporter: ExporterOTLP, Protocol: ProtocolHTTP, Endpoint: "http://127.0.0.1:1", Sampler: "always_off"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Shutdown(context.Background()) }()
	ctx, span := tr.Start(context.Background(), "call", trace.SpanKindServer)
	defer span.End()
	h := http.Header{}
	tr.Inject(ctx, h)
	if got, want := h.Get("traceparent"), tr.TraceParent(ctx); got == "" || got != want || len(h["Traceparent"]) != 1 {
		t.Fatalf("injected header %v, want Traceparent %q", h, want)
	}
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for _, in := range []http.Header{{"Traceparent": {tp}}, func() http.Header { h := http.Header{}; h.Set("traceparent", tp); return h }()} {
		sc := trace.SpanContextFromContext(tr.Extract(context.Background(), in))
		if sc.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || sc.SpanID().String() != "b7ad6b7169203331" || !sc.IsRemote() {
			t.Errorf("extracted %+v from %v", sc, in)
		}
	}
}
