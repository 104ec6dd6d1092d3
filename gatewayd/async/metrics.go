package async

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the async series (docs/operations.md lists them). Labels are workspace and deployment names,
// which come from the snapshot, never from callers, so callers cannot mint series.
type metrics struct {
	accepted    *prometheus.CounterVec   // namespace, deployment
	depth       *prometheus.GaugeVec     // namespace, deployment, state (queued, in_progress)
	timeInQueue *prometheus.HistogramVec // namespace, deployment
	duration    *prometheus.HistogramVec // namespace, deployment, status
	webhooks    *prometheus.CounterVec   // outcome: delivered, failed, gave_up
	expired     prometheus.Counter
	canceled    prometheus.Counter
	requeued    prometheus.Counter
}

var queueBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "modelgate_async_requests_accepted_total",
			Help: "Async requests accepted (201), by workspace and deployment."}, []string{"namespace", "deployment"}),
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "modelgate_async_queue_depth",
			Help: "Async requests per deployment, by state (queued, in_progress), as last counted by this replica."}, []string{"namespace", "deployment", "state"}),
		timeInQueue: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "modelgate_async_time_in_queue_seconds",
			Help: "Time from (re)queueing to claim of an async request.", Buckets: queueBuckets}, []string{"namespace", "deployment"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "modelgate_async_duration_seconds",
			Help: "Time from acceptance to the end of the model call (SUCCEEDED or FAILED) of an async request.", Buckets: queueBuckets}, []string{"namespace", "deployment", "status"}),
		webhooks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "modelgate_async_webhook_deliveries_total",
			Help: "Async result webhook delivery attempts by outcome: delivered, failed (retried later), gave_up (WEBHOOK_FAILED)."}, []string{"outcome"}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{Name: "modelgate_async_requests_expired_total",
			Help: "Async requests expired in the queue (max_time_in_queue_seconds passed), at claim or by the sweeper."}),
		canceled: prometheus.NewCounter(prometheus.CounterOpts{Name: "modelgate_async_requests_canceled_total",
			Help: "Async requests canceled while QUEUED."}),
		requeued: prometheus.NewCounter(prometheus.CounterOpts{Name: "modelgate_async_leases_expired_total",
			Help: "Async requests put back in the queue because their worker's lease expired (a lost replica)."}),
	}
	// Every outcome starts at 0, so that an alert's increase() sees the first failed delivery too.
	for _, o := range []string{"delivered", "failed", "gave_up"} {
		m.webhooks.WithLabelValues(o)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.accepted, m.depth, m.timeInQueue, m.duration, m.webhooks, m.expired, m.canceled, m.requeued} {
			if err := reg.Register(c); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
				return nil, err
			}
		}
	}
	return m, nil
}
