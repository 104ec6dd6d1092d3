// Package anthropic is the ANTHROPIC provider: Anthropic's Messages API (docs/routing.md "Providers"). Request
// translates the client's OpenAI chat body into a Messages request (request.go), and the Translation of each try
// turns the answer, its errors and its server-sent events back into OpenAI's (answer.go, stream.go). The key goes
// in x-api-key, beside anthropic-version: 2023-06-01. Usage is Anthropic's own: input tokens, cache writes and
// cache reads all count as prompt tokens.
package anthropic

import (
	"encoding/json"
	"net/http"

	"github.com/modelgate/modelgate/gatewayd/provider"
	"github.com/modelgate/modelgate/gatewayd/upstream"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// Kind is the provider name an Endpoint target gives.
const Kind = "ANTHROPIC"

// Version is the anthropic-version header every call sends.
const Version = "2023-06-01"

func init() { provider.Register(Kind, Provider{}) }

// Provider is the ANTHROPIC provider. It has no state.
type Provider struct{}

// Request is {baseURL}/messages with the client's OpenAI chat body translated into a Messages request. Only the
// chat route is served.
func (Provider) Request(t *view.Target, call provider.Call) (string, []byte, error) {
	if call.Route != "/chat/completions" {
		return "", nil, &provider.Unsupported{Provider: Kind, Route: call.Route}
	}
	body, err := TranslateRequest(call.Body, t.TargetModel)
	if err != nil {
		return "", nil, err
	}
	return t.BaseURL + "/messages", body, nil
}

// Authorize sends the key in x-api-key.
func (Provider) Authorize(h http.Header, key string) { h.Set("X-Api-Key", key) }

// Headers adds anthropic-version to the headers of every try, with a key or without.
func (Provider) Headers(h http.Header) http.Header {
	out := h.Clone()
	out.Set("Anthropic-Version", Version)
	return out
}

// Translation of one try's answer.
func (Provider) Translation(_ *view.Target, _ provider.Call) upstream.Translation {
	return translation{}
}

// AnswerUsage reads the usage of a whole Messages answer.
func (Provider) AnswerUsage(body []byte) (upstream.Usage, bool) {
	var m struct{ Usage *usage }
	if json.Unmarshal(body, &m) != nil || m.Usage == nil {
		return upstream.Usage{}, false
	}
	return m.Usage.of(), true
}

// EventUsage reads the usage of a message_start or message_delta event; Anthropic's events never go to a
// client as they are (the Translation rewrites them), so keep is true.
func (Provider) EventUsage(event []byte, _ bool) (upstream.Usage, bool, bool) {
	var e streamEvent
	if json.Unmarshal(upstream.EventData(event), &e) != nil {
		return upstream.Usage{}, false, true
	}
	switch {
	case e.Message != nil:
		return e.Message.Usage.of(), true, true
	case e.Usage != nil:
		return e.Usage.of(), true, true
	}
	return upstream.Usage{}, false, true
}

// usage is a Messages answer's usage.
type usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

// of is the usage as gatewayd counts it: cache writes and reads are input, no count negative.
func (u *usage) of() upstream.Usage {
	in := max(u.InputTokens, 0) + max(u.CacheCreationInputTokens, 0) + max(u.CacheReadInputTokens, 0)
	out := max(u.OutputTokens, 0)
	return upstream.Usage{PromptTokens: in, CompletionTokens: out, TotalTokens: in + out}
}
