package deploystatus

import (
	"testing"
	"time"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

func TestDerive(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	running := Observed{Active: true, Replicas: 2, ReadyReplicas: 2, UpdatedReplicas: 2, EverReady: true, Now: now,
		DeployingSince: now.Add(-time.Hour), StartupTimeout: 10 * time.Minute}
	with := func(f func(*Observed)) Observed { o := running; f(&o); return o }
	fresh := func(f func(*Observed)) Observed {
		return with(func(o *Observed) {
			o.EverReady, o.DeployingSince = false, now.Add(-time.Minute)
			f(o)
		})
	}

	cases := []struct {
		check   string
		in      Observed
		want    gatewayv1.DeploymentStatus
		serving bool
	}{
		{"deleting", with(func(o *Observed) { o.Deleting = true }), gatewayv1.StatusDeactivating, false},
		{"deactivating", with(func(o *Observed) { o.Active = false }), gatewayv1.StatusDeactivating, false},
		{"inactive", with(func(o *Observed) { o.Active, o.Replicas, o.ReadyReplicas, o.UpdatedReplicas = false, 0, 0, 0 }), gatewayv1.StatusInactive, false},
		{"deploy failed", fresh(func(o *Observed) { o.ReadyReplicas, o.ProgressFailed = 0, true }), gatewayv1.StatusDeployFailed, false},
		{"startup timeout", fresh(func(o *Observed) { o.ReadyReplicas, o.DeployingSince = 0, now.Add(-10*time.Minute) }), gatewayv1.StatusDeployFailed, false},
		// Scaled to zero is healthy: Ready stays True, since the next call wakes it and is served.
		{"scaled to zero", with(func(o *Observed) { o.ScaledDown, o.Replicas, o.ReadyReplicas, o.UpdatedReplicas = true, 0, 0, 0 }), gatewayv1.StatusScaledToZero, true},
		{"wake timeout", with(func(o *Observed) {
			o.WakePending, o.WakeRequestedAt, o.Replicas, o.ReadyReplicas, o.UpdatedReplicas = true, now.Add(-10*time.Minute), 1, 0, 1
		}), gatewayv1.StatusUnhealthy, false},
		{"waking up", with(func(o *Observed) {
			o.WakePending, o.WakeRequestedAt, o.Replicas, o.ReadyReplicas, o.UpdatedReplicas = true, now.Add(-9*time.Minute), 1, 0, 1
		}), gatewayv1.StatusWakingUp, true},
		{"deploying", fresh(func(o *Observed) { o.Replicas, o.ReadyReplicas, o.UpdatedReplicas = 0, 0, 0 }), gatewayv1.StatusDeploying, false},
		{"loading model", fresh(func(o *Observed) { o.ReadyReplicas = 0 }), gatewayv1.StatusLoadingModel, false},
		{"unhealthy", with(func(o *Observed) { o.ReadyReplicas = 0 }), gatewayv1.StatusUnhealthy, false},
		{"updating", with(func(o *Observed) { o.UpdatedReplicas = 1 }), gatewayv1.StatusUpdating, true},
		{"active", running, gatewayv1.StatusActive, true},
	}
	seen := map[string]bool{}
	for _, tc := range cases {
		t.Run(tc.check, func(t *testing.T) {
			got, by := derive(tc.in)
			if by != tc.check {
				t.Errorf("decided by check %q, want %q", by, tc.check)
			}
			if got.Status != tc.want || got.Serving != tc.serving {
				t.Errorf("got %s (serving %v), want %s (serving %v)", got.Status, got.Serving, tc.want, tc.serving)
			}
			if got.Reason == "" || got.Message == "" {
				t.Errorf("reason %q and message %q must both be set", got.Reason, got.Message)
			}
		})
		seen[tc.check] = true
	}
	for _, c := range checks {
		if !seen[c.name] {
			t.Errorf("check %q has no row: every check needs one", c.name)
		}
	}
}

// A deployment that failed before it was ever ready stays failed even once its progress deadline no longer
// reports, until a retry restarts the clock; one that was ready is never DEPLOY_FAILED by the startup timeout.
func TestStartupTimeoutOnlyBeforeFirstReady(t *testing.T) {
	now := time.Now()
	o := Observed{Active: true, Replicas: 1, UpdatedReplicas: 1, EverReady: true, Now: now,
		DeployingSince: now.Add(-time.Hour), StartupTimeout: time.Minute}
	if got := Derive(o).Status; got != gatewayv1.StatusUnhealthy {
		t.Fatalf("ever-ready deployment past its startup timeout: got %s, want UNHEALTHY", got)
	}
	o.EverReady = false
	if got := Derive(o).Status; got != gatewayv1.StatusDeployFailed {
		t.Fatalf("never-ready deployment past its startup timeout: got %s, want DEPLOY_FAILED", got)
	}
}
