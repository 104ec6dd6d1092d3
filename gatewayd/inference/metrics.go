package inference

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/modelgate/modelgate/gatewayd/upstream"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// WorkspaceLabel names the workspace (namespace) of a call on every per-call series, so two workspaces that use
// the same external id never add up in one series, and a workspace's own series can be told apart.
const WorkspaceLabel = "workspace"

// Metrics are the series of model calls. Label values come from the snapshot (external ids, slugs) or from small
// fixed sets (routes, status codes), never from what a caller sent, so a caller cannot blow up cardinality.
type Metrics struct {
	requests        *prometheus.CounterVec
	tokens          *prometheus.CounterVec
	cost            *prometheus.CounterVec
	requestDuration *prometheus.HistogramVec
	upstream        *prometheus.HistogramVec
	held            *prometheus.GaugeVec
	refusals        *prometheus.CounterVec
	genAI           genAI
}

// NewMetrics registers the series on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "service_model_api_inference_requests_total",
			Help: "Inference calls by workspace, the calling group's external id, model slug and HTTP status.",
		}, []string{WorkspaceLabel, "external_entity_id", "model", "status_code"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "service_model_api_tokens_total",
			Help: "Tokens reported by upstreams, by workspace, the calling group's external id, model slug and token type (input, output).",
		}, []string{WorkspaceLabel, "external_entity_id", "model", "token_type"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "service_model_api_cost_micro_usd_total",
			Help: "Cost of the tokens reported by upstreams at the answering target's prices, in micro-USD, by workspace, the calling group's external id, model slug and token type (input, output); a call's two parts add up to its billing event's costMicroUsd.",
		}, []string{WorkspaceLabel, "external_entity_id", "model", "token_type"}),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "modelgate_gateway_request_duration_seconds",
			Help:    "Time from a call's arrival to the end of its response, by route and HTTP status.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
		}, []string{"route", "status_code"}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "modelgate_gateway_upstream_duration_seconds",
			Help:    "Time an upstream took to answer (until its whole body), by workspace and model slug.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
		}, []string{WorkspaceLabel, "model"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "modelgate_gateway_limit_refusals_total",
			Help: "Calls refused with 429 by a limit, by workspace and which limit: group, modelAPILimits.requestsPerMinute or modelAPILimits.tokensPerMinute.",
		}, []string{WorkspaceLabel, "limit"}),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "modelgate_model_held_calls",
			Help: "Predict calls waiting for their deployment to have a ready address (scale from zero), by workspace and model.",
		}, []string{WorkspaceLabel, "model"}),
	}
	m.genAI = newGenAI()
	for _, c := range []prometheus.Collector{m.requests, m.tokens, m.cost, m.requestDuration, m.upstream, m.refusals, m.held,
		m.genAI.duration, m.genAI.firstToken, m.genAI.perToken, m.genAI.tokens} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("failed to register gateway metrics: %w", err)
		}
	}
	return m, nil
}

// genAI are the OpenTelemetry GenAI metrics in their Prometheus form (docs/decisions.md "GenAI metrics"): one
// histogram each for the answered call's duration, its time to first token, its time per output token, and the
// tokens it used, labelled by workspace, slug, the target that answered and that target's provider. Their label
// children are resolved once per target and kept under its view.Target.Key, so an observation is a map read and
// a few atomic adds, as the per-target try counters of gatewayd/cooldown are.
type genAI struct {
	duration, firstToken, perToken, tokens *prometheus.HistogramVec
	// targets is read on every call without a lock; copied under mu to add or relabel a target.
	targets atomic.Pointer[map[string]*targetSeries]
	mu      sync.Mutex
}

// Label names of the GenAI series beside workspace, slug and target, which modelgate's own series use: provider
// holds the Endpoint target's provider as the Endpoint names it (OPENAI, say), not a gen_ai.provider.name value, so
// it reads as the Endpoint does; the token type is the conventions' gen_ai.token.type in Prometheus form.
const (
	providerLabel  = "provider"
	tokenTypeLabel = "gen_ai_token_type"
)

// The OpenTelemetry GenAI conventions' advisory bucket boundaries of each histogram.
var (
	durationBuckets   = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	firstTokenBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}
	perTokenBuckets   = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5}
	tokenBuckets      = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
)

