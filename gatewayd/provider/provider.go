// Package provider is the seam between a client's call and the upstreams of the kinds an Endpoint target names
// (docs/routing.md "Providers"). Each kind is one package below this one that implements Provider: how the try's
// request is built (its URL and body) and authenticated, and where its answer, stream included, reports usage.
// gatewayd/failover asks For the target's kind before each try; nothing else on the request path knows a
// provider's wire.
package provider

import (
	"fmt"
	"net/http"

	"github.com/modelgate/modelgate/gatewayd/upstream"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// Call is one client call in OpenAI's shape, which every provider builds its upstream request from.
type Call struct {
	// Route is the OpenAI route after /v1: "/chat/completions", "/completions" or "/embeddings".
	Route string
	// Body is the client's body, already checked (gatewayd/provider/openai.ParseRequest).
	Body []byte
	// Stream: the client asked for a streamed answer.
	Stream bool
}

// Provider is one kind of upstream.
type Provider interface {
	upstream.Dialect
	// Request is the URL and body of call's try on t. The body may be call.Body itself: it is only read.
	Request(t *view.Target, call Call) (url string, body []byte, err error)
}

// Translator is a Provider that speaks another wire than OpenAI's: Request translates the OpenAI body of the call
// into the provider's request (its streaming URL when call.Stream), and the Translation of each try turns the
// provider's answer back into OpenAI's (docs/decisions.md "OpenAI's shape inside gatewayd"). A field the
// provider cannot take is refused by Request with a *Refused, never dropped. Fixed headers a provider needs
// beside the client's are added by a Headers.
type Translator interface {
	Provider
	// Translation of one try's answer on t; call says whether it streams.
	Translation(t *view.Target, call Call) upstream.Translation
}

// Headers is a Translator that sends fixed headers of its own beside the client's (anthropic-version, say),
// with a key or without one.
type Headers interface {
	// Headers returns the headers of a try: a copy of h with the provider's own; h is not changed.
	Headers(h http.Header) http.Header
}

// TargetDialect is a Provider whose Dialect depends on the target: BEDROCK signs each call for its target's
// region. failover sends a try with the Dialect it gives, and with the Provider itself otherwise.
type TargetDialect interface {
	Dialect(t *view.Target) upstream.Dialect
}

// Refused is a member of the client's body that a provider cannot take: the client's 400 names the member
// and the provider.
type Refused struct {
	Provider, Field, Reason string
}

func (e *Refused) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("%s: the %s provider does not take this field", e.Field, e.Provider)
	}
	return fmt.Sprintf("%s: %s (provider %s)", e.Field, e.Reason, e.Provider)
}

// Unsupported is a call a provider cannot serve: the client's 400 names the provider and the route.
type Unsupported struct {
	Provider, Route string
}

func (e *Unsupported) Error() string {
	return fmt.Sprintf("provider %s does not serve %s", e.Provider, e.Route)
}

// kinds are the providers, by the name a target gives.
var kinds = map[string]Provider{}

// Register makes p the provider of kind; each provider package registers itself in an init.
func Register(kind string, p Provider) { kinds[kind] = p }

// For returns the provider of kind.
func For(kind string) (Provider, bool) {
	p, ok := kinds[kind]
	return p, ok
}
