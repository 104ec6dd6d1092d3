// Package gemini is the GEMINI provider: Google's Gemini API (generativelanguage.googleapis.com/v1beta). It
// translates an OpenAI chat body into a generateContent body (request.go), and the answer, whole or streamed
// as server-sent events, back into OpenAI's chat answer and chunks (answer.go), with the usage of Gemini's
// usageMetadata; embeddings go to batchEmbedContents (embed.go). The key travels in the x-goog-api-key header.
// docs/rest-api.md "Provider field mapping" lists how each client member is mapped or refused.
package gemini

import (
	"net/http"
	"net/url"
	"time"

	json "github.com/go-json-experiment/json"

	"github.com/modelgate/modelgate/api/ids"
	"github.com/modelgate/modelgate/gatewayd/provider"
	"github.com/modelgate/modelgate/gatewayd/provider/openai"
	"github.com/modelgate/modelgate/gatewayd/upstream"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// Kind is the provider name an Endpoint target gives.
const Kind = "GEMINI"

func init() { provider.Register(Kind, Provider{}) }

// Provider is the GEMINI provider. It has no state.
type Provider struct{}

// Request is the URL and generateContent (or batchEmbedContents) body of call's try on t:
// {baseURL}/models/{model}:generateContent, :streamGenerateContent?alt=sse for a stream, :batchEmbedContents for
// embeddings. The model is the target's, or else the client's.
func (Provider) Request(t *view.Target, call provider.Call) (string, []byte, error) {
	model := openai.ModelOf(t, call.Body)
	base := t.BaseURL + "/models/" + url.PathEscape(model)
	switch call.Route {
	case "/chat/completions":
		body, err := translateRequest(call.Body)
		if err != nil {
			return "", nil, err
		}
		if call.Stream {
			return base + ":streamGenerateContent?alt=sse", body, nil
		}
		return base + ":generateContent", body, nil
	case "/embeddings":
		body, _, err := embedBody(call.Body, model)
		return base + ":batchEmbedContents", body, err
	}
	return "", nil, &provider.Unsupported{Provider: Kind, Route: call.Route}
}

// Translation translates the answer of call's try on t into OpenAI's.
func (Provider) Translation(t *view.Target, call provider.Call) upstream.Translation {
	tr := &translation{id: ids.New(ids.ChatCompletion), model: openai.ModelOf(t, call.Body), created: time.Now().Unix(), embed: call.Route == "/embeddings"}
	if tr.embed {
		var f struct {
			EncodingFormat string `json:"encoding_format"`
		}
		_ = json.Unmarshal(call.Body, &f)
		tr.base64 = f.EncodingFormat == "base64"
	}
	return tr
}

// Authorize sends the key in x-goog-api-key.
func (Provider) Authorize(h http.Header, key string) { h.Set("x-goog-api-key", key) }

// AnswerUsage reads the usageMetadata of a whole generateContent answer.
func (Provider) AnswerUsage(body []byte) (upstream.Usage, bool) {
	var r generateResponse
	if json.Unmarshal(body, &r) != nil || r.UsageMetadata == nil {
		return upstream.Usage{}, false
	}
	return r.UsageMetadata.usage(), true
}

// EventUsage reads the usageMetadata of one streamed event; its Translation, not the relay, passes events on.
func (p Provider) EventUsage(event []byte, _ bool) (upstream.Usage, bool, bool) {
	u, ok := p.AnswerUsage(upstream.EventData(event))
	return u, ok, true
}
