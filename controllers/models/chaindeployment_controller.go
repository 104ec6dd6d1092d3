package models

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/controllers/autoscale"
	"github.com/modelgate/modelgate/controllers/kit"
)

// ChainDeploymentReconciler runs each chainlet of a ChainDeployment as a ModelDeployment it owns, hands every
// chainlet the addresses of the others (MODELGATE_CHAINLET_URLS), and reports the chainlets' statuses and the
// worst of them. Its finalizer removes the chainlet deployments before the ChainDeployment goes.
type ChainDeploymentReconciler struct {
	client.Client
	Recorder record.EventRecorder
}

// SetupWithManager registers the reconciler and its watches on mgr.
func (r *ChainDeploymentReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&gatewayv1.ChainDeployment{}).
		Owns(&gatewayv1.ModelDeployment{}).
		// A promotion changes which environments a chain deployment serves.
		Watches(&gatewayv1.Chain{}, handler.EnqueueRequestsFromMapFunc(r.deploymentsOfChain)).
		WithOptions(opts).
		Complete(kit.RequeueOnConflict{Reconciler: r})
}

func (r *ChainDeploymentReconciler) deploymentsOfChain(ctx context.Context, obj client.Object) []reconcile.Request {
	return kit.ListRequests(ctx, r, &gatewayv1.ChainDeploymentList{}, nil,
		client.InNamespace(obj.GetNamespace()), client.MatchingFields{gatewayv1.FieldChainDeploymentChain: obj.GetName()})
}

// Reconcile runs and observes one ChainDeployment, or finalizes one being deleted.
func (r *ChainDeploymentReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return kit.Prelude[*gatewayv1.ChainDeployment]{Kind: "ChainDeployment", Status: func(cd *gatewayv1.ChainDeployment) any { return cd.Status },
		Deleting: r.finalize, Prepare: kit.AddFinalizer[*gatewayv1.ChainDeployment](r.Client, "ChainDeployment", gatewayv1.ChainDeploymentFinalizer)}.
		Run(ctx, r.Client, req, r.reconcileChainlets)
}

