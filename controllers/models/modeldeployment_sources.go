package models

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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/deploystatus"
)

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
