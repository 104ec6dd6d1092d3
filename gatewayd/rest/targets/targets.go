// Package targets serves GET /v1/gateway/endpoints/{endpoint_id}/targets: an Endpoint of the served view with
// its retry and cooldown policy and, for each target, where it points, its weight and priority and its state from
// gatewayd/cooldown (in rotation or cooling down, until when, its consecutive failed tries and its tries of the
// last hour by outcome). Cooldown is per replica: each replica answers its own state at Path on its metrics
// listener, and the route merges every replica's, as the logs route merges their request logs. gatewayd mounts
// the route beside the events route, behind the management wrapper (docs/rest-api.md "Endpoint targets").
package targets

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"

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
	// Replica is the host name of the replica that answered, whose view gives the Endpoint, its policy and its
	// targets.
	Replica  string       `json:"replica"`
	Retry    RetryJSON    `json:"retry"`
	Cooldown CooldownJSON `json:"cooldown"`
	Targets  []Target     `json:"targets"`
	// UnansweredReplicas are the metrics addresses of the replicas whose state could not be read: their tries and
	// cooldowns are left out.
	UnansweredReplicas []string `json:"unanswered_replicas"`
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

// Target is one target of the Endpoint and its state across the replicas.
type Target struct {
	Name     string `json:"name"`
	Provider string `json:"provider"`
	BaseURL  string `json:"base_url"`
	Weight   int    `json:"weight"`
	Priority int    `json:"priority"`
	Status
	// Replicas is the state on each replica that answered, this one first.
	Replicas []ReplicaState `json:"replicas,omitempty"`
}

// Status is a target's state on one replica or, merged, on all of them: cooling when it cools on any, until the
// latest time it is out on one; the most consecutive failures of any; the tries of all.
type Status struct {
	// State is StateUp or StateCooling; CoolingUntil, RFC 3339, is set while it is cooling.
	State               string  `json:"state"`
	CoolingUntil        *string `json:"cooling_until"`
	ConsecutiveFailures int     `json:"consecutive_failures"`
	// TriesLastHour counts the tries of the hour before now by outcome (cooldown.Counts), every outcome present.
	TriesLastHour map[string]int64 `json:"tries_last_hour"`
}

// ReplicaState is a target's state on one replica.
type ReplicaState struct {
	// Replica is the replica's host name.
	Replica string `json:"replica"`
	Status
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
	// Peers lists the metrics listeners (host:port) of every replica, this one's included; only this replica's
	// state is read when nil.
	Peers func(ctx context.Context) ([]string, error)
	// HTTP reads the peers; peerClient when nil.
	HTTP *http.Client
}

// Path is the route, on gatewayd's metrics listener (never on the address customers reach), that answers this
// replica's state of one Endpoint's targets to GET ?namespace=..&endpoint_id=.., for the route of every replica.
const Path = "/internal/targets"

// Cluster answers the route from the state of every replica.
type Cluster struct {
	opts Options
	// instance tells this replica from the others in the list of peers, which holds its own address too.
	instance string
}

// New returns the Cluster of opts.
func New(opts Options) *Cluster {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.HTTP == nil {
		opts.HTTP = peerClient
	}
	return &Cluster{opts: opts, instance: rand.Text()}
}

// peerClient reads a replica's state within 2 s and follows no redirect.
var peerClient = &http.Client{Timeout: 2 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// peerAnswer is one replica's answer at Path.
type peerAnswer struct {
	Instance string `json:"instance"`
	Answer
}

// ServeHTTP answers Path with this replica's state, 404 when it does not serve the Endpoint.
func (c *Cluster) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q, ok := httperr.RequiredQuery(w, r, "namespace and endpoint_id are required query parameters.", "namespace", "endpoint_id")
	if !ok {
		return
	}
	ns, id := q[0], q[1]
	ep := find(c.opts.View(), ns, id)
	if ep == nil {
		kit.NotFound(w, "Endpoint", id)
		return
	}
	httperr.WriteJSON(w, http.StatusOK, peerAnswer{Instance: c.instance, Answer: Describe(ep, c.opts.Cooldown, c.opts.Replica, c.opts.Now())})
}

