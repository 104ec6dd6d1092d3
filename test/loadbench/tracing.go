package loadbench

import (
	"context"
	"fmt"
	"os"
	"slices"

	"k8s.io/client-go/rest"

	"github.com/modelgate/modelgate/api/tracing"
	"github.com/modelgate/modelgate/test/jaegertest"
)

// tracedRatio is the chart's default sampler ratio, at which the traced gatewayd runs.
const tracedRatio = "0.01"

// startTraced runs Jaeger (hack/jaeger-binary.sh's build) on loopback and a gatewayd on an embedded state of its
// own that traces parentbased_traceidratio 0.01 of its calls into it over OTLP/gRPC. It fails, and the row prints
// as not run, when Jaeger is not built.
func startTraced(ctx context.Context, rc *rest.Config, ws *loadWorkspace) (*Target, *traced, error) {
	bin, err := jaegertest.Binary()
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "loadbench-jaeger-")
	if err != nil {
		return nil, nil, err
	}
	j, err := jaegertest.Start(ctx, bin, dir, jaegertest.Options{})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	tr, err := tracing.New(ctx, tracing.Config{Exporter: tracing.ExporterOTLP, Protocol: tracing.ProtocolGRPC, Endpoint: j.OTLPGRPC,
		Sampler: "parentbased_traceidratio", SamplerArg: tracedRatio, Service: tracedService})
	if err != nil {
		j.Stop()
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	st, err := openEmbedded()
	if err == nil {
		var t *Target
		var stop func()
		if t, stop, err = startGatewayd(ctx, "gatewayd, traced 1%", rc, ws, st, tr); err == nil {
			return t, &traced{jaeger: j, tracer: tr, stop: func() {
				stop()
				st.close()
				_ = tr.Shutdown(context.WithoutCancel(ctx))
				j.Stop()
				_ = os.RemoveAll(dir)
			}}, nil
		}
		st.close()
	}
	_ = tr.Shutdown(context.WithoutCancel(ctx))
	j.Stop()
	_ = os.RemoveAll(dir)
	return nil, nil, fmt.Errorf("traced gatewayd: %w", err)
}

// traced is the traced gatewayd's Jaeger and tracer, and how to stop all three.
type traced struct {
	jaeger *jaegertest.Jaeger
	tracer *tracing.Tracer
	stop   func()
}

// received is how many traces of the traced gatewayd Jaeger holds, once the tracer has sent what it had: the
// proof that the traced runs traced, and that the backend kept up.
func (t *traced) received(ctx context.Context) (int, error) {
	if err := t.tracer.Flush(ctx); err != nil {
		return 0, err
	}
	traces, err := t.jaeger.Traces(tracedService, 50_000) // below the memory store's max_traces, as the query API asks
	return len(traces), err
}

// tracedService is the service name the traced gatewayd's spans carry.
const tracedService = "gatewayd-loadbench"

// addTracing reports the throughput of the gatewayd tracing 1% of its calls against the untraced one of the same
// rounds (at is its index in the plain target list; err why it did not run), and how many of its calls Jaeger
// holds traces of (received, or why that could not be read).
func (r *Report) addTracing(cfg Config, rs *rounds, at int, err error, received int, receivedErr error) {
	figure := fmt.Sprintf("throughput tracing on at 1%% ÷ tracing off, concurrency %d", cfg.Concurrency)
	if err != nil {
		r.info(figure, "not run: "+err.Error())
		return
	}
	r.addBracketed(rs, at, figure, 0.97)
	calls := 0
	for _, run := range slices.Concat(rs.latency[at], rs.throughput[at]) {
		calls += run.Requests
	}
	if receivedErr != nil {
		r.info("traces of the traced gatewayd in Jaeger", "not read: "+receivedErr.Error())
	} else {
		r.info("traces of the traced gatewayd in Jaeger", fmt.Sprintf("%d, for %d calls in the rounds, latency and throughput (%.2f%%; the warm-up's add a few)", received, calls, 100*float64(received)/float64(max(calls, 1))))
	}
	r.Notes = append(r.Notes, "Tracing: gatewayd, traced 1% = an in-process gatewayd on an embedded state of its own, tracing "+
		"parentbased_traceidratio "+tracedRatio+" of its calls over OTLP/gRPC into a real Jaeger (hack/jaeger-binary.sh) on "+
		"loopback; in each round it runs after the rotation at the same time as the untraced gatewayd, half the workers each, for twice a throughput run, and its throughput is divided by the untraced one's of that run.")
}
