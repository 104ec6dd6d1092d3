package controllers

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/autoscale"
	"github.com/modelgate/modelgate/controllers/deploystatus"
	"github.com/modelgate/modelgate/controllers/kit"
)

// IndexDeploymentService indexes ModelDeployments by the Service gatewayd routes them to (the one a container
// source creates, or a service source's), so an EndpointSlice change reaches the deployments behind it.
const IndexDeploymentService = "routing.service"

// DefaultProbeInterval is how often a url source's readiness path is probed.
const DefaultProbeInterval = 10 * time.Second

// Prober GETs a url source's readiness address and reports whether it answered 2xx.
type Prober func(ctx context.Context, url string) error

// HTTPProber is the Prober the manager runs: a GET with a 5 s timeout that follows no redirect.
func HTTPProber(client *http.Client) Prober {
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	return func(ctx context.Context, url string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return fmt.Errorf("GET %s answered %d", url, resp.StatusCode)
		}
		return nil
	}
}

// ModelDeploymentReconciler runs a ModelDeployment's server (a Deployment and Service for a container source,
// the scale of scaleTargetRef for a service source, nothing for a url source), observes it, and writes the status
// that package deploystatus derives, with an Event for every transition.
type ModelDeploymentReconciler struct {
	client.Client
	Recorder      record.EventRecorder
	Clock         clock.PassiveClock
	Probe         Prober
	ProbeInterval time.Duration
}

func (r *ModelDeploymentReconciler) setup(mgr ctrl.Manager, opts controller.Options) error {
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
		Complete(kit.RequeueOnConflict{Reconciler: r})
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

// model reads the deployment's Model, whose environments it serves and whose environment autoscaling
// overrides its own; nil when the Model does not exist.
func (r *ModelDeploymentReconciler) model(ctx context.Context, md *gatewayv1.ModelDeployment) (*gatewayv1.Model, error) {
	m := &gatewayv1.Model{}
	err := r.Get(ctx, client.ObjectKey{Namespace: md.Namespace, Name: md.Spec.ModelID}, m)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read Model %s/%s: %w", md.Namespace, md.Spec.ModelID, err)
	}
	return m, nil
}

// observe runs the source with replicas and reports what it sees.
func (r *ModelDeploymentReconciler) observe(ctx context.Context, md *gatewayv1.ModelDeployment, replicas int32) (deploystatus.Observed, error) {
	switch src := md.Spec.Source; {
	case src.Container != nil:
		return r.observeContainer(ctx, md, replicas)
	case src.Service != nil:
		return r.observeService(ctx, md, replicas)
	default:
		return r.observeURL(ctx, md), nil
	}
}