// Handler serves GET /v1/gateway/endpoints/{endpoint_id}/targets for workspace ns, whose key the management API's
// wrapper authenticated and allowed to manage the gateway: this replica's answer merged with every other's
// (Merge). An id that is not a valid Endpoint id is 400 naming endpoint_id, as on the other Endpoint routes; an
// Endpoint the served view of ns does not hold is 404. A replica that cannot be read, or does not serve the
// Endpoint yet, is left out; the first are listed in unanswered_replicas.
func (c *Cluster) Handler(w http.ResponseWriter, r *http.Request, ns string) {
	id := r.PathValue("endpoint_id")
	if !kit.ValidName(id) {
		kit.BadRequest(w, "endpoint_id", fmt.Sprintf("%q is not a valid endpoint id.", id))
		return
	}
	ep := find(c.opts.View(), ns, id)
	if ep == nil {
		kit.NotFound(w, "Endpoint", id)
		return
	}
	own := Describe(ep, c.opts.Cooldown, c.opts.Replica, c.opts.Now())
	var others []Answer
	unanswered := []string{}
	if c.opts.Peers != nil {
		var errs []error
		others, unanswered, errs = c.readPeers(r.Context(), ns, id)
		for _, err := range errs {
			logr.FromContextOrDiscard(r.Context()).Error(err, "A gatewayd replica's target state left out of an answer", "endpoint", id)
		}
	}
	a := Merge(own, others)
	a.UnansweredReplicas = unanswered
	httperr.WriteJSON(w, http.StatusOK, a)
}

// readPeers reads the answer of every other replica; a replica that does not serve the Endpoint yet (404) is
// neither an answer nor unanswered.
func (c *Cluster) readPeers(ctx context.Context, ns, id string) (answers []Answer, unanswered []string, errs []error) {
	unanswered = []string{}
	addrs, err := c.opts.Peers(ctx)
	if err != nil {
		return nil, unanswered, []error{fmt.Errorf("failed to list the gatewayd replicas: %w", err)}
	}
	got := make([]*peerAnswer, len(addrs))
	failed := make([]error, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() { got[i], failed[i] = c.read(ctx, addr, ns, id) })
	}
	wg.Wait()
	for i, a := range got {
		switch {
		case failed[i] != nil:
			unanswered = append(unanswered, addrs[i])
			errs = append(errs, failed[i])
		case a != nil && a.Instance != c.instance:
			answers = append(answers, a.Answer)
		}
	}
	return answers, unanswered, errs
}

// read is one replica's answer at addr, nil when it does not serve the Endpoint.
func (c *Cluster) read(ctx context.Context, addr, ns, id string) (*peerAnswer, error) {
	q := url.Values{"namespace": {ns}, "endpoint_id": {id}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+Path+"?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.opts.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("gatewayd replica %s: %w", addr, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, nil
	default:
		return nil, fmt.Errorf("gatewayd replica %s answered %d", addr, resp.StatusCode)
	}
	var a peerAnswer
	// An Endpoint has at most tryplan.MaxTargets targets: a few kilobytes; bound what a replica may send all the same.
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&a); err != nil {
		return nil, fmt.Errorf("gatewayd replica %s: %w", addr, err)
	}
	return &a, nil
}

// Merge is own, this replica's answer, with the state of its targets on the replicas of others added by target
// name: each target lists its state on every replica (own first); it is cooling when it cools on any, until the
// latest of their times, with the most consecutive failures of any and the tries of all summed. Own gives the
// Endpoint, its policy and its targets: a target another replica's older or newer view has and own's has not is
// left out.
func Merge(own Answer, others []Answer) Answer {
	out := own
	out.Targets = slices.Clone(own.Targets)
	for i := range out.Targets {
		t := &out.Targets[i]
		t.Replicas = []ReplicaState{{Replica: own.Replica, Status: own.Targets[i].Status}}
		// A copy, so that summing into it leaves this replica's own counts in Replicas as they were.
		t.TriesLastHour = maps.Clone(t.TriesLastHour)
		for _, o := range others {
			j := slices.IndexFunc(o.Targets, func(ot Target) bool { return ot.Name == t.Name })
			if j < 0 {
				continue
			}
			s := o.Targets[j].Status
			t.Replicas = append(t.Replicas, ReplicaState{Replica: o.Replica, Status: s})
			if s.State == StateCooling && s.CoolingUntil != nil && (t.CoolingUntil == nil || later(*s.CoolingUntil, *t.CoolingUntil)) {
				t.State, t.CoolingUntil = StateCooling, s.CoolingUntil
			}
			t.ConsecutiveFailures = max(t.ConsecutiveFailures, s.ConsecutiveFailures)
			for k, n := range s.TriesLastHour {
				t.TriesLastHour[k] += n
			}
		}
	}
	return out
}

// later reports whether RFC 3339 time a is after b; a time that does not parse is never later.
func later(a, b string) bool {
	ta, errA := time.Parse(time.RFC3339Nano, a)
	tb, errB := time.Parse(time.RFC3339Nano, b)
	return errA == nil && (errB != nil || ta.After(tb))
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
		out := Target{Name: t.Name, Provider: t.Provider, BaseURL: t.BaseURL, Status: Status{State: StateUp}}
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
