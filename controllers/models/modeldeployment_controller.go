package models

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/modelgate/modelgate/api/tracing"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/autoscale"
	"github.com/modelgate/modelgate/controllers/deploystatus"
	"github.com/modelgate/modelgate/controllers/kit"
)

// ModelDeploymentReconciler runs a ModelDeployment's server (a Deployment and Service for a container source,
// the scale of scaleTargetRef for a service source, nothing for a url source), observes it, and writes the status
// that package deploystatus derives, with an Event for every transition.
type ModelDeploymentReconciler struct {
	client.Client
	Recorder      record.EventRecorder
	Clock         clock.PassiveClock
	Probe         Prober
	ProbeInterval time.Duration
	// Tracer gives each reconcile a span (kit.Traced); none when nil.
	Tracer *tracing.Tracer
}

// SetupWithManager registers the reconciler and its watches on mgr.
func (r *ModelDeploymentReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Probe == nil {
		r.Probe = HTTPProber(nil)
	}
	if r.ProbeInterval <= 0 {
		r.ProbeInterval = DefaultProbeInterval
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&gatewayv1.ModelDeployment{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		// A promotion changes which environments a deployment serves.
		Watches(&gatewayv1.Model{}, handler.EnqueueRequestsFromMapFunc(r.deploymentsOfModel)).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(r.deploymentsOfSlice)).
		// A service source's Service is not owned: its creation, or a port renamed, must reach the deployment too.
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(r.deploymentsOfService)).
		WithOptions(opts).
		Complete(kit.RequeueOnConflict{Reconciler: kit.Trace(r.Tracer, "ModelDeployment", r)})
}

// Reconcile runs and observes one ModelDeployment, or removes the workload of one being deleted.
func (r *ModelDeploymentReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return kit.Prelude[*gatewayv1.ModelDeployment]{Kind: "ModelDeployment", Status: func(md *gatewayv1.ModelDeployment) any { return md.Status },
		Deleting: r.finalize, Prepare: r.ensureMetadata}.Run(ctx, r.Client, req, r.reconcileDeployment)
}

// reconcileDeployment runs the source, observes it and reports the derived status.
func (r *ModelDeploymentReconciler) reconcileDeployment(ctx context.Context, md *gatewayv1.ModelDeployment) (ctrl.Result, error) {
	now := r.Clock.Now()
	r.startAttempt(md, now)
	model, err := r.model(ctx, md)
	if err != nil {
		return ctrl.Result{}, err
	}
	if model != nil {
		md.Status.Environments = model.EnvironmentsOf(md.Name)
	} else {
		md.Status.Environments = nil
	}

	scaledDown, wakePending := autoscale.ScaleState(md)
	obs, err := r.observe(ctx, md, autoscale.Replicas(md, autoscale.EffectiveBounds(md, model)))
	if err != nil {
		return ctrl.Result{}, err
	}
	obs.Deleting = !md.DeletionTimestamp.IsZero()
	obs.Active = md.Spec.IsActive()
	obs.ScaledDown, obs.WakePending = scaledDown, wakePending
	if wakePending {
		obs.WakeRequestedAt = autoscale.AnnotationTime(md, gatewayv1.AnnotationWakeRequestedAt)
	}
	// Ready now counts as ready once: a replica that became ready while its rollout reports a failure is not
	// DEPLOY_FAILED.
	if obs.ReadyReplicas > 0 && md.Status.ReadySince == nil {
		md.Status.ReadySince = &metav1.Time{Time: now}
	}
	obs.EverReady = md.Status.ReadySince != nil
	obs.DeployingSince = md.Status.DeployingSince.Time
	obs.StartupTimeout = time.Duration(md.Spec.StartupTimeoutSeconds) * time.Second
	obs.Now = now
	r.report(md, deploystatus.Derive(obs), obs.ReadyReplicas)
	return r.requeue(md, obs), nil
}

