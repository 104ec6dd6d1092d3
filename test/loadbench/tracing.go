package loadbench

import (
	"context"
	"fmt"
	"os"

	"k8s.io/client-go/rest"

	"github.com/modelgate/modelgate/api/tracing"
	"github.com/modelgate/modelgate/test/jaegertest"
)

// tracedRatio is the chart's default sampler ratio, at which the traced gatewayd runs.
const tracedRatio = "0.01"

// startTraced runs Jaeger (hack/jaeger-binary.sh's build) on loopback and a gatewayd on an embedded state of its
// own that traces parentbased_traceidratio 0.01 of its calls into it over OTLP/gRPC. It fails, and the row prints
// as not run, when Jaeger is not built.
func startTraced(ctx context.Context, rc *rest.Config, ws *loadWorkspace) (*Target, func(), error) {
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
		Sampler: "parentbased_traceidratio", SamplerArg: tracedRatio, Service: "gatewayd-loadbench"})
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
			return t, func() {
				stop()
				st.close()
				_ = tr.Shutdown(context.WithoutCancel(ctx))
				j.Stop()
				_ = os.RemoveAll(dir)
			}, nil
		}
		st.close()
	}
	_ = tr.Shutdown(context.WithoutCancel(ctx))
	j.Stop()
	_ = os.RemoveAll(dir)
	return nil, nil, fmt.Errorf("traced gatewayd: %w", err)
}

// addTracing reports the throughput of the gatewayd tracing 1% of its calls against the untraced one of the same
// rounds (at is its index in the plain target list; err why it did not run).
func (r *Report) addTracing(cfg Config, rs *rounds, at int, err error) {
	figure := fmt.Sprintf("throughput tracing on at 1%% ÷ tracing off, concurrency %d", cfg.Concurrency)
	if err != nil {
		r.info(figure, "not run: "+err.Error())
		return
	}
	x := rs.bracketedRatio(at)
	r.add(figure, fmt.Sprintf("%.2f", x), "≥ 0.97", x >= 0.97)
	r.Notes = append(r.Notes, "Tracing: gatewayd, traced 1% = an in-process gatewayd on an embedded state of its own, tracing "+
		"parentbased_traceidratio "+tracedRatio+" of its calls over OTLP/gRPC into a real Jaeger (hack/jaeger-binary.sh) on "+
		"loopback; in each round it runs after the rotation between two runs of the untraced gatewayd, and its throughput is divided by the mean of theirs.")
}
