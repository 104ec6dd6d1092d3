package gatewayd

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/modelgate/modelgate/gatewayd/auth"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/inference"
)

// metricsHandler serves every series of the process. It is mounted only on the metrics listener, which the chart
// exposes inside the cluster, never on the address that customers reach: the series name every workspace's
// customers.
func (g *Gateway) metricsHandler() http.Handler {
	return promhttp.HandlerFor(g.opts.Registry, promhttp.HandlerOpts{Registry: g.opts.Registry})
}

// workspaceMetrics serves GET /v1/metrics: the per-call series of the caller's workspace only, in the Prometheus
// text format. It is mounted behind the management wrapper (v1Routes), which lets through only the keys
// authz.Decide lets export metrics.
func (g *Gateway) workspaceMetrics(w http.ResponseWriter, _ *http.Request, c auth.Caller) {
	families, err := g.opts.Registry.Gather()
	if err != nil {
		httperr.Write(w, http.StatusInternalServerError, httperr.CodeInternal, "Metrics could not be gathered.", nil)
		return
	}
	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	w.Header().Set("Content-Type", string(format))
	enc := expfmt.NewEncoder(w, format)
	for _, f := range ofWorkspace(families, c.Namespace) {
		if err := enc.Encode(f); err != nil {
			return
		}
	}
}

// ofWorkspace keeps the series labelled with workspace ns, and the families that have any.
func ofWorkspace(families []*dto.MetricFamily, ns string) []*dto.MetricFamily {
	var out []*dto.MetricFamily
	for _, f := range families {
		var kept []*dto.Metric
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == inference.WorkspaceLabel && l.GetValue() == ns {
					kept = append(kept, m)
					break
				}
			}
		}
		if len(kept) > 0 {
			out = append(out, &dto.MetricFamily{Name: f.Name, Help: f.Help, Type: f.Type, Metric: kept})
		}
	}
	return out
}