func newGenAI() genAI {
	labels := []string{WorkspaceLabel, "slug", "target", providerLabel}
	return genAI{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_server_request_duration_seconds",
			Help:    "Time from sending a model call to a target until the end of its successful answer, for the OpenAI routes, by workspace, slug, the answering target and its provider.",
			Buckets: durationBuckets,
		}, labels),
		firstToken: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_server_time_to_first_token_seconds",
			Help:    "Time from sending a model call to a target until the first event of its streamed answer left for the client (the answer's headers when not streamed), by workspace, slug, target and provider.",
			Buckets: firstTokenBuckets,
		}, labels),
		perToken: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_server_time_per_output_token_seconds",
			Help:    "Time per output token after the first of a streamed answer that reported its usage: (duration - time to first token) / (output tokens - 1), by workspace, slug, target and provider.",
			Buckets: perTokenBuckets,
		}, labels),
		tokens: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_client_token_usage",
			Help:    "Tokens per answered call as its target reported them, by workspace, slug, target, provider and gen_ai_token_type (input, output).",
			Buckets: tokenBuckets,
		}, append(labels, tokenTypeLabel)),
	}
}

// targetSeries are the label children of one target, and the labels they were resolved with.
type targetSeries struct {
	workspace, slug, target, provider                   string
	duration, firstToken, perToken, inTokens, outTokens prometheus.Observer
}

func (s *targetSeries) matches(workspace, slug string, t *view.Target) bool {
	return s.workspace == workspace && s.slug == slug && s.target == t.Name && s.provider == t.Provider
}

// series returns the children of t, resolved on its first answered call, and again when a snapshot changed
// its labels (whose old children are then dropped).
func (g *genAI) series(workspace, slug string, t *view.Target) *targetSeries {
	var all map[string]*targetSeries
	if p := g.targets.Load(); p != nil {
		all = *p
	}
	if s := all[t.Key]; s != nil && s.matches(workspace, slug, t) {
		return s
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if p := g.targets.Load(); p != nil {
		all = *p
	}
	old := all[t.Key]
	if old != nil && old.matches(workspace, slug, t) {
		return old
	}
	if old != nil {
		for _, v := range []*prometheus.HistogramVec{g.duration, g.firstToken, g.perToken} {
			v.DeleteLabelValues(old.workspace, old.slug, old.target, old.provider)
		}
		g.tokens.DeleteLabelValues(old.workspace, old.slug, old.target, old.provider, "input")
		g.tokens.DeleteLabelValues(old.workspace, old.slug, old.target, old.provider, "output")
	}
	lv := []string{workspace, slug, t.Name, t.Provider}
	s := &targetSeries{workspace: workspace, slug: slug, target: t.Name, provider: t.Provider,
		duration: g.duration.WithLabelValues(lv...), firstToken: g.firstToken.WithLabelValues(lv...),
		perToken: g.perToken.WithLabelValues(lv...),
		inTokens: g.tokens.WithLabelValues(append(lv, "input")...), outTokens: g.tokens.WithLabelValues(append(lv, "output")...),
	}
	next := make(map[string]*targetSeries, len(all)+1)
	for k, v := range all {
		next[k] = v
	}
	next[t.Key] = s
	g.targets.Store(&next)
	return s
}

// observe records the call of slug that target t answered with res; stream says the client asked for a
// streamed answer. Only successful answers count, as the conventions define the time to first token: an error
// answer relayed as it is (a 400, say) generated nothing. Time per output token needs a stream and its usage: an
// answer relayed whole has no time between its tokens to measure.
func (g *genAI) observe(workspace, slug string, t *view.Target, res upstream.Result, stream bool) {
	if t == nil || res.Status >= http.StatusBadRequest {
		return
	}
	s := g.series(workspace, slug, t)
	s.duration.Observe(res.Duration.Seconds())
	if res.FirstChunk > 0 {
		s.firstToken.Observe(res.FirstChunk.Seconds())
	}
	u := res.Usage
	if u.Total() == 0 {
		return
	}
	s.inTokens.Observe(float64(u.PromptTokens))
	s.outTokens.Observe(float64(u.CompletionTokens))
	if stream && res.FirstChunk > 0 && u.CompletionTokens > 1 && res.Duration > res.FirstChunk {
		s.perToken.Observe((res.Duration - res.FirstChunk).Seconds() / float64(u.CompletionTokens-1))
	}
}
