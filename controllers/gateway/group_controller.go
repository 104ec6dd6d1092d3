package gateway

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/modelgate/modelgate/api/tracing"
	gatewayv1 "github.com/modelgate/modelgate/api/v1alpha1"
	"github.com/modelgate/modelgate/api/v1alpha1/hierarchy"
	"github.com/modelgate/modelgate/controllers/kit"
	"github.com/modelgate/modelgate/controllers/translate"
)

// GroupReconciler resolves a Group's place in its tree into status (depth, root, effective models, Ready) and
// cascades its deletion to its subtree and keys.
type GroupReconciler struct {
	client.Client
	// APIReader reads past the cache: whether the group a child was admitted under is really gone.
	APIReader client.Reader
	// Recorder receives the Events of groups; none are sent when nil.
	Recorder record.EventRecorder
	// Tracer gives each reconcile a span (kit.Traced); none when nil.
	Tracer *tracing.Tracer
}

// SetupWithManager registers the reconciler and its watches on mgr.
func (r *GroupReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&gatewayv1.Group{}).
		// A group's verdict depends on its ancestors and on groups sharing its external id; a deleting group
		// waits for its children and keys to be gone.
		Watches(&gatewayv1.Group{}, handler.EnqueueRequestsFromMapFunc(r.dependents),
			builder.WithPredicates(kit.SpecOrLifecycleChanged)).
		Watches(&gatewayv1.APIKey{}, handler.EnqueueRequestsFromMapFunc(r.groupOfKey),
			builder.WithPredicates(kit.SpecOrLifecycleChanged)).
		WithOptions(opts).
		Complete(kit.RequeueOnConflict{Reconciler: kit.Trace(r.Tracer, "Group", r)})
}

// Reconcile follows the Cluster API order: get, finalizer, one deferred status patch, then small phases.
func (r *GroupReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return kit.Prelude[*gatewayv1.Group]{Kind: "Group", Status: func(g *gatewayv1.Group) any { return g.Status },
		Deleting: r.reconcileDelete, Prepare: r.prepare}.Run(ctx, r.Client, req, r.reconcileStatus)
}

// prepare deletes a group whose bound parent is gone, and adds the finalizer.
func (r *GroupReconciler) prepare(ctx context.Context, g *gatewayv1.Group) (ctrl.Result, bool, error) {
	deleted, res, err := deleteUnbound(ctx, r.Client, r.APIReader, r.Recorder, g, "Group", g.ParentID())
	if err != nil || deleted {
		return res, true, err
	}
	if !controllerutil.ContainsFinalizer(g, gatewayv1.Finalizer) {
		before := g.DeepCopy()
		controllerutil.AddFinalizer(g, gatewayv1.Finalizer)
		if err := r.Patch(ctx, g, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, true, fmt.Errorf("failed to add finalizer to Group %s/%s: %w", g.Namespace, g.Name, err)
		}
	}
	return res, false, nil
}

// reconcileStatus judges g with the same rules the snapshot uses.
func (r *GroupReconciler) reconcileStatus(ctx context.Context, g *gatewayv1.Group) (ctrl.Result, error) {
	groups, err := r.relevant(ctx, g)
	if err != nil {
		return ctrl.Result{}, err
	}
	v := translate.NewGroups(groups).Judge(g)

	g.Status.ObservedGeneration = g.Generation
	g.Status.Depth, g.Status.RootGroupID, g.Status.EffectiveModels = 0, "", nil
	if v.Resolved {
		g.Status.Depth = int32(len(v.Chain))
		g.Status.RootGroupID = v.Chain.Root().Name
		g.Status.EffectiveModels = hierarchy.Resolve(v.Chain)
	}
	kit.SetReady(&g.Status.Conditions, kit.Check{Reason: v.Reason, Message: v.Message, Failed: !v.Ready}, g.Generation)
	r.setLimitConflict(g, v.Conflict)
	return ctrl.Result{}, nil
}

// setLimitConflict reports a threshold above an ancestor's as the LimitConflict condition, with an Event when the
// conflict appears, and clears it once the conflict is gone. The condition is absent on a group that never had one.
func (r *GroupReconciler) setLimitConflict(g *gatewayv1.Group, conflict string) {
	had := meta.IsStatusConditionTrue(g.Status.Conditions, gatewayv1.ConditionLimitConflict)
	switch {
	case conflict != "":
		meta.SetStatusCondition(&g.Status.Conditions, metav1.Condition{Type: gatewayv1.ConditionLimitConflict, Status: metav1.ConditionTrue,
			Reason: gatewayv1.ReasonChildExceedsParentLimit, Message: conflict, ObservedGeneration: g.Generation})
		if !had && r.Recorder != nil {
			r.Recorder.Event(g, corev1.EventTypeWarning, gatewayv1.ReasonChildExceedsParentLimit, conflict)
		}
	case meta.FindStatusCondition(g.Status.Conditions, gatewayv1.ConditionLimitConflict) != nil:
		meta.SetStatusCondition(&g.Status.Conditions, metav1.Condition{Type: gatewayv1.ConditionLimitConflict, Status: metav1.ConditionFalse,
			Reason: gatewayv1.ReasonNoConflict, Message: "No declared limit is above an ancestor's.", ObservedGeneration: g.Generation})
	}
}

