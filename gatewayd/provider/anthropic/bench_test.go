package anthropic

import (
	"bytes"
	"testing"

	"github.com/modelgate/modelgate/gatewayd/provider"
	"github.com/modelgate/modelgate/gatewayd/provider/providertest"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// BenchmarkTranslation is the cost the ANTHROPIC provider adds to one call (docs/benchmarks.md "Providers"):
// the request of a small chat body, a whole answer, and a stream of the documented example's events.
func BenchmarkTranslation(b *testing.B) {
	t := &view.Target{BaseURL: "http://127.0.0.1:1/v1", TargetModel: "claude-sonnet-4-5"}
	body := providertest.Read(b, "system.openai.json")
	answer := providertest.Read(b, "answer.anthropic.json")
	stream := providertest.Read(b, "stream.anthropic.sse")
	b.Run("request", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := (Provider{}).Request(t, provider.Call{Route: "/chat/completions", Body: body}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("answer", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := (translation{}).Answer(answer); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stream", func(b *testing.B) {
		b.ReportAllocs()
		emit := func([]byte) error { return nil }
		for b.Loop() {
			if _, err := (translation{}).Stream(bytes.NewReader(stream), emit, true); err != nil {
				b.Fatal(err)
			}
		}
	})
}
