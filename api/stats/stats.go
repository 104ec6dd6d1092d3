// Package stats is the contract of gatewayd's internal stats endpoint: how many calls each gatewayd replica has in
// flight to each model deployment, and the most it had at once lately. gatewayd serves it on its metrics listener
// (never on the address customers reach); the manager's autoscaler reads it from every replica every 2 s and
// scales each deployment to the total. Both binaries import this package, so the wire format has one home.
package stats

// Path is the route, on gatewayd's metrics listener, that answers a Stats as JSON to GET.
const Path = "/internal/stats"

// PortName is the name of gatewayd's metrics port, in its pods and in the metrics Service whose EndpointSlices the
// autoscaler reads.
const PortName = "metrics"

// Stats is one gatewayd replica's answer. Deployments with nothing in flight and no recent peak are left out.
type Stats struct {
	// WindowSeconds is the span a peak covers: Peak is the most calls in flight at once since the start of the
	// previous window, so it covers between one and two windows.
	WindowSeconds float64 `json:"window_seconds"`
	// Deployments are sorted by namespace, then deployment id.
	Deployments []Deployment `json:"deployments"`
}

// Deployment is what one replica has in flight to one model deployment. Calls held while the deployment wakes
// count: they are demand.
type Deployment struct {
	// Namespace is the workspace namespace.
	Namespace string `json:"namespace"`
	// DeploymentID is the ModelDeployment's name.
	DeploymentID string `json:"deployment_id"`
	// InFlight is how many calls are in flight now.
	InFlight int64 `json:"in_flight"`
	// Peak is the most calls in flight at once over the recent window (at least InFlight), so a burst that
	// started and ended between two reads is still seen.
	Peak int64 `json:"peak"`
}

// Demand is what the autoscaler counts for d: its recent peak, or its in-flight count if higher.
func (d Deployment) Demand() int64 { return max(d.InFlight, d.Peak) }