func (r *ModelDeploymentReconciler) observeContainer(ctx context.Context, md *gatewayv1.ModelDeployment, replicas int32) (deploystatus.Observed, error) {
	want, err := desiredDeployment(md, replicas)
	if err != nil {
		return deploystatus.Observed{ProgressFailed: true, ProgressMessage: err.Error()}, nil
	}
	svc := desiredService(md)
	md.Status.Service, md.Status.PortName = svc.Name, gatewayv1.ModelPortName
	if err := r.ensureOwned(ctx, md, svc, func(existing client.Object) bool { return false }); err != nil {
		return deploystatus.Observed{}, err
	}
	dep := want.DeepCopy()
	if err := r.ensureOwned(ctx, md, dep, func(existing client.Object) bool {
		d := existing.(*appsv1.Deployment)
		nonce := want.Spec.Template.Annotations[annotationRetryNonce]
		if replicasOf(d.Spec.Replicas) == replicas && d.Spec.Template.Annotations[annotationRetryNonce] == nonce {
			return false
		}
		d.Spec.Replicas = want.Spec.Replicas
		if d.Spec.Template.Annotations == nil {
			d.Spec.Template.Annotations = map[string]string{}
		}
		d.Spec.Template.Annotations[annotationRetryNonce] = nonce
		return true
	}); err != nil {
		return deploystatus.Observed{}, err
	}
	s := dep.Status
	obs := deploystatus.Observed{Replicas: s.Replicas, ReadyReplicas: s.ReadyReplicas, UpdatedReplicas: s.UpdatedReplicas}
	if s.ObservedGeneration < dep.Generation {
		// The Deployment controller has not seen the latest spec yet. Its counts still say what runs, but its
		// conditions judge the old spec: a retry would fail again at once on the ProgressDeadlineExceeded it
		// means to clear. Nor is this a rollout: most new generations only change replicas (activation, scale
		// to zero), and a template change shows in updatedReplicas once the Deployment controller acts on it.
		return obs, nil
	}
	for _, c := range s.Conditions {
		if (c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded") ||
			(c.Type == appsv1.DeploymentReplicaFailure && c.Status == corev1.ConditionTrue) {
			obs.ProgressFailed, obs.ProgressMessage = true, c.Message
		}
	}
	return obs, nil
}

// replicasOf reads a Deployment's replicas, which default to 1.
func replicasOf(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

// ensureOwned creates obj with md as its controller, or reads the existing one into obj and, when mutate says
// it changed it, updates it.
func (r *ModelDeploymentReconciler) ensureOwned(ctx context.Context, md *gatewayv1.ModelDeployment, obj client.Object, mutate func(existing client.Object) bool) error {
	kind := strings.TrimPrefix(fmt.Sprintf("%T", obj), "*v1.")
	if err := controllerutil.SetControllerReference(md, obj, r.Scheme()); err != nil {
		return err
	}
	desired := obj.DeepCopyObject().(client.Object)
	err := r.Get(ctx, client.ObjectKeyFromObject(obj), obj)
	if apierrors.IsNotFound(err) {
		if err := r.Create(ctx, desired); err != nil {
			return fmt.Errorf("failed to create %s %s/%s: %w", kind, obj.GetNamespace(), obj.GetName(), err)
		}
		r.Recorder.Eventf(md, corev1.EventTypeNormal, "Created"+kind, "Created %s %s.", kind, obj.GetName())
		// The cache may not hold the new object yet: take what the API server answered.
		reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(desired).Elem())
		return nil
	}
	if err != nil {
		return fmt.Errorf("failed to read %s %s/%s: %w", kind, obj.GetNamespace(), obj.GetName(), err)
	}
	if !metav1.IsControlledBy(obj, md) {
		return fmt.Errorf("%s %s/%s exists and is not controlled by ModelDeployment %s", kind, obj.GetNamespace(), obj.GetName(), md.Name)
	}
	if mutate(obj) {
		if err := r.Update(ctx, obj); err != nil {
			return fmt.Errorf("failed to update %s %s/%s: %w", kind, obj.GetNamespace(), obj.GetName(), err)
		}
	}
	return nil
}

func (r *ModelDeploymentReconciler) observeService(ctx context.Context, md *gatewayv1.ModelDeployment, replicas int32) (deploystatus.Observed, error) {
	src := md.Spec.Source.Service
	svc := &corev1.Service{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: md.Namespace, Name: src.Name}, svc); err != nil {
		if apierrors.IsNotFound(err) {
			md.Status.Service, md.Status.PortName = "", ""
			return deploystatus.Observed{ProgressFailed: true, ProgressMessage: fmt.Sprintf("Service %s does not exist.", src.Name)}, nil
		}
		return deploystatus.Observed{}, fmt.Errorf("failed to read Service %s/%s: %w", md.Namespace, src.Name, err)
	}
	i := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == src.Port })
	if i < 0 {
		md.Status.Service, md.Status.PortName = "", ""
		return deploystatus.Observed{ProgressFailed: true, ProgressMessage: fmt.Sprintf("Service %s has no port %d.", src.Name, src.Port)}, nil
	}
	md.Status.Service, md.Status.PortName = svc.Name, svc.Spec.Ports[i].Name
	if ref := src.ScaleTargetRef; ref != nil {
		if err := r.scale(ctx, md, ref, replicas); err != nil {
			return deploystatus.Observed{}, err
		}
	}
	var slices discoveryv1.EndpointSliceList
	if err := r.List(ctx, &slices, client.InNamespace(md.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
		return deploystatus.Observed{}, fmt.Errorf("failed to list EndpointSlices of Service %s/%s: %w", md.Namespace, svc.Name, err)
	}
	var obs deploystatus.Observed
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			obs.Replicas++
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				obs.ReadyReplicas++
			}
		}
	}
	obs.UpdatedReplicas = obs.Replicas
	if !md.Spec.IsActive() && src.ScaleTargetRef == nil {
		// Nothing to stop: activation only gates traffic.
		obs.Replicas, obs.UpdatedReplicas = 0, 0
	}
	return obs, nil
}