// finalize removes the workload of a container source, then the finalizer.
func (r *ModelDeploymentReconciler) finalize(ctx context.Context, md *gatewayv1.ModelDeployment) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(md, gatewayv1.ModelDeploymentFinalizer) {
		return ctrl.Result{}, nil
	}
	if err := r.deleteWorkload(ctx, md); err != nil {
		return ctrl.Result{}, err
	}
	controllerutil.RemoveFinalizer(md, gatewayv1.ModelDeploymentFinalizer)
	return ctrl.Result{}, client.IgnoreNotFound(r.Update(ctx, md))
}

// ensureMetadata sets the model label and, for a container source, the finalizer. done means the object was
// written and this pass ends.
func (r *ModelDeploymentReconciler) ensureMetadata(ctx context.Context, md *gatewayv1.ModelDeployment) (_ ctrl.Result, done bool, err error) {
	container := md.Spec.Source.Container != nil
	changed := false
	if md.Labels[gatewayv1.LabelModel] != md.Spec.ModelID {
		if md.Labels == nil {
			md.Labels = map[string]string{}
		}
		md.Labels[gatewayv1.LabelModel] = md.Spec.ModelID
		changed = true
	}
	if container && controllerutil.AddFinalizer(md, gatewayv1.ModelDeploymentFinalizer) {
		changed = true
	}
	if !changed {
		return ctrl.Result{}, false, nil
	}
	if err := r.Update(ctx, md); err != nil {
		return ctrl.Result{}, true, fmt.Errorf("failed to label ModelDeployment %s/%s: %w", md.Namespace, md.Name, err)
	}
	return ctrl.Result{}, true, nil
}

// deleteWorkload removes the Deployment and Service of a container source. Owner references would let a garbage
// collector do it too; the finalizer makes it happen without one, before the ModelDeployment goes.
func (r *ModelDeploymentReconciler) deleteWorkload(ctx context.Context, md *gatewayv1.ModelDeployment) error {
	name := md.WorkloadName()
	for _, obj := range []client.Object{
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: md.Namespace}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: md.Namespace}},
	} {
		if err := r.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("failed to delete %T %s/%s: %w", obj, md.Namespace, name, err)
		}
	}
	r.Recorder.Eventf(md, corev1.EventTypeNormal, "WorkloadDeleted", "Deleted Deployment and Service %s.", name)
	return nil
}

func (r *ModelDeploymentReconciler) deploymentsOfModel(ctx context.Context, obj client.Object) []reconcile.Request {
	return kit.ListRequests(ctx, r, &gatewayv1.ModelDeploymentList{}, nil,
		client.InNamespace(obj.GetNamespace()), client.MatchingFields{gatewayv1.FieldDeploymentModel: obj.GetName()})
}

func (r *ModelDeploymentReconciler) deploymentsOfSlice(ctx context.Context, obj client.Object) []reconcile.Request {
	svc := obj.GetLabels()[discoveryv1.LabelServiceName]
	if svc == "" {
		return nil
	}
	return r.deploymentsBehind(ctx, obj.GetNamespace(), svc)
}

func (r *ModelDeploymentReconciler) deploymentsOfService(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.deploymentsBehind(ctx, obj.GetNamespace(), obj.GetName())
}

// deploymentsBehind lists the deployments that gatewayd routes to Service svc.
func (r *ModelDeploymentReconciler) deploymentsBehind(ctx context.Context, namespace, svc string) []reconcile.Request {
	return kit.ListRequests(ctx, r, &gatewayv1.ModelDeploymentList{}, nil, client.InNamespace(namespace), client.MatchingFields{IndexDeploymentService: svc})
}

// routedService is the Service gatewayd routes a deployment to, "" for a url source.
func routedService(md *gatewayv1.ModelDeployment) string {
	switch src := md.Spec.Source; {
	case src.Container != nil:
		return md.WorkloadName()
	case src.Service != nil:
		return src.Service.Name
	}
	return ""
}
