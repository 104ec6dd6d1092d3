package messages

import (
	"net/http/httptest"
	"testing"

	"github.com/modelgate/modelgate/gatewayd/provider/providertest"
)

// BenchmarkTranslation is the cost the /v1/messages client API adds to one call (docs/benchmarks.md
// "Providers"): the request into OpenAI's body, the answer back, and a stream of nine OpenAI chunks rewritten into
// Messages' events.
func BenchmarkTranslation(b *testing.B) {
	req := providertest.Read(b, "basic.anthropic.json")
	answer := providertest.Read(b, "answer.openai.json")
	stream := providertest.Read(b, "stream.openai.sse")
	b.Run("request", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := Request(req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("answer", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Answer(answer); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stream", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			w := NewWriter(httptest.NewRecorder())
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
			if _, err := w.Write(stream); err != nil {
				b.Fatal(err)
			}
			w.Finish()
		}
	})
}
