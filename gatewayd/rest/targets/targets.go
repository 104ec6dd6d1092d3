// Package targets serves GET /v1/gateway/endpoints/{endpoint_id}/targets: an Endpoint of the served view with
// its retry and cooldown policy and, for each target, where it points, its weight and priority and its state on
// this replica from gatewayd/cooldown (in rotation or cooling down, until when, its consecutive failed tries and
// its tries of the last hour by outcome). Cooldown is per replica, so the answer names the replica it describes.
// gatewayd mounts it beside the events route, behind the management wrapper (docs/rest-api.md "Endpoint targets").
package targets

import (
	"net/http"
	"time"

	"github.com/modelgate/modelgate/gatewayd/cooldown"
	"github.com/modelgate/modelgate/gatewayd/httperr"
	"github.com/modelgate/modelgate/gatewayd/rest/kit"
	"github.com/modelgate/modelgate/gatewayd/tryplan"
	"github.com/modelgate/modelgate/gatewayd/view"
)

// States of a target.
const (
	StateUp      = "up"
	StateCooling = "cooling"
)

// Answer is the route's body.
type Answer struct {
	EndpointID string `json:"endpoint_id"`
	Slug       string `json:"slug"`
	// Replica is the host name of the replica whose state the targets show.
	Replica  string       `json:"replica"`
	Retry    RetryJSON    `json:"retry"`
	Cooldown CooldownJSON `json:"cooldown"`
	Targets  []Target     `json:"targets"`
}

// RetryJSON is the Endpoint's retry policy, defaults resolved.
type RetryJSON struct {
	// Attempts is the number of further tries after the first.
	Attempts int   `json:"attempts"`
	OnStatus []int `json:"on_status"`
}

// CooldownJSON is the Endpoint's cooldown policy, defaults resolved.
type CooldownJSON struct {
	Failures   int   `json:"failures"`
	DurationMS int64 `json:"duration_ms"`
}

// Target is one target of the Endpoint and its state.
type Target struct {
	Name     string `json:"name"`
	Provider string `json:"provider"`
	BaseURL  string `json:"base_url"`
	Weight   int    `json:"weight"`
	Priority int    `json:"priority"`
	// State is StateUp or StateCooling; CoolingUntil, RFC 3339, is set while it is cooling.
	State               string  `json:"state"`
	CoolingUntil        *string `json:"cooling_until"`
	ConsecutiveFailures int     `json:"consecutive_failures"`
	// TriesLastHour counts the tries of the hour before now by outcome (cooldown.Counts), every outcome present.
	TriesLastHour map[string]int64 `json:"tries_last_hour"`
}

// Options are what the route reads.
type Options struct {
	// View is the served view.
	View func() *view.View
	// Cooldown is this replica's target state.
	Cooldown *cooldown.Registry
	// Replica names this replica.
	Replica string
	// Now is the clock the cooldown records tries with; time.Now when nil.
	Now func() time.Time
}

// Handler serves GET /v1/gateway/endpoints/{endpoint_id}/targets for workspace ns, whose key the management API's
// wrapper authenticated and allowed to manage the gateway. An id that is not a valid Endpoint id is 400 naming
// endpoint_id, as on the other Endpoint routes; an Endpoint the served view of ns does not hold is 404.
func Handler(opts Options) func(w http.ResponseWriter, r *http.Request, ns string) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return func(w http.ResponseWriter, r *http.Request, ns string) {
		id := r.PathValue("endpoint_id")
		if !kit.ValidName(id) {
			kit.BadRequest(w, "endpoint_id", "\""+id+"\" is not a valid endpoint id.")
			return
		}
		ep := find(opts.View(), ns, id)
		if ep == nil {
			kit.NotFound(w, "Endpoint", id)
			return
		}
		httperr.WriteJSON(w, http.StatusOK, Describe(ep, opts.Cooldown, opts.Replica, opts.Now()))
	}
}

// find returns the Endpoint of id in namespace ns of v, nil when v serves none.
func find(v *view.View, ns, id string) *view.Endpoint {
	n := v.Namespace(ns)
	if n == nil {
		return nil
	}
	for _, ep := range n.Endpoints {
		if ep.ID == id {
			return ep
		}
	}
	return nil
}

// Describe is ep's answer with the state reg holds of its targets at now. A target no call has tried on this
// replica is up, with no failure and no try.
func Describe(ep *view.Endpoint, reg *cooldown.Registry, replica string, now time.Time) Answer {
	a := Answer{EndpointID: ep.ID, Slug: ep.Slug, Replica: replica,
		Retry:    RetryJSON{Attempts: ep.Policy.Attempts, OnStatus: statuses(ep.Policy.Fail)},
		Cooldown: CooldownJSON{Failures: ep.Policy.Failures, DurationMS: ep.Policy.Cooldown.Milliseconds()},
		Targets:  make([]Target, len(ep.Targets))}
	for i, t := range ep.Targets {
		out := Target{Name: t.Name, Provider: t.Provider, BaseURL: t.BaseURL, State: StateUp}
		if i < len(ep.Plan) {
			out.Weight, out.Priority = ep.Plan[i].Weight, ep.Plan[i].Priority
		}
		var recent [cooldown.NumOutcomes]int64
		if st := reg.Lookup(t.Key); st != nil {
			if st.Cooling(now) {
				until := st.Until().UTC().Format(time.RFC3339Nano)
				out.State, out.CoolingUntil = StateCooling, &until
			}
			out.ConsecutiveFailures = st.Failures()
			recent = st.Recent(now)
		}
		out.TriesLastHour = cooldown.Counts(recent)
		a.Targets[i] = out
	}
	return a
}

// statuses lists the members of s in ascending order.
func statuses(s tryplan.StatusSet) []int {
	out := []int{}
	for code := 400; code < 600; code++ {
		if s.Has(code) {
			out = append(out, code)
		}
	}
	return out
}
