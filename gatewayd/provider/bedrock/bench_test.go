package bedrock

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/modelgate/modelgate/gatewayd/provider"
	"github.com/modelgate/modelgate/gatewayd/provider/providertest"
)

// BenchmarkTranslation is the cost per call of the BEDROCK translation (docs/benchmarks.md): the request of
// testdata/tools.request.json, its SigV4 signature, the answer of testdata/text.answer.json, and the six-event
// stream of testdata/text.stream.jsonl with its usage chunk.
func BenchmarkTranslation(b *testing.B) {
	request, answer, stream := providertest.Read(b, "tools.request.json"), providertest.Read(b, "text.answer.json"), eventStream(b, providertest.Read(b, "text.stream.jsonl"))
	b.Run("request", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := (Provider{}).Request(target, provider.Call{Route: "/chat/completions", Body: request}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sign", func(b *testing.B) {
		secret := map[string][]byte{SecretAccessKeyID: []byte(sdkCreds.AccessKeyID), SecretSecretAccessKey: []byte(sdkCreds.SecretAccessKey),
			SecretSessionToken: []byte(sdkCreds.SessionToken)}
		s := Signer{Region: "us-east-1"}
		b.ReportAllocs()
		for b.Loop() {
			req, _ := http.NewRequest(http.MethodPost, target.BaseURL+"/model/m/converse", bytes.NewReader(request))
			req.Header.Set("Content-Type", "application/json")
			if err := s.Sign(req, request, secret); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("answer", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := testTranslation().Answer(answer); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stream", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := testTranslation().Stream(bytes.NewReader(stream), func([]byte) error { return nil }, true); err != nil {
				b.Fatal(err)
			}
		}
	})
}
