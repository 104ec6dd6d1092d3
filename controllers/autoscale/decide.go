// Package autoscale is the manager's concurrency autoscaler for model deployments, Knative-style: every 2 s it
// reads how many calls each gatewayd replica has in flight to each deployment (api/stats), decides the replicas
// each deployment needs (ceil of the total over concurrencyTarget, within [minReplica, maxReplica]), and records
// the decision in annotations of the ModelDeployment, which the ModelDeployment reconciler applies to the
// Deployment or to the scale subresource of scaleTargetRef. The decision (Decide), what a deployment runs
// (Replicas) and the bounds (EffectiveBounds) are pure and table-tested; Autoscaler is the loop around them.
package autoscale

import (
	"fmt"
	"strconv"
	"time"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// Annotations the autoscaler writes on a ModelDeployment. Besides these it writes
// gatewayv1.AnnotationScaledDownAt when it scales a deployment to zero, and gatewayv1.AnnotationWakeRequestedAt
// when demand brings one back from zero, as promote and gatewayd do.
const (
	// AnnotationReplicas is the autoscaler's last decision: the replicas the deployment runs while active and
	// not scaled to zero, before the bounds and the wake floor.
	AnnotationReplicas = "gateway.modelgate.io/autoscaler-replicas"
	// AnnotationScaledUpAt (RFC 3339) is when the autoscaler last raised the replicas: no scale-down until
	// startupTimeoutSeconds after it, so replicas still starting are not killed.
	AnnotationScaledUpAt = "gateway.modelgate.io/scaled-up-at"
)

// Defaults of the autoscaling fields, as the CRD defaults them (docs/operations.md "Scale to zero: the autoscaler").
const (
	DefaultMinReplica            = 0
	DefaultMaxReplica            = 1
	DefaultConcurrencyTarget     = 1
	DefaultScaleDownDelaySeconds = 900
)

// Bounds are the autoscaling settings in force for one deployment.
type Bounds struct {
	Min, Max int32
	// Target is the calls at once one replica is meant to serve.
	Target int32
	// ScaleDownDelay is how long after its last call a deployment keeps its replicas.
	ScaleDownDelay time.Duration
}

// BoundsOf fills the unset fields of a with the defaults.
func BoundsOf(a *gatewayv1.Autoscaling) Bounds {
	b := Bounds{Min: DefaultMinReplica, Max: DefaultMaxReplica, Target: DefaultConcurrencyTarget,
		ScaleDownDelay: DefaultScaleDownDelaySeconds * time.Second}
	if a == nil {
		return b
	}
	if a.MinReplica != nil {
		b.Min = *a.MinReplica
	}
	if a.MaxReplica != nil {
		b.Max = *a.MaxReplica
	}
	if a.ConcurrencyTarget != nil {
		b.Target = *a.ConcurrencyTarget
	}
	if a.ScaleDownDelaySeconds != nil {
		b.ScaleDownDelay = time.Duration(*a.ScaleDownDelaySeconds) * time.Second
	}
	b.Max = max(b.Max, b.Min, 1)
	b.Target = max(b.Target, 1)
	return b
}

// EffectiveBounds are the bounds of md served through model m (nil when it does not exist). An environment of m
// that points at md and sets autoscaling replaces md's own autoscaling as a whole (the API server defaults the
// fields it leaves out, so a field-by-field merge cannot tell a default from a choice). When several such
// environments point at md, each field takes the value that serves the most calls: the highest minReplica,
// maxReplica and scaleDownDelaySeconds, the lowest concurrencyTarget. The development pointer has no autoscaling.
func EffectiveBounds(md *gatewayv1.ModelDeployment, m *gatewayv1.Model) Bounds {
	var merged *Bounds
	if m != nil {
		for _, e := range m.Spec.Environments {
			if e.Deployment != md.Name || e.Autoscaling == nil {
				continue
			}
			b := BoundsOf(e.Autoscaling)
			if merged == nil {
				merged = &b
				continue
			}
			merged.Min, merged.Max = max(merged.Min, b.Min), max(merged.Max, b.Max)
			merged.Target = min(merged.Target, b.Target)
			merged.ScaleDownDelay = max(merged.ScaleDownDelay, b.ScaleDownDelay)
		}
	}
	if merged != nil {
		return *merged
	}
	return BoundsOf(md.Spec.Autoscaling)
}

// Clamp returns n within [b.Min, b.Max].
func (b Bounds) Clamp(n int32) int32 { return min(max(n, b.Min), b.Max) }

// Need is the replicas demand calls at once need: ceil(demand / Target), within the bounds.
func (b Bounds) Need(demand int64) int32 {
	if demand <= 0 {
		return b.Clamp(0)
	}
	n := (demand + int64(b.Target) - 1) / int64(b.Target)
	if n > int64(b.Max) {
		return b.Max
	}
	return b.Clamp(int32(n))
}

// AnnotationTime reads an RFC 3339 annotation of md; zero when absent or malformed.
func AnnotationTime(md *gatewayv1.ModelDeployment, key string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, md.Annotations[key])
	if err != nil {
		return time.Time{}
	}
	return t
}

