package wake

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the wake series. The labels are the workspace (named "workspace", like every per-call series, so
// GET /v1/metrics serves a workspace its own) and the model id from the snapshot, never what a caller sent.
type Metrics struct {
	requests  *prometheus.CounterVec
	coldStart *prometheus.HistogramVec
}

// NewMetrics registers the series on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "modelgate_model_wake_requests_total",
			Help: "Wake patches sent to ModelDeployments (one per deployment however many calls wait), by workspace, model and result (ok, error).",
		}, []string{"workspace", "model", "result"}),
		coldStart: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "modelgate_cold_start_seconds",
			Help:    "Time from the first wake request of a deployment with no ready address to its first ready address, by workspace and model.",
			Buckets: []float64{0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200},
		}, []string{"workspace", "model"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.coldStart} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("failed to register wake metrics: %w", err)
		}
	}
	return m, nil
}