// reconcileChainlets runs every chainlet and reports their statuses.
func (r *ChainDeploymentReconciler) reconcileChainlets(ctx context.Context, cd *gatewayv1.ChainDeployment) (ctrl.Result, error) {
	chain := &gatewayv1.Chain{}
	switch err := r.Get(ctx, client.ObjectKey{Namespace: cd.Namespace, Name: cd.Spec.ChainID}, chain); {
	case apierrors.IsNotFound(err):
		chain = nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("failed to read Chain %s/%s: %w", cd.Namespace, cd.Spec.ChainID, err)
	}

	statuses := make([]gatewayv1.ChainletStatus, 0, len(cd.Spec.Chainlets))
	var entrypoint *gatewayv1.ModelDeployment
	others := make([]*gatewayv1.ModelDeployment, 0, len(cd.Spec.Chainlets))
	for i := range cd.Spec.Chainlets {
		c := &cd.Spec.Chainlets[i]
		md, err := r.ensureChainlet(ctx, cd, c)
		if err != nil {
			return ctrl.Result{}, err
		}
		if c.Name == cd.Spec.Entrypoint {
			entrypoint = md
		} else {
			others = append(others, md)
		}
		statuses = append(statuses, gatewayv1.ChainletStatus{Name: c.Name, Deployment: md.Name, Status: md.Status.Status,
			ActiveReplicaCount: md.Status.ActiveReplicaCount, URL: cd.ChainletURL(c), ChainletURLs: cd.ChainletURLs(c.Name)})
	}
	cd.Status = ChainDeploymentStatusOf(cd, chain, statuses, cd.Status)
	if entrypoint != nil {
		if err := r.wakeWithEntrypoint(ctx, cd, entrypoint, others); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, nil
}

// wakeWithEntrypoint carries a wake of the entrypoint to the other chainlets that were scaled down before it.
// They are called at their own addresses, past gatewayd, so a call held for the entrypoint (or a queued async
// request) is the only sign that they are needed again. Their floor of one replica keeps them up while the chain
// deployment serves; this covers the one way they reach zero: a promotion scaled the whole chain deployment down,
// and it is called again (promoted back, or by id). The copy is the entrypoint's own annotation value, so a
// chainlet scaled down after that wake stays down.
func (r *ChainDeploymentReconciler) wakeWithEntrypoint(ctx context.Context, cd *gatewayv1.ChainDeployment, entrypoint *gatewayv1.ModelDeployment, others []*gatewayv1.ModelDeployment) error {
	wake := autoscale.AnnotationTime(entrypoint, gatewayv1.AnnotationWakeRequestedAt)
	if wake.IsZero() {
		return nil
	}
	for _, md := range others {
		down := autoscale.AnnotationTime(md, gatewayv1.AnnotationScaledDownAt)
		if down.IsZero() || !wake.After(down) || !wake.After(autoscale.AnnotationTime(md, gatewayv1.AnnotationWakeRequestedAt)) {
			continue
		}
		patch := client.MergeFrom(md.DeepCopy())
		if md.Annotations == nil {
			md.Annotations = map[string]string{}
		}
		md.Annotations[gatewayv1.AnnotationWakeRequestedAt] = entrypoint.Annotations[gatewayv1.AnnotationWakeRequestedAt]
		if err := r.Patch(ctx, md, patch); err != nil {
			return fmt.Errorf("failed to wake chainlet deployment %s/%s with its entrypoint: %w", md.Namespace, md.Name, err)
		}
		r.Recorder.Eventf(cd, corev1.EventTypeNormal, "WokeChainlet", "Woke ModelDeployment %s with the entrypoint %s.", md.Name, entrypoint.Name)
	}
	return nil
}

// ChainDeploymentStatusOf is the status of cd given each chainlet's; prev keeps the conditions' transition times.
func ChainDeploymentStatusOf(cd *gatewayv1.ChainDeployment, chain *gatewayv1.Chain, chainlets []gatewayv1.ChainletStatus, prev gatewayv1.ChainDeploymentStatus) gatewayv1.ChainDeploymentStatus {
	out := gatewayv1.ChainDeploymentStatus{ObservedGeneration: cd.Generation, Chainlets: chainlets, Conditions: prev.Conditions}
	all := make([]gatewayv1.DeploymentStatus, len(chainlets))
	var waiting []string
	for i, c := range chainlets {
		all[i] = c.Status
		if c.Status != gatewayv1.StatusActive && c.Status != gatewayv1.StatusScaledToZero {
			waiting = append(waiting, fmt.Sprintf("%s is %s", c.Name, gatewayv1.WorstStatus(c.Status)))
		}
	}
	out.Status = gatewayv1.WorstStatus(all...)
	if chain != nil {
		out.Environments = chain.EnvironmentsOf(cd.Name)
	}
	c := kit.Ready(fmt.Sprintf("All %d chainlets can serve.", len(chainlets)))
	switch {
	case chain == nil:
		c = kit.Check{Reason: "ChainNotFound", Failed: true, Message: fmt.Sprintf("Chain %s does not exist.", cd.Spec.ChainID)}
	case len(waiting) > 0:
		c = kit.Check{Reason: "ChainletsNotReady", Failed: true, Message: "Chainlets not ready: " + strings.Join(waiting, ", ") + "."}
	}
	kit.SetReady(&out.Conditions, c, cd.Generation)
	return out
}

// ensureChainlet creates the ModelDeployment of chainlet c, or brings the existing one's autoscaling (the one
// field of a chainlet that may change) up to date, and returns it.
func (r *ChainDeploymentReconciler) ensureChainlet(ctx context.Context, cd *gatewayv1.ChainDeployment, c *gatewayv1.Chainlet) (*gatewayv1.ModelDeployment, error) {
	want := DesiredChainletDeployment(cd, c)
	if err := controllerutil.SetControllerReference(cd, want, r.Scheme()); err != nil {
		return nil, err
	}
	md := &gatewayv1.ModelDeployment{}
	err := r.Get(ctx, client.ObjectKeyFromObject(want), md)
	if apierrors.IsNotFound(err) {
		if err := r.Create(ctx, want); err != nil {
			return nil, fmt.Errorf("failed to create ModelDeployment %s/%s for chainlet %s: %w", want.Namespace, want.Name, c.Name, err)
		}
		r.Recorder.Eventf(cd, corev1.EventTypeNormal, "CreatedChainletDeployment", "Created ModelDeployment %s for chainlet %s.", want.Name, c.Name)
		return want, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read ModelDeployment %s/%s: %w", want.Namespace, want.Name, err)
	}
	if !metav1.IsControlledBy(md, cd) {
		return nil, fmt.Errorf("ModelDeployment %s/%s exists and is not controlled by ChainDeployment %s", md.Namespace, md.Name, cd.Name)
	}
	if !equality.Semantic.DeepEqual(md.Spec.Autoscaling, want.Spec.Autoscaling) {
		md.Spec.Autoscaling = want.Spec.Autoscaling
		if err := r.Update(ctx, md); err != nil {
			return nil, fmt.Errorf("failed to update the autoscaling of ModelDeployment %s/%s: %w", md.Namespace, md.Name, err)
		}
	}
	return md, nil
}

// DesiredChainletDeployment is the ModelDeployment that runs chainlet c of cd: its source, with
// MODELGATE_CHAINLET_URLS in the environment of a container source, and its autoscaling, with at least one
// replica for a chainlet other than the entrypoint (the others call it past gatewayd, which is what wakes a
// deployment scaled to zero; wakeWithEntrypoint covers a scale-down by promote, which the floor does not hold).
func DesiredChainletDeployment(cd *gatewayv1.ChainDeployment, c *gatewayv1.Chainlet) *gatewayv1.ModelDeployment {
	src := *c.Source.DeepCopy()
	if src.Container != nil {
		env := make([]gatewayv1.EnvVar, 0, len(src.Container.Env)+1)
		for _, e := range src.Container.Env {
			if e.Name != gatewayv1.EnvChainletURLs {
				env = append(env, e)
			}
		}
		src.Container.Env = append(env, gatewayv1.EnvVar{Name: gatewayv1.EnvChainletURLs, Value: cd.ChainletURLsJSON(c.Name)})
	}
	as := c.Autoscaling.DeepCopy()
	if c.Name != cd.Spec.Entrypoint && src.URL == "" {
		if as == nil {
			as = &gatewayv1.Autoscaling{}
		}
		if as.MinReplica == nil || *as.MinReplica < 1 {
			as.MinReplica = ptr.To[int32](1)
		}
		if as.MaxReplica != nil && *as.MaxReplica < *as.MinReplica {
			as.MaxReplica = ptr.To(*as.MinReplica)
		}
	}
	return &gatewayv1.ModelDeployment{
		ObjectMeta: metav1.ObjectMeta{
			Name: cd.ChainletDeploymentName(c.Name), Namespace: cd.Namespace,
			Labels: map[string]string{
				gatewayv1.LabelModel:           gatewayv1.ChainletModelID(cd.Spec.ChainID),
				gatewayv1.LabelChain:           cd.Spec.ChainID,
				gatewayv1.LabelChainDeployment: cd.Name,
				gatewayv1.LabelChainlet:        c.Name,
			},
		},
		Spec: gatewayv1.ModelDeploymentSpec{ModelID: gatewayv1.ChainletModelID(cd.Spec.ChainID), Source: src, Autoscaling: as},
	}
}

// finalize deletes the chainlet deployments of cd and releases it once none is left.
func (r *ChainDeploymentReconciler) finalize(ctx context.Context, cd *gatewayv1.ChainDeployment) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(cd, gatewayv1.ChainDeploymentFinalizer) {
		return ctrl.Result{}, nil
	}
	var list gatewayv1.ModelDeploymentList
	if err := r.List(ctx, &list, client.InNamespace(cd.Namespace), client.MatchingLabels{gatewayv1.LabelChainDeployment: cd.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("failed to list the chainlet deployments of ChainDeployment %s/%s: %w", cd.Namespace, cd.Name, err)
	}
	left := 0
	for i := range list.Items {
		md := &list.Items[i]
		if !metav1.IsControlledBy(md, cd) {
			continue
		}
		left++
		if md.DeletionTimestamp.IsZero() {
			if err := r.Delete(ctx, md); err != nil && !apierrors.IsNotFound(err) {
				return ctrl.Result{}, fmt.Errorf("failed to delete ModelDeployment %s/%s: %w", md.Namespace, md.Name, err)
			}
		}
	}
	if left > 0 {
		// The deletions of the chainlet deployments (their own finalizers first) requeue this one.
		return ctrl.Result{}, nil
	}
	controllerutil.RemoveFinalizer(cd, gatewayv1.ChainDeploymentFinalizer)
	return ctrl.Result{}, client.IgnoreNotFound(r.Update(ctx, cd))
}
