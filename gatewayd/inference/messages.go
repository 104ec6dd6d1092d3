package inference

import (
	"net/http"
	"strings"

	"github.com/modelgate/modelgate/api/tracing"
	"github.com/modelgate/modelgate/gatewayd/clientapi/messages"
)

// messagesRoute serves Anthropic's Messages API (docs/rest-api.md "Messages") through the same call path as
// /v1/chat/completions: authentication, limits, usage, billing, metrics and routing are serveOpenAI's. The body is
// translated into OpenAI's chat body once read, and the answer, errors included, is rewritten into Messages'
// shape by a messages.Writer. Anthropic's clients send the key in x-api-key or as a Bearer token: either is
// taken as the Api-Key scheme, which takes federated and workspace keys alike.
func (h *Handler) messagesRoute() http.Handler {
	const pattern = "/v1/messages"
	op := tracing.Operation("/chat/completions")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &call{fromClient: func(body []byte) ([]byte, error) {
			chat, _, err := messages.Request(body)
			return chat, err
		}}
		mw := messages.NewWriter(w)
		anthropicKey(r)
		// The call's server span and series are the OpenAI routes' (openAI): a chat call, under the client's
		// traceparent.
		h.serveCall(mw, r, pattern, op, "/chat/completions", c, mw.Finish)
	})
}

// anthropicKey moves the key of an Anthropic client into the Api-Key scheme: from x-api-key when no
// Authorization is sent, or from a Bearer token.
func anthropicKey(r *http.Request) {
	auth := strings.TrimSpace(r.Header.Get("Authorization"))
	if auth == "" {
		if k := strings.TrimSpace(r.Header.Get("X-Api-Key")); k != "" {
			r.Header.Set("Authorization", "Api-Key "+k)
		}
		return
	}
	if scheme, cred, ok := strings.Cut(auth, " "); ok && strings.EqualFold(scheme, "Bearer") {
		r.Header.Set("Authorization", "Api-Key "+strings.TrimSpace(cred))
	}
}
