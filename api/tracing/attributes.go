package tracing

// The attributes of modelgate's spans: the OpenTelemetry GenAI semantic conventions where they have a name, and
// modelgate.* for the rest (docs/operations.md "Traces"). None holds a key, a secret, a header value or a prompt
// (docs/security.md "Traces").
const (
	OperationName = "gen_ai.operation.name"
	ProviderName  = "gen_ai.provider.name"
	RequestModel  = "gen_ai.request.model"
	ResponseModel = "gen_ai.response.model"
	InputTokens   = "gen_ai.usage.input_tokens"
	OutputTokens  = "gen_ai.usage.output_tokens"

	// Workspace is the call's workspace namespace.
	Workspace = "modelgate.workspace"
	// Group is the external id of the calling key's group (a federated key's).
	Group = "modelgate.group.external_id"
	// KeyPrefix is the 16-character prefix of the calling key: the part a key's owner sees listed, never the key.
	KeyPrefix = "modelgate.key.prefix"
	// LimitBy, LimitType, LimitUnit and LimitSource name the limit that refused the call with 429, as the throttle
	// rollup does: who set it (GROUP_LIMIT, MODEL_API_TIER), REQUEST or TOKEN, SECOND, MINUTE or DAY, and the group that set it.
	LimitBy     = "modelgate.limit.by"
	LimitType   = "modelgate.limit.type"
	LimitUnit   = "modelgate.limit.unit"
	LimitSource = "modelgate.limit.source_group"
	// RequestID is gatewayd's id of the call (the X-Request-Id of the answer and the billing event).
	RequestID = "modelgate.request_id"
	// Target, Outcome and Attempt are a try's: the Endpoint target's name, how the try ended as the routing rules
	// judge it (docs/routing.md; the outcome label of modelgate_upstream_target_tries_total), and which try it
	// was, from 1.
	Target  = "modelgate.target"
	Outcome = "modelgate.try.outcome"
	Attempt = "modelgate.try.attempt"
	// Attempts is how many tries a call made.
	Attempts = "modelgate.tries"
	// AsyncRequest is an async request's id; Deployment its model deployment.
	AsyncRequest = "modelgate.async.request_id"
	Deployment   = "modelgate.deployment"
)

// GenAI operation names (gen_ai.operation.name).
const (
	OpChat           = "chat"
	OpTextCompletion = "text_completion"
	OpEmbeddings     = "embeddings"
)

// Operation is the gen_ai.operation.name of an OpenAI route suffix ("/chat/completions", "/completions",
// "/embeddings").
func Operation(route string) string {
	switch route {
	case "/completions":
		return OpTextCompletion
	case "/embeddings":
		return OpEmbeddings
	}
	return OpChat
}
