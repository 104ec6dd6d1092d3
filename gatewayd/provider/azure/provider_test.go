package azure

import (
	"testing"

	"github.com/modelgate/modelgate/gatewayd/provider"
	"github.com/modelgate/modelgate/gatewayd/provider/openai"
	"github.com/modelgate/modelgate/gatewayd/view"
)

var body = []byte(`{"model":"chat/gpt","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello, world"}],"temperature":0.5}`)

// TestRequest: the deployment and api-version go in the URL, path- and query-escaped; the body is the OPENAI
// provider's; the deployment is the client's model when the target names none.
func TestRequest(t *testing.T) {
	for _, tc := range []struct {
		target, want string
	}{
		{"gpt-4o", "https://x.openai.azure.com/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21+x"},
		{"", "https://x.openai.azure.com/openai/deployments/chat%2Fgpt/chat/completions?api-version=2024-10-21+x"},
	} {
		url, out, err := Provider{}.Request(&view.Target{BaseURL: "https://x.openai.azure.com", TargetModel: tc.target, APIVersion: "2024-10-21 x"},
			provider.Call{Route: "/chat/completions", Body: body})
		if err != nil || url != tc.want {
			t.Errorf("%q: %s %v", tc.target, url, err)
		}
		want, _ := openai.RewriteBody(body, tc.target, false)
		if string(out) != string(want) {
			t.Errorf("%q: body %s", tc.target, out)
		}
	}
}

// BenchmarkRequest is the cost the AZURE_OPENAI provider adds to one call beside OPENAI's (docs/benchmarks.md
// "Providers"): its answers are relayed as OPENAI's are, so the request is all of it.
func BenchmarkRequest(b *testing.B) {
	for _, p := range []struct {
		name string
		p    provider.Provider
	}{{"AZURE_OPENAI", Provider{}}, {"OPENAI", openai.Provider{}}} {
		b.Run(p.name, func(b *testing.B) {
			t := &view.Target{BaseURL: "https://x.openai.azure.com", TargetModel: "gpt-4o", APIVersion: "2024-10-21"}
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := p.p.Request(t, provider.Call{Route: "/chat/completions", Body: body}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
