package models

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/deploystatus"
)

// startAttempt restarts the deploy clock on creation, on activation and on a retry: a deployment that has to
// start again is judged by its startup timeout again, and is not "ready once" until it is.
func (r *ModelDeploymentReconciler) startAttempt(md *gatewayv1.ModelDeployment, now time.Time) {
	st := &md.Status
	reactivated := md.Spec.IsActive() && (st.Status == gatewayv1.StatusInactive || st.Status == gatewayv1.StatusDeactivating)
	retried := md.Spec.RetryNonce != st.ObservedRetryNonce
	if st.DeployingSince != nil && !reactivated && !retried {
		return
	}
	if retried {
		r.Recorder.Eventf(md, corev1.EventTypeNormal, "Retry", "Retrying the deployment (retryNonce %d).", md.Spec.RetryNonce)
	}
	st.DeployingSince = &metav1.Time{Time: now}
	st.ReadySince = nil
	st.ObservedRetryNonce = md.Spec.RetryNonce
}

// report writes the derived status and the Ready condition, with an Event when the status changes.
func (r *ModelDeploymentReconciler) report(md *gatewayv1.ModelDeployment, res deploystatus.Result, ready int32) {
	prev := md.Status.Status
	md.Status.Status = res.Status
	md.Status.ActiveReplicaCount = ready
	md.Status.ObservedGeneration = md.Generation
	status := metav1.ConditionFalse
	if res.Serving {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&md.Status.Conditions, metav1.Condition{Type: gatewayv1.ConditionReady, Status: status,
		Reason: res.Reason, Message: res.Message, ObservedGeneration: md.Generation})
	if prev == res.Status {
		return
	}
	kind := corev1.EventTypeNormal
	if res.Status == gatewayv1.StatusDeployFailed || res.Status == gatewayv1.StatusUnhealthy {
		kind = corev1.EventTypeWarning
	}
	from := string(prev)
	if from == "" {
		from = "(new)"
	}
	r.Recorder.Eventf(md, kind, res.Reason, "%s → %s: %s", from, res.Status, res.Message)
}

// requeue probes url sources again after ProbeInterval, and looks again at the startup deadline of a deployment
// that is not ready yet, or of a wake.
func (r *ModelDeploymentReconciler) requeue(md *gatewayv1.ModelDeployment, obs deploystatus.Observed) ctrl.Result {
	var after time.Duration
	if md.Spec.Source.URL != "" && md.Spec.IsActive() {
		after = r.ProbeInterval
	}
	deadline := func(since time.Time) {
		if left := since.Add(obs.StartupTimeout).Sub(obs.Now); left > 0 && (after == 0 || left < after) {
			after = left + time.Second
		}
	}
	if !obs.EverReady && obs.ReadyReplicas == 0 && obs.Active && !obs.DeployingSince.IsZero() {
		deadline(obs.DeployingSince)
	}
	// A wake that brings no replica up in time is UNHEALTHY: look again then.
	if obs.WakePending && obs.ReadyReplicas == 0 && !obs.WakeRequestedAt.IsZero() {
		deadline(obs.WakeRequestedAt)
	}
	return ctrl.Result{RequeueAfter: after}
}