// relevant gathers the groups that g's verdict depends on, which gives the same verdict as judging against the
// whole workspace at a cost of a few cache reads instead of one pass over every group: g's chain of ancestors
// (deletion, completeness, validity), and for each group on it the other groups claiming its external id, with
// their own chains (a claimant below a group being deleted no longer counts).
func (r *GroupReconciler) relevant(ctx context.Context, g *gatewayv1.Group) ([]*gatewayv1.Group, error) {
	found := map[string]*gatewayv1.Group{g.Name: g}
	get := func(name string) (*gatewayv1.Group, error) {
		if x, ok := found[name]; ok {
			return x, nil
		}
		x := &gatewayv1.Group{}
		if err := r.Get(ctx, client.ObjectKey{Namespace: g.Namespace, Name: name}, x); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, fmt.Errorf("failed to read Group %s/%s: %w", g.Namespace, name, err)
		}
		found[name] = x
		return x, nil
	}
	// walkUp reads start's chain as hierarchy.Index.Chain would follow it: to a root, a missing parent, a cycle,
	// or one step past the maximum depth.
	walkUp := func(start *gatewayv1.Group) ([]*gatewayv1.Group, error) {
		ancestors, err := hierarchy.FetchAncestors(start, get)
		return append([]*gatewayv1.Group{start}, ancestors...), err
	}
	chain, err := walkUp(g)
	if err != nil {
		return nil, err
	}
	for _, m := range chain {
		var same gatewayv1.GroupList
		if err := r.List(ctx, &same, client.InNamespace(g.Namespace),
			client.MatchingFields{gatewayv1.FieldGroupExternalID: m.Spec.ExternalEntityID}, kit.UnsafeNoCopy); err != nil {
			return nil, fmt.Errorf("failed to list Groups by external id: %w", err)
		}
		for i := range same.Items {
			o := &same.Items[i]
			if _, ok := found[o.Name]; ok {
				continue
			}
			found[o.Name] = o
			if _, err := walkUp(o); err != nil {
				return nil, err
			}
		}
	}
	out := make([]*gatewayv1.Group, 0, len(found))
	for _, x := range found {
		out = append(out, x)
	}
	return out, nil
}

// dependents maps a changed group to the groups whose verdict may follow from it: every descendant (an
// ancestor's limits reach grandchildren, and a parent created late completes its children's chains), the groups
// sharing its external id, and its parent, which may be waiting for it to be deleted.
func (r *GroupReconciler) dependents(ctx context.Context, obj client.Object) []reconcile.Request {
	g, ok := obj.(*gatewayv1.Group)
	if !ok {
		return nil
	}
	var out []reconcile.Request
	if p := g.ParentID(); p != "" {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: g.Namespace, Name: p}})
	}
	seen := map[string]bool{g.Name: true}
	queue := []string{g.Name}
	for len(queue) > 0 {
		var children gatewayv1.GroupList
		if err := r.List(ctx, &children, client.InNamespace(g.Namespace), client.MatchingFields{gatewayv1.FieldGroupParent: queue[0]}, kit.UnsafeNoCopy); err != nil {
			logf.FromContext(ctx).Error(err, "Failed to list child groups", "group", queue[0])
			break
		}
		queue = queue[1:]
		for i := range children.Items {
			c := &children.Items[i]
			if !seen[c.Name] {
				seen[c.Name] = true
				queue = append(queue, c.Name)
				out = append(out, kit.Requests(c)...)
			}
		}
	}
	var same gatewayv1.GroupList
	if err := r.List(ctx, &same, client.InNamespace(g.Namespace), client.MatchingFields{gatewayv1.FieldGroupExternalID: g.Spec.ExternalEntityID}, kit.UnsafeNoCopy); err != nil {
		logf.FromContext(ctx).Error(err, "Failed to list groups by external id")
	}
	for i := range same.Items {
		if same.Items[i].Name != g.Name {
			out = append(out, kit.Requests(&same.Items[i])...)
		}
	}
	return out
}

// groupOfKey brings a deleting group back when one of its keys is gone.
func (r *GroupReconciler) groupOfKey(_ context.Context, obj client.Object) []reconcile.Request {
	k, ok := obj.(*gatewayv1.APIKey)
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: k.Namespace, Name: k.Spec.GroupID}}}
}
