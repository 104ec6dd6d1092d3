package gemini

import (
	"bytes"
	"testing"

	"github.com/modelgate/modelgate/gatewayd/provider"
	"github.com/modelgate/modelgate/gatewayd/provider/providertest"
)

// BenchmarkTranslation is the cost per call of the GEMINI translation (docs/benchmarks.md): the request of
// testdata/tools.request.json, the answer of testdata/text.answer.json, and the three-event stream of
// testdata/text.stream.sse with its usage chunk.
func BenchmarkTranslation(b *testing.B) {
	request, answer, stream := providertest.Read(b, "tools.request.json"), providertest.Read(b, "text.answer.json"), providertest.Read(b, "text.stream.sse")
	b.Run("request", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := (Provider{}).Request(target, provider.Call{Route: "/chat/completions", Body: request}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("answer", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := testTranslation(false).Answer(answer); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stream", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := testTranslation(false).Stream(bytes.NewReader(stream), func([]byte) error { return nil }, true); err != nil {
				b.Fatal(err)
			}
		}
	})
}
