package autoscale

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestDecide(t *testing.T) {
	b := Bounds{Min: 0, Max: 5, Target: 10, ScaleDownDelay: time.Minute}
	ready := Input{Now: t0, Bounds: b, Complete: true, EverReady: true, StartedAt: t0.Add(-time.Hour), StartupTimeout: 10 * time.Minute}
	with := func(f func(*Input)) Input { in := ready; f(&in); return in }
	for _, tc := range []struct {
		name   string
		in     Input
		want   int32
		reason string
	}{
		{"40 calls at 10 per replica need 4", with(func(in *Input) { in.Current, in.Demand = 1, 40 }), 4, "ScaleUp"},
		{"41 calls need 5 (ceil)", with(func(in *Input) { in.Current, in.Demand = 1, 41 }), 5, "ScaleUp"},
		{"demand past maxReplica stops at it", with(func(in *Input) { in.Current, in.Demand = 1, 1000 }), 5, "ScaleUp"},
		{"one call wakes a deployment at zero", with(func(in *Input) { in.Current, in.ScaledDown, in.DemandFresh, in.Demand = 0, true, true, 1 }), 1, "ScaleUp"},
		{"30 calls at zero wake it to 3", with(func(in *Input) { in.Current, in.ScaledDown, in.DemandFresh, in.Demand = 0, true, true, 30 }), 3, "ScaleUp"},
		{"demand soon after a scale-down does not wake it", with(func(in *Input) { in.Current, in.ScaledDown, in.Demand = 0, true, 1 }), 0, "ScaledToZero"},
		{"minReplica does not wake a deployment scaled to zero", with(func(in *Input) { in.Bounds.Min, in.Current, in.ScaledDown, in.DemandFresh = 1, 0, true, true }), 0, "ScaledToZero"},
		{"scale up ignores the startup window", with(func(in *Input) { in.Current, in.Demand, in.StartedAt = 1, 30, t0 }), 3, "ScaleUp"},
		{"scale up ignores incomplete counts", with(func(in *Input) { in.Current, in.Demand, in.Complete = 1, 30, false }), 3, "ScaleUp"},
		{"scale up a never-ready deployment", with(func(in *Input) { in.Current, in.Demand, in.EverReady = 1, 20, false }), 2, "ScaleUp"},
		{"minReplica is the floor with no calls", with(func(in *Input) { in.Bounds.Min, in.Current = 2, 2 }), 2, "Steady"},
		{"steady at the need", with(func(in *Input) { in.Current, in.Demand, in.Held = 4, 40, 4 }), 4, "Steady"},
		{"fewer calls within the delay keep the count", with(func(in *Input) { in.Current, in.Demand, in.Held = 4, 5, 4 }), 4, "ScaleDownDelay"},
		{"no call within the delay scales to zero", with(func(in *Input) { in.Current, in.Demand, in.Held = 4, 0, 0 }), 0, "ScaleDown"},
		{"a smaller need within the delay scales to it", with(func(in *Input) { in.Current, in.Demand, in.Held = 4, 0, 2 }), 2, "ScaleDown"},
		{"scale down stops at minReplica", with(func(in *Input) { in.Bounds.Min, in.Current = 1, 4 }), 1, "ScaleDown"},
		{"never ready: never scaled down", with(func(in *Input) { in.Current, in.EverReady = 1, false }), 1, "NeverReady"},
		{"within startupTimeout of a scale-up: not scaled down", with(func(in *Input) { in.Current, in.StartedAt = 4, t0.Add(-9*time.Minute) }), 4, "Starting"},
		{"startupTimeout after the scale-up: scaled down", with(func(in *Input) { in.Current, in.StartedAt = 4, t0.Add(-10*time.Minute) }), 0, "ScaleDown"},
		{"a replica did not report: not scaled down", with(func(in *Input) { in.Current, in.Complete = 4, false }), 4, "StatsIncomplete"},
		{"a history above current does not scale up", with(func(in *Input) { in.Current, in.Held = 0, 3 }), 0, "ScaleDownDelay"},
		{"scaled to zero and idle stays at zero", with(func(in *Input) { in.Current = 0 }), 0, "Steady"},
		{"bounds lowered below current: scale down to max", with(func(in *Input) { in.Bounds.Max, in.Current, in.Demand, in.Held = 2, 4, 40, 4 }), 2, "ScaleDown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.in)
			if d.Replicas != tc.want || d.Reason != tc.reason {
				t.Fatalf("Decide = %d (%s: %s), want %d (%s)", d.Replicas, d.Reason, d.Message, tc.want, tc.reason)
			}
		})
	}
}

// TestWindow: the most asked for within the span, forgotten exactly span after it was last asked for.
func TestWindow(t *testing.T) {
	w := &Window{}
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	w.Add(at(0), 4)
	w.Add(at(2), 1)
	w.Add(at(4), 4) // the timer restarts: a later read asks for as much again
	w.Add(at(6), 0)
	for _, tc := range []struct {
		now  int
		want int32
	}{{6, 4}, {63, 4}, {64, 0}, {100, 0}} {
		if got := w.Max(at(tc.now), time.Minute); got != tc.want {
			t.Errorf("Max at %ds = %d, want %d", tc.now, got, tc.want)
		}
	}
	w.Add(at(100), 2)
	w.Add(at(110), 1)
	if got := w.Max(at(160), time.Minute); got != 1 {
		t.Errorf("after the 2 aged out: Max = %d, want 1", got)
	}
	if len(w.points) > 2 {
		t.Errorf("window keeps %d points, want a monotonic queue", len(w.points))
	}
}