// ScaleState reads the scale annotations: a deployment is scaled down when asked to be (by promote or by the
// autoscaler) after its last wake, and only once it has been ready (a deployment that never was is never scaled
// down); a wake is pending when asked after the last scale-down.
func ScaleState(md *gatewayv1.ModelDeployment) (scaledDown, wakePending bool) {
	down, wake := AnnotationTime(md, gatewayv1.AnnotationScaledDownAt), AnnotationTime(md, gatewayv1.AnnotationWakeRequestedAt)
	scaledDown = !down.IsZero() && !wake.After(down) && md.Status.ReadySince != nil
	wakePending = !wake.IsZero() && wake.After(down)
	return scaledDown, wakePending
}

// Recorded reads the autoscaler's last decision on md.
func Recorded(md *gatewayv1.ModelDeployment) (int32, bool) {
	v, ok := md.Annotations[AnnotationReplicas]
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n < 0 {
		return 0, false
	}
	return int32(n), true
}

// Replicas is what md runs with bounds b: none while inactive or scaled down; else the autoscaler's last
// decision since the last scale-down within the bounds, or minReplica and at least one before it decided anything (a new deployment
// starts one replica, so that it is ready once before it may scale to zero); and at least one while a wake is
// pending.
func Replicas(md *gatewayv1.ModelDeployment, b Bounds) int32 {
	scaledDown, wakePending := ScaleState(md)
	if !md.Spec.IsActive() || scaledDown {
		return 0
	}
	n, ok := Recorded(md)
	if down := AnnotationTime(md, gatewayv1.AnnotationScaledDownAt); ok && !down.IsZero() && !AnnotationTime(md, AnnotationScaledUpAt).After(down) {
		// Decided before the last scale-down (the first decision after one is always a scale-up): stale once
		// woken, so a deployment that served 4 replicas before a promotion wakes to one, not four.
		ok = false
	}
	if !ok {
		n = max(b.Min, 1)
	}
	n = b.Clamp(n)
	if wakePending {
		n = max(n, 1)
	}
	return n
}

// Window holds the replicas that demand asked for at each read over the scale-down delay, as a monotonic queue:
// only reads that a later, higher one does not overshadow are kept, so it stays a few entries long.
type Window struct {
	points []point
}

type point struct {
	at   time.Time
	want int32
}

// Add records that demand asked for want replicas at now.
func (w *Window) Add(now time.Time, want int32) {
	for len(w.points) > 0 && w.points[len(w.points)-1].want <= want {
		w.points = w.points[:len(w.points)-1]
	}
	w.points = append(w.points, point{now, want})
}

// Max is the most replicas asked for after now-span (0 when none): a read at now-span or before no longer
// counts, so a deployment is scaled down span after the last read that needed more.
func (w *Window) Max(now time.Time, span time.Duration) int32 {
	cut := 0
	for cut < len(w.points) && !w.points[cut].at.After(now.Add(-span)) {
		cut++
	}
	w.points = w.points[cut:]
	if len(w.points) == 0 {
		return 0
	}
	return w.points[0].want
}

