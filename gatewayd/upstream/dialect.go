package upstream

import "net/http"

// Usage is the token counts an answer reports.
type Usage struct {
	PromptTokens     int64
	CompletionTokens int64
	TotalTokens      int64
}

// Total is what a TOKEN limit charges: prompt plus completion tokens, or the reported total when an upstream
// gives only that.
func (u Usage) Total() int64 {
	if n := u.PromptTokens + u.CompletionTokens; n > 0 {
		return n
	}
	return u.TotalTokens
}

// Dialect is what Forward needs to know of a provider's wire: how a call carries the upstream's key, and where an
// answer reports its usage. Each provider package (gatewayd/provider/...) has one; a call to a model deployment
// has none, and then carries no key and reads no usage.
type Dialect interface {
	// Authorize puts the upstream's key on the call's headers.
	Authorize(h http.Header, key string)
	// AnswerUsage reads the usage of a whole (non-streamed) answer.
	AnswerUsage(body []byte) (Usage, bool)
	// EventUsage reads one server-sent event of a streamed answer: the usage it reports, if it reports one, and
	// whether the event goes on to the client (a usage event the client did not ask for does not).
	EventUsage(event []byte, clientWantsUsage bool) (u Usage, found, keep bool)
}
