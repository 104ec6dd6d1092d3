// Package openai is OpenAI's wire: the request members gatewayd acts on (ParseRequest, which every OpenAI route
// reads), and the OPENAI provider, an OpenAI-compatible upstream (vLLM, TGI, OpenAI itself): the try's body
// (RewriteBody: the target's model, usage asked of a stream), the "Authorization: Bearer" key, and the usage of
// its answers and of its stream's final usage chunk (usageOf).
package openai

import (
	"bytes"
	"net/http"

	"github.com/modelgate/modelgate/gatewayd/provider"
	"github.com/modelgate/modelgate/gatewayd/upstream"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// Kind is the provider name an Endpoint target gives.
const Kind = "OPENAI"

func init() { provider.Register(Kind, Provider{}) }

// Provider is the OPENAI provider. It has no state.
type Provider struct{}

// Request is the target's base URL followed by the client's route, and the client's body with the target's model.
func (Provider) Request(t *view.Target, call provider.Call) (string, []byte, error) {
	body, err := RewriteBody(call.Body, t.TargetModel, call.Stream)
	if err != nil {
		return "", nil, err
	}
	return t.BaseURL + call.Route, body, nil
}

// Authorize sends the key as a bearer token.
func (Provider) Authorize(h http.Header, key string) { h.Set("Authorization", "Bearer "+key) }

// AnswerUsage reads the usage object of a whole answer.
func (Provider) AnswerUsage(body []byte) (upstream.Usage, bool) {
	u, ok, _ := usageOf(body)
	return u, ok
}

var promptTokens = []byte(`"prompt_tokens"`)

// EventUsage reads the usage of a stream's final usage chunk (one with no choices), which goes on to the client
// only when it asked for it (stream_options.include_usage).
func (Provider) EventUsage(event []byte, clientWantsUsage bool) (upstream.Usage, bool, bool) {
	if !bytes.Contains(event, promptTokens) {
		return upstream.Usage{}, false, true
	}
	u, ok, noChoices := usageOf(upstream.EventData(event))
	if !ok {
		return upstream.Usage{}, false, true
	}
	return u, true, !noChoices || clientWantsUsage
}
