package browser

import (
	"context"
	"testing"
	"time"

	"github.com/modelgate/modelgate/api/tracing"
	"github.com/modelgate/modelgate/gatewayd"
	"github.com/modelgate/modelgate/test/jaegertest"
)

// TestJaegerTraceInChromium: jaeger.mjs routes a slug to a refusing target ahead of the demo upstream, calls it
// under a traceparent of its own, and opens that call's trace in Jaeger's web UI, served by the real Jaeger that
// gatewayd traces into: the page shows the server span and one client span per try, the refused try's outcome
// among its tags. Its screenshot, jaeger-trace.png, is docs/jaeger-trace.png (README "Traces, GenAI metrics and
// alerts").
//
// The UI's assets are a JavaScript build of jaeger-ui's source, which hack/jaeger-ui.sh clones from GitHub (make
// jaeger-ui); without them, as on CI, whose network reaches only the package registries, the test is skipped.
// The trace itself is checked in make test through Jaeger's query API (gatewayd's TestTraces).
//
//	make jaeger-ui && KUBEBUILDER_ASSETS=$HOME/.cache/modelgate/envtest/v1.37.1 go test ./test/browser/ -count=1 -v -run TestJaegerTraceInChromium
func TestJaegerTraceInChromium(t *testing.T) {
	assets := jaegertest.UIAssets()
	if assets == "" {
		t.Skip("Jaeger's web UI is not built: make jaeger-ui (hack/jaeger-ui.sh) builds it from jaeger-ui's source on GitHub")
	}
	bin, err := jaegertest.Binary()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	j, err := jaegertest.Start(ctx, bin, t.TempDir(), jaegertest.Options{UIAssets: assets})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(j.Stop)
	tr, err := tracing.New(ctx, tracing.Config{Exporter: tracing.ExporterOTLP, Protocol: tracing.ProtocolGRPC,
		Endpoint: j.OTLPGRPC, Sampler: "always_on", Service: "gatewayd"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		flush, stop := context.WithTimeout(context.Background(), 5*time.Second)
		defer stop()
		_ = tr.Shutdown(flush)
	})
	b := startBrowserStackWith(t, "browser-jaeger", gatewayd.Options{Tracer: tr})
	b.run(t, "jaeger.mjs", "JAEGER_URL="+j.UI, "UPSTREAM_URL="+b.s.UpstreamURL)
}
