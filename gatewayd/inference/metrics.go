package inference

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
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
	for _, c := range []prometheus.Collector{m.requests, m.tokens, m.cost, m.requestDuration, m.upstream, m.refusals, m.held} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("failed to register gateway metrics: %w", err)
		}
	}
	return m, nil
}