func TestNeed(t *testing.T) {
	b := Bounds{Min: 1, Max: 4, Target: 3}
	for demand, want := range map[int64]int32{0: 1, 1: 1, 3: 1, 4: 2, 9: 3, 10: 4, 1 << 40: 4} {
		if got := b.Need(demand); got != want {
			t.Errorf("Need(%d) = %d, want %d", demand, got, want)
		}
	}
}

func TestEffectiveBounds(t *testing.T) {
	own := &gatewayv1.Autoscaling{MinReplica: ptr.To[int32](0), MaxReplica: ptr.To[int32](3), ConcurrencyTarget: ptr.To[int32](4), ScaleDownDelaySeconds: ptr.To[int32](60)}
	md := &gatewayv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Name: "v2"}, Spec: gatewayv1.ModelDeploymentSpec{Autoscaling: own}}
	env := func(name, dep string, a *gatewayv1.Autoscaling) gatewayv1.ModelEnvironment {
		return gatewayv1.ModelEnvironment{Name: name, Deployment: dep, Autoscaling: a}
	}
	model := func(envs ...gatewayv1.ModelEnvironment) *gatewayv1.Model {
		return &gatewayv1.Model{Spec: gatewayv1.ModelSpec{Environments: envs}}
	}
	prod := &gatewayv1.Autoscaling{MinReplica: ptr.To[int32](2), MaxReplica: ptr.To[int32](10), ConcurrencyTarget: ptr.To[int32](8), ScaleDownDelaySeconds: ptr.To[int32](30)}
	staging := &gatewayv1.Autoscaling{MinReplica: ptr.To[int32](0), MaxReplica: ptr.To[int32](2), ConcurrencyTarget: ptr.To[int32](2), ScaleDownDelaySeconds: ptr.To[int32](600)}
	for _, tc := range []struct {
		name string
		m    *gatewayv1.Model
		want Bounds
	}{
		{"no model: the deployment's own", nil, Bounds{0, 3, 4, time.Minute}},
		{"an environment without autoscaling: the deployment's own", model(env("production", "v2", nil)), Bounds{0, 3, 4, time.Minute}},
		{"an environment of another deployment does not apply", model(env("production", "v1", prod)), Bounds{0, 3, 4, time.Minute}},
		{"the environment's override replaces the deployment's", model(env("production", "v2", prod)), Bounds{2, 10, 8, 30 * time.Second}},
		{"two overrides: the most serving of each field", model(env("production", "v2", prod), env("staging", "v2", staging)), Bounds{2, 10, 2, 10 * time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := EffectiveBounds(md, tc.m); got != tc.want {
				t.Fatalf("EffectiveBounds = %+v, want %+v", got, tc.want)
			}
		})
	}
	if got := BoundsOf(nil); got != (Bounds{0, 1, 1, 900 * time.Second}) {
		t.Errorf("BoundsOf(nil) = %+v, want the pinned defaults", got)
	}
}

func TestReplicas(t *testing.T) {
	b := Bounds{Min: 0, Max: 5, Target: 1, ScaleDownDelay: time.Minute}
	ts := func(d time.Duration) string { return t0.Add(d).Format(time.RFC3339Nano) }
	for _, tc := range []struct {
		name     string
		inactive bool
		ready    bool
		ann      map[string]string
		bounds   Bounds
		want     int32
	}{
		{"a new deployment runs one replica", false, false, nil, b, 1},
		{"minReplica above one", false, false, nil, Bounds{Min: 3, Max: 5, Target: 1}, 3},
		{"inactive runs none", true, true, map[string]string{AnnotationReplicas: "4"}, b, 0},
		{"the autoscaler's decision", false, true, map[string]string{AnnotationReplicas: "4"}, b, 4},
		{"the decision within the bounds", false, true, map[string]string{AnnotationReplicas: "9"}, b, 5},
		{"scaled down after ready", false, true, map[string]string{AnnotationReplicas: "0", gatewayv1.AnnotationScaledDownAt: ts(0)}, b, 0},
		{"scaled down but never ready: one", false, false, map[string]string{gatewayv1.AnnotationScaledDownAt: ts(0)}, b, 1},
		{"a wake after the scale-down: at least one", false, true, map[string]string{AnnotationReplicas: "0",
			gatewayv1.AnnotationScaledDownAt: ts(0), gatewayv1.AnnotationWakeRequestedAt: ts(time.Second)}, b, 1},
		{"a wake before the scale-down is spent", false, true, map[string]string{AnnotationReplicas: "0",
			gatewayv1.AnnotationScaledDownAt: ts(time.Second), gatewayv1.AnnotationWakeRequestedAt: ts(0)}, b, 0},
		{"a decision before the last scale-down is spent once woken", false, true, map[string]string{AnnotationReplicas: "4",
			AnnotationScaledUpAt: ts(0), gatewayv1.AnnotationScaledDownAt: ts(time.Second), gatewayv1.AnnotationWakeRequestedAt: ts(2 * time.Second)}, b, 1},
		{"a decision after the wake stands", false, true, map[string]string{AnnotationReplicas: "3", gatewayv1.AnnotationScaledDownAt: ts(0),
			gatewayv1.AnnotationWakeRequestedAt: ts(time.Second), AnnotationScaledUpAt: ts(2 * time.Second)}, b, 3},
		{"a malformed decision is ignored", false, true, map[string]string{AnnotationReplicas: "lots"}, b, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			md := &gatewayv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Annotations: tc.ann}}
			md.Spec.Active = ptr.To(!tc.inactive)
			if tc.ready {
				md.Status.ReadySince = &metav1.Time{Time: t0}
			}
			if got := Replicas(md, tc.bounds); got != tc.want {
				t.Fatalf("Replicas = %d, want %d", got, tc.want)
			}
		})
	}
}