// Input is what one decision for one deployment looks at.
type Input struct {
	Now    time.Time
	Bounds Bounds
	// Current is the replicas the deployment is asked to run now (Replicas).
	Current int32
	// ScaledDown is true while the deployment is asked to run no replica and no wake is pending (ScaleState).
	ScaledDown bool
	// DemandFresh is true once Demand cannot hold calls from before the last scale-down: gatewayd's peak spans
	// two of its windows, so demand read soon after a scale-down may be calls the scale-down already ended.
	DemandFresh bool
	// Demand is the calls at once across every gatewayd replica: the sum of each one's recent peak.
	Demand int64
	// Held is the most replicas demand asked for within the scale-down delay before now (Window.Max); a wake
	// within the delay counts as one.
	Held int32
	// Complete is false when a gatewayd replica did not answer: its calls are unknown, so no scale-down.
	Complete bool
	// EverReady is true once the deployment has been ready since it was last (re)deployed.
	EverReady bool
	// StartedAt is the last time replicas were asked to start: deploy, activation, retry, wake or scale-up.
	StartedAt      time.Time
	StartupTimeout time.Duration
}

// Decision is the replicas a deployment should run and why.
type Decision struct {
	Replicas int32
	// Reason is CamelCase, for logs and Events.
	Reason string
	// Message is a sentence saying why.
	Message string
}

// Decide is the autoscaler's rule: scale up at once to ceil(demand / target); scale down only to the most that
// demand asked for within the scale-down delay (so to zero only that long after the last call), never before the
// deployment has been ready once, never within startupTimeoutSeconds of a start or scale-up, and never on
// incomplete counts. Replicas are always within the bounds while the deployment runs. A deployment scaled to zero
// (by the autoscaler, or by a promotion) is woken by a wake request, which gatewayd writes for the first call it
// holds; the autoscaler wakes it too, as a fallback, on fresh demand only: neither minReplica nor demand read so
// soon after the scale-down that it may hold calls from before brings it back (docs/decisions.md, "A deployment
// scaled to zero stays there until a call").
func Decide(in Input) Decision {
	b := in.Bounds
	if in.ScaledDown {
		if in.Demand <= 0 || !in.DemandFresh {
			return Decision{in.Current, "ScaledToZero", "Scaled to zero until a call asks for a wake."}
		}
		want := max(b.Need(in.Demand), 1)
		return Decision{want, "ScaleUp", fmt.Sprintf("%d call(s) at once at zero replicas need %d replica(s) at %d per replica.", in.Demand, want, b.Target)}
	}
	want := b.Need(in.Demand)
	if want > in.Current {
		return Decision{want, "ScaleUp", fmt.Sprintf("%d call(s) at once need %d replica(s) at %d per replica.", in.Demand, want, b.Target)}
	}
	held := b.Clamp(max(want, in.Held))
	if held >= in.Current {
		if held > want {
			return Decision{in.Current, "ScaleDownDelay", fmt.Sprintf("Calls within the last %s needed %d replica(s).", b.ScaleDownDelay, held)}
		}
		return Decision{in.Current, "Steady", fmt.Sprintf("%d call(s) at once; %d replica(s).", in.Demand, in.Current)}
	}
	switch {
	case !in.EverReady:
		return Decision{in.Current, "NeverReady", "Not scaled down: the deployment has not been ready once."}
	case in.StartupTimeout > 0 && in.Now.Before(in.StartedAt.Add(in.StartupTimeout)):
		return Decision{in.Current, "Starting", fmt.Sprintf("Not scaled down within startupTimeoutSeconds (%s) of a start.", in.StartupTimeout)}
	case !in.Complete:
		return Decision{in.Current, "StatsIncomplete", "Not scaled down: a gatewayd replica did not report its calls."}
	}
	return Decision{held, "ScaleDown", fmt.Sprintf("No call in the last %s needed more than %d replica(s).", b.ScaleDownDelay, held)}
}