// scale sets the replicas of ref through its scale subresource.
func (r *ModelDeploymentReconciler) scale(ctx context.Context, md *gatewayv1.ModelDeployment, ref *gatewayv1.ScaleTargetRef, replicas int32) error {
	target := &unstructured.Unstructured{}
	target.SetAPIVersion(ref.APIVersion)
	target.SetKind(ref.Kind)
	target.SetNamespace(md.Namespace)
	target.SetName(ref.Name)
	// The client reads and writes a subresource of an unstructured object only as unstructured, so the Scale
	// is one too (autoscaling/v1, whatever the target's group).
	sc := &unstructured.Unstructured{}
	sc.SetGroupVersionKind(autoscalingv1.SchemeGroupVersion.WithKind("Scale"))
	if err := r.SubResource("scale").Get(ctx, target, sc); err != nil {
		return fmt.Errorf("failed to read the scale of %s %s/%s: %w", ref.Kind, md.Namespace, ref.Name, err)
	}
	from, _, err := unstructured.NestedInt64(sc.Object, "spec", "replicas")
	if err != nil {
		return fmt.Errorf("failed to read the scale of %s %s/%s: %w", ref.Kind, md.Namespace, ref.Name, err)
	}
	if from == int64(replicas) {
		return nil
	}
	if err := unstructured.SetNestedField(sc.Object, int64(replicas), "spec", "replicas"); err != nil {
		return err
	}
	if err := r.SubResource("scale").Update(ctx, target, client.WithSubResourceBody(sc)); err != nil {
		return fmt.Errorf("failed to scale %s %s/%s to %d: %w", ref.Kind, md.Namespace, ref.Name, replicas, err)
	}
	r.Recorder.Eventf(md, corev1.EventTypeNormal, "Scaled", "Scaled %s %s from %d to %d replica(s).", ref.Kind, ref.Name, from, replicas)
	return nil
}

// observeURL probes a url source's readiness path. An inactive one is not probed: activation only gates traffic.
func (r *ModelDeploymentReconciler) observeURL(ctx context.Context, md *gatewayv1.ModelDeployment) deploystatus.Observed {
	md.Status.Service, md.Status.PortName = "", ""
	if !md.Spec.IsActive() {
		return deploystatus.Observed{}
	}
	obs := deploystatus.Observed{Replicas: 1, UpdatedReplicas: 1}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := r.Probe(pctx, strings.TrimRight(md.Spec.Source.URL, "/")+md.Spec.ReadinessPath); err != nil {
		logf.FromContext(ctx).V(1).Info("Readiness probe failed", "error", err.Error())
		return obs
	}
	obs.ReadyReplicas = 1
	return obs
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

func (r *ModelDeploymentReconciler) deploymentsOfModel(ctx context.Context, obj client.Object) []reconcile.Request {
	var list gatewayv1.ModelDeploymentList
	if err := r.List(ctx, &list, client.InNamespace(obj.GetNamespace()), client.MatchingFields{gatewayv1.FieldDeploymentModel: obj.GetName()}, kit.UnsafeNoCopy); err != nil {
		logf.FromContext(ctx).Error(err, "Failed to list the deployments of a Model", "model", obj.GetName())
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, kit.Requests(&list.Items[i])...)
	}
	return out
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
	var list gatewayv1.ModelDeploymentList
	if err := r.List(ctx, &list, client.InNamespace(namespace), client.MatchingFields{IndexDeploymentService: svc}, kit.UnsafeNoCopy); err != nil {
		logf.FromContext(ctx).Error(err, "Failed to list the deployments of a Service", "service", svc)
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, kit.Requests(&list.Items[i])...)
	}
	return out
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
