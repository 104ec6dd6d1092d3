// Package deploystatus derives a ModelDeployment's status from what its server reports, by ordered pure checks.
// The reconciler gathers an Observed (from the Deployment it owns, the Service's EndpointSlices or a readiness
// probe of a url source) and writes what Derive returns; nothing here reads the cluster, so every row of the
// table is a unit test.
package deploystatus

import (
	"fmt"
	"time"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
)

// Observed is what the reconciler saw of one deployment at Now.
type Observed struct {
	// Deleting is true once the ModelDeployment has a deletionTimestamp.
	Deleting bool
	// Active is spec.active.
	Active bool
	// ScaledDown is true while the deployment is asked to run no replica (scaled to zero, no wake pending).
	ScaledDown bool
	// WakePending is true while a wake asks for replicas the deployment does not have ready yet.
	WakePending bool
	// WakeRequestedAt is when the pending wake was asked for; a wake with no ready replica StartupTimeout after
	// it is UNHEALTHY, not WAKING_UP for ever.
	WakeRequestedAt time.Time
	// Replicas is how many replicas exist (pods created, ready or not); a url source reports 1.
	Replicas int32
	// ReadyReplicas is how many replicas can serve: ready pods, ready endpoint addresses, or 1 for a url source
	// whose readiness probe answered 2xx.
	ReadyReplicas int32
	// UpdatedReplicas is how many replicas run the current template; equal to Replicas when not a rollout.
	UpdatedReplicas int32
	// ProgressFailed is true when the workload reports that its rollout cannot progress (a Deployment's
	// Progressing=False with ProgressDeadlineExceeded, or a replica failure).
	ProgressFailed bool
	// ProgressMessage says why, for the status message.
	ProgressMessage string
	// EverReady is true when the deployment has been ready since it was last (re)deployed.
	EverReady bool
	// DeployingSince is when the current attempt to deploy started; StartupTimeout bounds it.
	DeployingSince time.Time
	StartupTimeout time.Duration
	Now            time.Time
}

// Result is the derived status, with a reason and message for the Ready condition and Events.
type Result struct {
	Status  gatewayv1.DeploymentStatus
	Reason  string
	Message string
	// Serving is true when a call will be served: now, or once a wake that it asks for (or that is under way)
	// brings a replica up. SCALED_TO_ZERO and WAKING_UP are healthy states, and serve.
	Serving bool
}

// check is one ordered rule: the first that matches decides.
type check struct {
	name  string
	match func(Observed) bool
	then  func(Observed) Result
}

// Checks are evaluated in this order; each row of the package's table test names the check it exercises.
var checks = []check{
	{"deleting", func(o Observed) bool { return o.Deleting }, func(Observed) Result {
		return Result{Status: gatewayv1.StatusDeactivating, Reason: "Deleting", Message: "The deployment is being deleted."}
	}},
	{"deactivating", func(o Observed) bool { return !o.Active && o.Replicas > 0 }, func(o Observed) Result {
		return Result{Status: gatewayv1.StatusDeactivating, Reason: "Deactivating",
			Message: fmt.Sprintf("Deactivated; %d replica(s) still stopping.", o.Replicas)}
	}},
	{"inactive", func(o Observed) bool { return !o.Active }, func(Observed) Result {
		return Result{Status: gatewayv1.StatusInactive, Reason: "Inactive", Message: "Deactivated: calls answer 404 until it is activated."}
	}},
	{"deploy failed", func(o Observed) bool { return !o.EverReady && o.ProgressFailed }, func(o Observed) Result {
		return Result{Status: gatewayv1.StatusDeployFailed, Reason: "ProgressFailed", Message: "The server cannot start: " + o.ProgressMessage}
	}},
	{"startup timeout", startupTimedOut, func(o Observed) Result {
		return Result{Status: gatewayv1.StatusDeployFailed, Reason: "StartupTimeout",
			Message: fmt.Sprintf("No replica became ready within startupTimeoutSeconds (%s).", o.StartupTimeout)}
	}},
	{"scaled to zero", func(o Observed) bool { return o.ScaledDown && o.ReadyReplicas == 0 && !o.WakePending }, func(Observed) Result {
		return Result{Status: gatewayv1.StatusScaledToZero, Reason: "ScaledToZero", Serving: true, Message: "Scaled to zero: the next call wakes it."}
	}},
	{"wake timeout", wakeTimedOut, func(o Observed) Result {
		return Result{Status: gatewayv1.StatusUnhealthy, Reason: "WakeTimeout",
			Message: fmt.Sprintf("Woken, but no replica became ready within startupTimeoutSeconds (%s).", o.StartupTimeout)}
	}},
	{"waking up", func(o Observed) bool { return o.WakePending && o.ReadyReplicas == 0 && o.EverReady }, func(Observed) Result {
		return Result{Status: gatewayv1.StatusWakingUp, Reason: "WakingUp", Serving: true, Message: "Waking up: calls are held until a replica is ready."}
	}},
	{"deploying", func(o Observed) bool { return !o.EverReady && o.Replicas == 0 }, func(Observed) Result {
		return Result{Status: gatewayv1.StatusDeploying, Reason: "Deploying", Message: "Waiting for the first replica to be scheduled."}
	}},
	{"loading model", func(o Observed) bool { return !o.EverReady && o.ReadyReplicas == 0 }, func(o Observed) Result {
		return Result{Status: gatewayv1.StatusLoadingModel, Reason: "LoadingModel",
			Message: fmt.Sprintf("%d replica(s) started; waiting for the server to answer its readiness path.", o.Replicas)}
	}},
	{"unhealthy", func(o Observed) bool { return o.ReadyReplicas == 0 }, func(Observed) Result {
		return Result{Status: gatewayv1.StatusUnhealthy, Reason: "NoReadyReplica", Message: "It was ready, but no replica is ready now."}
	}},
	{"updating", func(o Observed) bool { return o.UpdatedReplicas < o.Replicas }, func(o Observed) Result {
		return Result{Status: gatewayv1.StatusUpdating, Reason: "Updating", Serving: true,
			Message: fmt.Sprintf("%d of %d replica(s) updated.", o.UpdatedReplicas, o.Replicas)}
	}},
	{"active", func(Observed) bool { return true }, func(o Observed) Result {
		return Result{Status: gatewayv1.StatusActive, Reason: "Active", Serving: true,
			Message: fmt.Sprintf("%d replica(s) ready.", o.ReadyReplicas)}
	}},
}

func startupTimedOut(o Observed) bool {
	return !o.EverReady && o.ReadyReplicas == 0 && o.StartupTimeout > 0 && !o.DeployingSince.IsZero() &&
		o.Now.Sub(o.DeployingSince) >= o.StartupTimeout
}

func wakeTimedOut(o Observed) bool {
	return o.WakePending && o.ReadyReplicas == 0 && o.EverReady && o.StartupTimeout > 0 && !o.WakeRequestedAt.IsZero() &&
		o.Now.Sub(o.WakeRequestedAt) >= o.StartupTimeout
}

// Derive returns the status of the first check that matches o.
func Derive(o Observed) Result {
	r, _ := derive(o)
	return r
}

func derive(o Observed) (Result, string) {
	for _, c := range checks {
		if c.match(o) {
			return c.then(o), c.name
		}
	}
	panic("deploystatus: the last check matches everything")
}
